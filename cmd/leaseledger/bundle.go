package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

func init() { extraCommands = append(extraCommands, newBundleCmd) }

func newBundleCmd(a *app) *cobra.Command {
	var keyFile, origin, rng, activation, out string
	var consistentWith []string
	cmd := &cobra.Command{
		Use:   "bundle (--range A-B | --activation ID) --key K -o FILE",
		Short: "Export an evidence bundle: events with their inclusion proofs against a signed checkpoint",
		Long: `bundle writes an evidence bundle of the ledger in --data-dir: a signed
checkpoint of the durable head, a signed manifest naming the selection (the
range A-B, or every event of one activation) and the exported seqs, then each
selected event's canonical bytes with its RFC 6962 inclusion proof against the
checkpoint (JSON Lines; the format is in docs/compliance.md). Someone holding
only the bundle and the verifier key checks it with 'verify --bundle' and
rebuilds its verdicts with 'audit --bundle', without the data directory.

Alone, a bundle proves only what its own signed checkpoint says. With
--consistent-with FILE (a signed checkpoint the auditor already holds: an
earlier 'checkpoint' output, or a witness's state file; repeatable) the header
also carries an RFC 6962 consistency proof from that checkpoint to the
bundle's, which 'verify --bundle … --checkpoint FILE' and 'audit --bundle …
--checkpoint FILE' require. A log that does not extend it (a rewritten,
re-sealed tail; a rollback) cannot be exported with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			signer, err := readSigner(keyFile)
			if err != nil {
				return err
			}
			var sel verify.BundleSelector
			switch {
			case (rng == "") == (activation == ""):
				return errors.New("give one of --range A-B and --activation ID")
			case activation != "":
				sel.Activation = activation
			default:
				if sel.From, sel.To, err = parseRange(rng); err != nil {
					return err
				}
			}
			for _, file := range consistentWith {
				b, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("--consistent-with: %w", err)
				}
				sel.ConsistentWith = append(sel.ConsistentWith, b)
			}
			l, err := openReadOnly(a)
			if err != nil {
				return err
			}
			defer l.Close()
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return fmt.Errorf("-o: %w", err)
			}
			rep, err := verify.WriteBundle(cmd.Context(), f, l, signer, origin, sel)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(out) // a partial bundle is worthless
				return err
			}
			fmt.Fprintf(a.stdout, "bundle %s: %d events (%s) proven against checkpoint %s size %d\n",
				out, rep.Manifest.Events, selectorText(rep.Manifest), rep.Checkpoint.Origin, rep.Checkpoint.Size)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyFile, "key", "", "file holding the signer key (from 'checkpoint keygen')")
	f.StringVar(&origin, "origin", "leaseledger", "the checkpoint's origin line: who keeps this log")
	f.StringVar(&rng, "range", "", `export the events of seqs A through B, "A-B"`)
	f.StringVar(&activation, "activation", "", "export every event of this activation")
	f.StringVarP(&out, "out", "o", "", "bundle file to create (refused if it exists)")
	f.StringArrayVar(&consistentWith, "consistent-with", nil, "a signed checkpoint file (from 'checkpoint', or a witness's state) the bundle must prove it extends (repeatable)")
	_ = cmd.MarkFlagRequired("key")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// readSigner reads a signer key file made by 'checkpoint keygen'.
func readSigner(file string) (note.Signer, error) {
	skey, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	signer, err := note.NewSigner(strings.TrimSpace(string(skey)))
	if err != nil {
		return nil, fmt.Errorf("--key: not a signer key: %w", err)
	}
	return signer, nil
}

// parseRange reads "A-B" (or "A": one event).
func parseRange(s string) (from, to ledger.Seq, err error) {
	a, b, isRange := strings.Cut(s, "-")
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := x, error(nil)
	if isRange {
		y, err2 = strconv.ParseUint(b, 10, 64)
	}
	if err1 != nil || err2 != nil || x == 0 || x > y {
		return 0, 0, fmt.Errorf("--range %q: want A-B with 1 ≤ A ≤ B", s)
	}
	return ledger.Seq(x), ledger.Seq(y), nil
}

// selectorText names a bundle's selection for people.
func selectorText(m verify.Manifest) string {
	if m.Activation != "" {
		return "activation " + m.Activation
	}
	return fmt.Sprintf("range %d-%d", m.From, m.To)
}

// parseVerifier reads a verifier key given on the command line.
func parseVerifier(vkey string) (note.Verifier, error) {
	if vkey == "" {
		return nil, errors.New("--bundle needs --vkey (the verifier key printed by 'checkpoint keygen')")
	}
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return nil, fmt.Errorf("--vkey: %w", err)
	}
	return v, nil
}

// openBundle opens a bundle file and checks its header (signatures,
// manifest) with the verifier key, and that it proves it extends each
// signed checkpoint file of trusted (--checkpoint); the caller closes the
// file.
func openBundle(file, vkey string, trusted []string) (*os.File, *verify.BundleReader, error) {
	v, err := parseVerifier(vkey)
	if err != nil {
		return nil, nil, err
	}
	olds, err := readCheckpoints(trusted, vkey)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("--bundle: %w", err)
	}
	br, err := verify.NewBundleReader(f, v)
	for i := 0; err == nil && i < len(olds); i++ {
		if err = br.Extends(olds[i]); err != nil {
			err = fmt.Errorf("--checkpoint %s: %w", trusted[i], err)
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, bundleFailed(err)
	}
	return f, br, nil
}

// bundleFailed gives a failed bundle verification exit status 1 (as
// verify's findings); other errors keep theirs.
func bundleFailed(err error) error {
	if errors.Is(err, verify.ErrVerify) {
		return &exitError{code: 1, err: err}
	}
	return err
}

// verifyBundle is 'verify --bundle': it checks every line of the bundle
// with only the verifier key, no data directory.
func verifyBundle(a *app, file, vkey string, trusted []string) error {
	f, br, err := openBundle(file, vkey, trusted)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		_, _, err := br.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return bundleFailed(err)
		}
	}
	m, c := br.Manifest(), br.Checkpoint()
	fmt.Fprintf(a.stdout, "ok: bundle of %d events (%s) verified against checkpoint %s size %d, head %d %s%s\n",
		m.Events, selectorText(m), c.Origin, c.Size, c.Size, c.Head, extendsText(len(trusted)))
	return nil
}

// extendsText says how many trusted checkpoints a bundle was proven to
// extend.
func extendsText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", which extends the %d --checkpoint(s) given", n)
}

// auditBundle is 'audit --bundle': it verifies the bundle line by line
// while folding its events, and prints the audit only once every line has
// verified — with the same output and exit status as 'audit' on a data
// directory. With no activation (and no --all) it audits the activation of
// an activation bundle, or summarises a range bundle.
func auditBundle(cmd *cobra.Command, a *app, file, vkey string, trusted, args []string, all, asJSON bool, keep, limit int) error {
	f, br, err := openBundle(file, vkey, trusted)
	if err != nil {
		return err
	}
	defer f.Close()
	m := br.Manifest()
	id := m.Activation
	if len(args) == 1 {
		if m.Activation != "" && args[0] != m.Activation {
			return &exitError{code: 1, err: fmt.Errorf("the bundle holds activation %s only", m.Activation)}
		}
		id = args[0]
	}
	all = all || id == ""
	if !all && !events.ValidID(id) {
		return &exitError{code: 1, err: errors.New("activation: want " + events.IDRule)}
	}
	if keep <= 0 {
		keep = audit.All
	}
	fold := audit.NewFold(id, audit.Options{Timeline: keep})
	if limit <= 0 {
		limit = audit.All
	}
	// The whole bundle's audit: an audit stream fed by Add keeps every
	// activation (the bundle has no index to settle them by).
	stream := live.NewStream(live.StreamOptions{Audit: true, Limit: limit})
	pb := newProgress(a.stderr, "audit")
	var done uint64
	for {
		if err := cmd.Context().Err(); err != nil {
			return err
		}
		seq, raw, err := br.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return bundleFailed(err)
		}
		if all {
			if err := stream.Add(seq, raw); err != nil {
				return err
			}
			if done++; done%4096 == 0 {
				pb.update(done, uint64(m.Events))
			}
			continue
		}
		if m.Activation == "" { // a range bundle: only id's events
			if env, err := events.Decode(raw); err != nil || env.Activation != id {
				continue // verified above: never undecodable
			}
		}
		if err := fold.AddRaw(raw); err != nil {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
	}
	c := br.Checkpoint()
	fmt.Fprintf(a.stderr, "leaseledger: bundle %s verified: %d events (%s) against checkpoint %s size %d%s\n",
		file, m.Events, selectorText(m), c.Origin, c.Size, extendsText(len(trusted)))
	if all {
		pb.update(done, done)
		pb.finish()
		sum, err := stream.Summary()
		if err != nil {
			return err
		}
		return printSummaryOut(a, sum, asJSON)
	}
	return printActivation(a, fold, id, asJSON)
}
