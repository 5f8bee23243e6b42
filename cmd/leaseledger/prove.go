package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

func init() { extraCommands = append(extraCommands, newProveCmd) }

// maxProofFile bounds a proof file read by 'prove check': an inclusion proof
// is one event (at most events.MaxEventBytes) and 64 hashes; a consistency
// proof two checkpoints and 128 hashes.
const maxProofFile = 4 << 20

func newProveCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prove",
		Short: "Make and check RFC 6962 inclusion and consistency proofs against signed checkpoints",
		Long: `prove makes self-contained proof files (JSON) against signed checkpoints made by
'checkpoint': 'prove inclusion' that one event is in the log a checkpoint
commits to, 'prove consistency' that the log an older checkpoint commits to
is a prefix of the one a newer checkpoint commits to. 'prove check' verifies
proof files with only the verifier key — no data directory.`,
	}
	var (
		seq          uint64
		cpFile, out  string
		oldF, newF   string
		outC, vkeyIn string
	)
	incl := &cobra.Command{
		Use:   "inclusion",
		Short: "Prove that event --seq is in the log the signed --checkpoint commits to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			signed, err := os.ReadFile(cpFile)
			if err != nil {
				return fmt.Errorf("--checkpoint: %w", err)
			}
			l, err := openReadOnly(a)
			if err != nil {
				return err
			}
			defer l.Close()
			p, err := verify.ProveInclusion(cmd.Context(), l, signed, ledger.Seq(seq))
			if err != nil {
				return err
			}
			return writeProof(a, out, p)
		},
	}
	incl.Flags().Uint64Var(&seq, "seq", 0, "the event to prove")
	incl.Flags().StringVar(&cpFile, "checkpoint", "", "signed checkpoint file (from 'checkpoint')")
	incl.Flags().StringVarP(&out, "out", "o", "", "write the proof to this file (default stdout)")
	_ = incl.MarkFlagRequired("seq")
	_ = incl.MarkFlagRequired("checkpoint")

	cons := &cobra.Command{
		Use:   "consistency",
		Short: "Prove that the log the --old checkpoint commits to is a prefix of the one --new commits to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := os.ReadFile(oldF)
			if err != nil {
				return fmt.Errorf("--old: %w", err)
			}
			n, err := os.ReadFile(newF)
			if err != nil {
				return fmt.Errorf("--new: %w", err)
			}
			l, err := openReadOnly(a)
			if err != nil {
				return err
			}
			defer l.Close()
			p, err := verify.ProveConsistency(cmd.Context(), l, o, n)
			if err != nil {
				return err
			}
			return writeProof(a, outC, p)
		},
	}
	cons.Flags().StringVar(&oldF, "old", "", "the older signed checkpoint file")
	cons.Flags().StringVar(&newF, "new", "", "the newer signed checkpoint file")
	cons.Flags().StringVarP(&outC, "out", "o", "", "write the proof to this file (default stdout)")
	_ = cons.MarkFlagRequired("old")
	_ = cons.MarkFlagRequired("new")

	check := &cobra.Command{
		Use:   "check --vkey KEY FILE...",
		Short: "Verify proof files with only the verifier key (no data directory)",
		Long: `check verifies each proof file made by 'prove inclusion' or 'prove consistency':
the checkpoints' signatures under --vkey (the verifier key printed by
'checkpoint keygen', or a file holding it) and the proof. It prints one line
per file and exits 1 if any does not verify, naming the event concerned.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			v, err := verifierKey(vkeyIn)
			if err != nil {
				return err
			}
			failed := 0
			for _, f := range files {
				msg, err := checkProofFile(f, v)
				if err != nil {
					failed++
					fmt.Fprintf(a.stderr, "leaseledger: %s: FAILED: %v\n", f, err)
					continue
				}
				fmt.Fprintf(a.stdout, "%s: ok: %s\n", f, msg)
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d proof files do not verify", failed, len(files))}
			}
			return nil
		},
	}
	check.Flags().StringVar(&vkeyIn, "vkey", "", "verifier key (from 'checkpoint keygen'), or a file holding it")
	_ = check.MarkFlagRequired("vkey")
	cmd.AddCommand(incl, cons, check)
	return cmd
}

// verifierKey reads --vkey: the key itself, or a file holding it.
func verifierKey(s string) (note.Verifier, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "+") {
		if b, err := os.ReadFile(s); err == nil {
			s = strings.TrimSpace(string(b))
		}
	}
	v, err := note.NewVerifier(s)
	if err != nil {
		return nil, fmt.Errorf("--vkey: not a verifier key: %w", err)
	}
	return v, nil
}

// writeProof writes p as one compact JSON line (compact: the event's
// canonical bytes stay verbatim) to file, or stdout when file is empty.
func writeProof(a *app, file string, p any) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if file == "" {
		_, err = a.stdout.Write(b)
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// checkProofFile verifies one proof file and says what it proved; a
// failure names the event (inclusion) or the sizes (consistency). The file
// must be exactly the canonical encoding 'prove' writes
// (verify.DecodeInclusionProof): no changed byte of it verifies.
func checkProofFile(file string, v note.Verifier) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProofFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxProofFile {
		return "", fmt.Errorf("larger than %d bytes: not a proof file", maxProofFile)
	}
	var head struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return "", errors.New("not a JSON proof file")
	}
	switch head.Format {
	case verify.InclusionFormat:
		p, err := verify.DecodeInclusionProof(b)
		if err != nil {
			return "", fmt.Errorf("malformed inclusion proof: %w", err)
		}
		c, err := p.Verify(v)
		if err != nil {
			return "", fmt.Errorf("inclusion proof of seq %d: %w", p.Seq, err)
		}
		return fmt.Sprintf("event %d is in the log %s of %d events", p.Seq, c.Origin, c.Size), nil
	case verify.ConsistencyFormat:
		p, err := verify.DecodeConsistencyProof(b)
		if err != nil {
			return "", fmt.Errorf("malformed consistency proof: %w", err)
		}
		o, n, err := p.Verify(v)
		if err != nil {
			return "", fmt.Errorf("consistency proof: %w", err)
		}
		return fmt.Sprintf("the log %s of %d events is a prefix of the one of %d events", o.Origin, o.Size, n.Size), nil
	}
	return "", errors.New("not a leaseledger proof file (unknown format)")
}
