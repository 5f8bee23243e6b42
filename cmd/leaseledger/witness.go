package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/witness"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

func init() { extraCommands = append(extraCommands, newWitnessCmd) }

// Exit statuses of `witness` when the log showed what it must not.
const (
	exitFork     = 4
	exitRollback = 5
	// exitNoProof: serve signs checkpoints but cannot prove them
	// consistent with the accepted one (witnessProofAttempts failures in
	// a row): the witness cannot verify the log, which is not a verdict.
	exitNoProof = 6
)

// Bounds of the witness's follow loop.
const (
	// witnessReconnectWait is the pause between reconnection attempts.
	witnessReconnectWait = 250 * time.Millisecond
	// witnessQueue bounds checkpoints received and not yet checked; more
	// are dropped by the NATS client (a later one supersedes them).
	witnessQueue = 64
	// witnessProofAttempts bounds consecutive checkpoints that come
	// without a consistency proof (the proof API failed or refused, asked
	// again every --retry): past it the witness exits with exitNoProof
	// rather than follow, blind, a log it cannot check.
	witnessProofAttempts = 5
)

func newWitnessCmd(a *app) *cobra.Command {
	var url, user, password, host, vkey, state string
	var retry time.Duration
	cmd := &cobra.Command{
		Use:   "witness",
		Short: "Follow serve's signed checkpoints and exit non-zero on a fork or a rollback",
		Long: `witness connects to a running serve (started with --checkpoint-key), asks it
to publish a checkpoint, and checks those published on ` + busclient.CheckpointSubject + `.
Each must carry a valid signature under --vkey and the origin of the last one
accepted; a larger one must come with a consistency proof from the last one
(asked of serve's proof API and verified here). The last accepted checkpoint
is kept in --state (replaced atomically), so a restarted witness goes on from
it. On a rollback (fewer events than accepted) it exits with status 5, on a
fork (the same size with another tree, or a proof that does not verify) with
status 4, printing both checkpoints; the state file is left as it was, so it
detects the same thing again after a restart. If serve signs a larger
checkpoint but cannot prove it consistent with the last one accepted ` + strconv.Itoa(witnessProofAttempts) + `
times in a row (asked again every --retry), it exits with status 6: it
cannot verify the log. It reconnects when serve restarts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if password == "" {
				password = os.Getenv("LEASELEDGER_WITNESS_PASSWORD")
			}
			v, err := note.NewVerifier(strings.TrimSpace(vkey))
			if err != nil {
				return fmt.Errorf("--vkey: %w", err)
			}
			if retry <= 0 {
				return errors.New("--retry must be positive")
			}
			w, err := witness.Open(state, v)
			if err != nil {
				return err
			}
			if c, ok := w.Latest(); ok {
				fmt.Fprintf(a.stdout, "leaseledger: witness: state at size %d\n", c.Size)
			} else {
				fmt.Fprintln(a.stdout, "leaseledger: witness: no state yet: the first checkpoint is trusted")
			}
			if host != "" && !events.ValidID(host) {
				return fmt.Errorf("--host-id %q: want %s", host, events.IDRule)
			}
			return followCheckpoints(cmd.Context(), a, w, url, user, password, host, retry)
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "bus", fmt.Sprintf("nats://127.0.0.1:%d", bus.DefaultPort), "NATS URL of serve")
	f.StringVar(&user, "user", "", "bus user (empty: anonymous)")
	f.StringVar(&password, "password", "", "password of --user (env LEASELEDGER_WITNESS_PASSWORD)")
	f.StringVar(&host, "host-id", "", "the --host-id of the 'serve' to witness, in a fleet (its checkpoints are on leaseledger.hosts.<id>.checkpoints)")
	f.StringVar(&vkey, "vkey", "", "verifier key of the checkpoints (from 'checkpoint keygen')")
	f.StringVar(&state, "state", "", "file keeping the last accepted checkpoint")
	f.DurationVar(&retry, "retry", 2*time.Second, "ask again this long after a failed request")
	_ = cmd.MarkFlagRequired("vkey")
	_ = cmd.MarkFlagRequired("state")
	return cmd
}

// proofClient is the witness's Prover: serve's proof API.
type proofClient struct{ c *control.Client }

func (p proofClient) ConsistencyProof(ctx context.Context, from, to ledger.Seq) ([][]byte, error) {
	return p.c.ConsistencyProof(ctx, uint64(from), uint64(to))
}

// followCheckpoints runs the witness until ctx ends (nil) or the log
// shows a fork or a rollback (an exitError).
func followCheckpoints(ctx context.Context, a *app, w *witness.Witness, url, user, password, host string, retry time.Duration) error {
	connected := make(chan struct{}, 1)
	signal := func() {
		select {
		case connected <- struct{}{}:
		default:
		}
	}
	opts := append(busclient.UserOptions(user, password),
		nats.Name("leaseledger-witness"), nats.MaxReconnects(-1), nats.ReconnectWait(witnessReconnectWait), nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(*nats.Conn) { signal() }),
		nats.ReconnectHandler(func(*nats.Conn) {
			a.logger.Warn("witness: reconnected", "url", url)
			signal()
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { a.logger.Warn("witness: disconnected", "err", err) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { a.logger.Warn("witness: bus", "err", err) }),
	)
	nc, err := busclient.Connect(url, opts...) // stays with url (busclient.ConnectOptions)
	if err != nil {
		return fmt.Errorf("--bus: %w", err)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, witnessQueue)
	if _, err := nc.ChanSubscribe(busclient.HostSubject(host, busclient.CheckpointSubject), msgs); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	client := control.NewClient(nc, user).WithHost(host)
	prover := proofClient{client}
	// Ask for a checkpoint to be published at once, and at every
	// (re)connection (the subscription is in place before either).
	ask := time.NewTimer(0)
	defer ask.Stop()
	noProof := 0 // consecutive checkpoints without a consistency proof
	check := func(signed []byte) error {
		out, err := w.Observe(ctx, signed, prover)
		if err == nil || !errors.Is(err, witness.ErrProver) {
			noProof = 0
		}
		switch {
		case err == nil:
			if out != witness.Same {
				c, _ := w.Latest()
				fmt.Fprintf(a.stdout, "leaseledger: witness: accepted size %d (%s)\n", c.Size, out)
			}
			return nil
		case errors.Is(err, witness.ErrFork):
			return &exitError{code: exitFork, err: fmt.Errorf("FORK: the log does not extend the history this witness accepted: %w", err)}
		case errors.Is(err, witness.ErrRollback):
			return &exitError{code: exitRollback, err: fmt.Errorf("ROLLBACK: the log holds fewer events than this witness accepted: %w", err)}
		case errors.Is(err, witness.ErrProver):
			// Not a verdict: ask again later, a bounded number of times.
			if noProof++; noProof >= witnessProofAttempts {
				var we *witness.Error
				from, to := "?", "?"
				if errors.As(err, &we) && we.Old != nil && we.New != nil {
					from, to = strconv.FormatUint(uint64(we.Old.Size), 10), strconv.FormatUint(uint64(we.New.Size), 10)
				}
				return &exitError{code: exitNoProof, err: fmt.Errorf("cannot verify: no consistency proof for sizes %s→%s after %d attempts: %w", from, to, noProof, err)}
			}
			a.logger.Warn("witness: no consistency proof; will ask again", "attempt", noProof, "of", witnessProofAttempts, "err", err)
			ask.Reset(retry)
			return nil
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-connected:
			ask.Reset(0)
		case <-ask.C:
			// The reply is not checked: serve publishes the same
			// checkpoint on the subject, in order with the others, while
			// the reply travels another way and may overtake a smaller
			// checkpoint published before it — which would then look
			// like a rollback.
			if _, err := client.Checkpoint(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				a.logger.Warn("witness: no checkpoint; will ask again", "err", err)
				ask.Reset(retry)
			}
		case m := <-msgs:
			if err := check(m.Data); err != nil {
				return err
			}
		}
	}
}
