package main

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newHeadCmd(a *app) *cobra.Command {
	var (
		natsURL string
		creds   natsCreds
	)
	cmd := &cobra.Command{
		Use:   "head",
		Short: "Print the durable head as '<seq> <hash>'",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if natsURL != "" {
				nc, err := creds.connect(natsURL)
				if err != nil {
					return err
				}
				defer nc.Close()
				h, err := creds.client(nc).Head(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%d %s\n", h.Seq, h.Hash)
				return nil
			}
			l, err := openReadOnly(a)
			if err != nil {
				return err
			}
			defer l.Close()
			h := l.Head()
			fmt.Fprintf(a.stdout, "%d %s\n", h.Seq, h.Hash)
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", "", "ask a running 'serve' at this NATS URL instead of opening --data-dir")
	creds.flags(cmd.Flags())
	return cmd
}

func newTailCmd(a *app) *cobra.Command {
	var (
		natsURL    string
		creds      natsCreds
		fromSeq    uint64
		kind       string
		activation string
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Follow a running 'serve' over NATS, printing events as JSON Lines",
		Long: `tail subscribes to a running 'serve'. With --from-seq it first catches up
through the replay API from that seq, then goes live, with no gap and no
duplicate; without it, it prints only events committed from now on.

Against a running collector's fleet bus (collect --port), --host-id h follows
host h's mirror; --fleet follows every host at once, each event printed as
{"host":"h","event":<event>} (--from-seq then applies to each host).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Follows for as long as it runs: a restarted serve is found
			// again on the same URL (never another server of its cluster:
			// busclient.ConnectOptions), and what was committed meanwhile
			// is caught up by replay (busclient.Client.Tail).
			nc, err := creds.connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(appendReconnectWait))
			if err != nil {
				return err
			}
			defer nc.Close()
			c := creds.client(nc)
			from := ledger.Seq(fromSeq)
			if fleetSet(cmd) {
				if creds.host != "" {
					return errors.New("tail --fleet follows every host of the fleet bus: it takes no --host-id")
				}
				err := tailFleet(cmd.Context(), a, nc, creds.user, from, cmd.Flags().Changed("from-seq"), busclient.TailFilter{Kind: events.Kind(kind), Activation: activation})
				if errors.Is(err, cmd.Context().Err()) {
					return nil // interrupted: a normal end
				}
				return err
			}
			if !cmd.Flags().Changed("from-seq") {
				h, err := c.Head(cmd.Context())
				if err != nil {
					return err
				}
				from = h.Seq + 1
			}
			out := bufio.NewWriter(a.stdout)
			err = c.Tail(cmd.Context(), from, busclient.TailFilter{Kind: events.Kind(kind), Activation: activation},
				func(_ ledger.Seq, raw []byte) error {
					out.Write(raw)
					out.WriteByte('\n')
					return out.Flush()
				})
			if errors.Is(err, cmd.Context().Err()) {
				return nil // interrupted: a normal end
			}
			return err
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&fromSeq, "from-seq", 0, "catch up from this seq through replay before going live")
	busFilterFlags(f, &natsURL, &kind, &activation, &creds)
	return cmd
}

func newReplayCmd(a *app) *cobra.Command {
	var (
		natsURL          string
		creds            natsCreds
		from, to         uint64
		kind, activation string
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Print stored events of a running 'serve' as JSON Lines, through its replay API",
		Long: `replay pulls a range of stored events from a running 'serve' chunk by chunk
(bounded replies; the client asks for the next chunk only after handling one)
and prints them as JSON Lines. Unlike tail it stops at the end of the range
(by default the head at the time of the last chunk).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, err := creds.connect(natsURL)
			if err != nil {
				return err
			}
			defer nc.Close()
			out := bufio.NewWriterSize(a.stdout, 256<<10)
			_, err = creds.client(nc).Replay(cmd.Context(), ledger.Seq(from), ledger.Seq(to),
				busclient.TailFilter{Kind: events.Kind(kind), Activation: activation},
				func(_ ledger.Seq, raw []byte) error {
					out.Write(raw)
					return out.WriteByte('\n')
				})
			if ferr := out.Flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&from, "from", 1, "first seq")
	f.Uint64Var(&to, "to", 0, "last seq (0: the head)")
	busFilterFlags(f, &natsURL, &kind, &activation, &creds)
	return cmd
}

func newVerifyCmd(a *app) *cobra.Command {
	var (
		quiet       bool
		anchors     []string
		checkpoints []string
		vkey        string
		bundle      string
		tree        bool
		allowRef    bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Re-hash the whole chain and validate every event against its schema",
		Long: `verify reads every event of the ledger in --data-dir: each must decode
canonically, sit under its own seq with no gap, hash correctly, link to its
predecessor and validate against its JSON Schema; the stored head must name
the last event; every index entry must match, and (unless --tree=false) every
stored Merkle node the proofs are served from. It runs on every core in
memory bounded independently of the log's length (verify.MemoryBound). The
exit status is 1 on any fault and the message names the first bad seq.

With --bundle FILE --vkey KEY it checks an evidence bundle (from 'bundle')
instead, with no data directory: both signatures, every event line against
its inclusion proof, and exactly the seqs its manifest lists. Alone, that
proves only what the bundle's own checkpoint says; with --checkpoint FILE (a
signed checkpoint kept earlier, or a witness's state file) the bundle must
also carry a consistency proof showing its history extends that checkpoint
(made with 'bundle --consistent-with FILE'), else it fails as a fork.

With --fleet (--data-dir a collector directory) every mirror is verified,
and a host the collector refused (hosts/<h>/REFUSED.json) fails the run
with exit status 7 even though its mirror verifies, unless --allow-refused
says refused hosts are expected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if allowRef && !fleetSet(cmd) {
				return errors.New("--allow-refused applies to --fleet verify only")
			}
			if bundle != "" {
				if len(anchors) > 0 {
					return errors.New("--bundle carries its own checkpoint: it takes no --expect-head (give --checkpoint FILE instead)")
				}
				return verifyBundle(a, bundle, vkey, checkpoints)
			}
			var report verify.Progress
			var p *progress
			if !quiet {
				p = newProgress(a.stderr, "verify")
				report = p.update
			}
			var err error
			vo := verify.Options{Progress: report, Tree: tree}
			for _, s := range anchors {
				h, err := parseHead(s)
				if err != nil {
					return err
				}
				vo.Anchors = append(vo.Anchors, h)
			}
			if vo.Checkpoints, err = readCheckpoints(checkpoints, vkey); err != nil {
				return err
			}
			start := time.Now()
			rep, err := verify.Dir(cmd.Context(), a.dataDir, vo)
			if p != nil {
				p.finish()
			}
			if err != nil && (errors.Is(err, ledger.ErrNoLedger) || errors.Is(err, ledger.ErrLocked)) {
				return err // nothing was verified
			}
			noteReadOnly(a, rep.Unlocked)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			fmt.Fprintf(a.stdout, "ok: %d events verified, %d index entries, head %d %s (%s)\n",
				rep.Events, rep.Indexes, rep.Head.Seq, rep.Head.Hash, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.Flags().StringArrayVar(&anchors, "expect-head", nil, `a head recorded earlier, "<seq> <hash>" or "<seq>:<hash>" (as 'head' prints it); `+
		"the chain must contain it — this is what reveals a tail cut off with m/head rewritten (repeatable)")
	cmd.Flags().StringArrayVar(&checkpoints, "checkpoint", nil, "a signed checkpoint file (from 'checkpoint') the log must match; with --bundle, one the bundle must prove it extends (repeatable)")
	cmd.Flags().StringVar(&vkey, "vkey", "", "verifier key for --checkpoint and --bundle (from 'checkpoint keygen')")
	cmd.Flags().BoolVar(&tree, "tree", true, "also check the stored Merkle node index (what proofs are served from) against the events")
	cmd.Flags().StringVar(&bundle, "bundle", "", "verify this evidence bundle (from 'bundle') instead of --data-dir: needs only --vkey")
	cmd.Flags().BoolVar(&allowRef, allowRefusedFlag, false, "with --fleet: a host the collector refused does not fail the run (without it the exit status is 7)")
	return cmd
}

// parseHead reads "<seq> <hash>" or "<seq>:<hash>".
func parseHead(s string) (ledger.Head, error) {
	seqText, hashText, ok := strings.Cut(strings.TrimSpace(strings.Replace(s, ":", " ", 1)), " ")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	var h ledger.Head
	if !ok || err != nil || seq == 0 || h.Hash.UnmarshalText([]byte(strings.TrimSpace(hashText))) != nil {
		return ledger.Head{}, fmt.Errorf("--expect-head %q: want \"<seq> <hash>\" with a 64-hex-digit hash", s)
	}
	h.Seq = ledger.Seq(seq)
	return h, nil
}

func newExportCmd(a *app) *cobra.Command {
	var (
		from, to                  uint64
		kind, activation, session string
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write stored events as JSON Lines (canonical bytes), by range and filters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := openReadOnly(a)
			if err != nil {
				return err
			}
			defer l.Close()
			out := bufio.NewWriterSize(a.stdout, 256<<10)
			q := ledger.Query{From: ledger.Seq(from), To: ledger.Seq(to), Kind: events.Kind(kind), Activation: activation, Session: session}
			err = l.Scan(cmd.Context(), q, func(_ ledger.Seq, raw []byte) error {
				out.Write(raw)
				return out.WriteByte('\n')
			})
			if ferr := out.Flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&from, "from", 1, "first seq")
	f.Uint64Var(&to, "to", 0, "last seq (0: the head)")
	f.StringVar(&kind, "kind", "", "only events of this kind")
	f.StringVar(&activation, "activation", "", "only events of this activation")
	f.StringVar(&session, "session", "", "only events of this session")
	return cmd
}

// busFilterFlags are the flags of the commands that read a running 'serve'
// over NATS with the bus's filters (tail, replay).
func busFilterFlags(f flagSet, natsURL, kind, activation *string, creds *natsCreds) {
	f.StringVar(natsURL, "nats", fmt.Sprintf("nats://127.0.0.1:%d", bus.DefaultPort), "NATS URL of a running 'serve'")
	f.StringVar(kind, "kind", "", "only events of this kind, e.g. lease.revoked")
	f.StringVar(activation, "activation", "", "only events of this activation")
	creds.flags(f)
}
