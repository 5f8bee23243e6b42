package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

// controlRuntime is the control API's view of serve's runtime: the lease
// manager for revocation and reaping, the gateway for ending sessions
// (an MCP session is ended by the gateway, which releases its runtime
// scope), and serve's reload of --config (serveRuntime.reload, as SIGHUP).
type controlRuntime struct {
	mgr    *runtime.Manager
	gw     *gateway.Gateway
	reload func(context.Context) (reloadChange, error)
	// stdout and stderr are serve's: a reload is reported there as a
	// SIGHUP's is, the cause of a failure in full (the reply has only
	// static text).
	stdout, stderr io.Writer
}

var _ control.Runtime = controlRuntime{}

// The reload reply's lists hold every name a configuration may have.
const _ = uint(control.MaxReloadNames - gateway.MaxServers)

// configNotReloaded begins serveRuntime.reload's error when the file
// failed to load (nothing changed).
const configNotReloaded = "config not reloaded (the previous one stays in force)"

// Revoke implements control.Runtime: the runtime's operator revocation,
// which accepts a config name or a server id and reports finding nothing
// (ErrNoLease) or a denial of a session not open (ErrSessionEnded).
func (c controlRuntime) Revoke(ctx context.Context, req control.RevokeRequest) (int, error) {
	n, err := c.mgr.RevokeLease(ctx, req.Session, req.Shared, req.Server, req.Reason, req.Deny)
	return n, controlError(err)
}

// Allow implements control.Runtime.
func (c controlRuntime) Allow(_ context.Context, req control.AllowRequest) error {
	if req.Shared {
		return controlError(c.mgr.AllowShared(req.Server))
	}
	return controlError(c.mgr.Allow(req.Session, req.Server))
}

// EndSession implements control.Runtime.
func (c controlRuntime) EndSession(ctx context.Context, session string) error {
	return controlError(c.gw.EndSession(ctx, session))
}

// ReapIdle implements control.Runtime.
func (c controlRuntime) ReapIdle(ctx context.Context, idleMax time.Duration) (int, error) {
	n, err := c.mgr.ReapIdle(ctx, idleMax)
	return n, controlError(err)
}

// Reload implements control.Runtime: serve's reload, reported on serve's
// output like a SIGHUP's. A file that failed to load is
// control.ErrConfigNotLoaded (its cause, which may name the entry, only
// on stderr); a configuration put in force but not all recorded is a
// reply with RecordFailed.
func (c controlRuntime) Reload(ctx context.Context) (control.ReloadReply, error) {
	change, err := c.reload(ctx)
	if err != nil {
		fmt.Fprintf(c.stderr, "leaseledger: %v (control API)\n", err)
	} else {
		fmt.Fprintf(c.stdout, "leaseledger: %s (control API)\n", change)
	}
	// Only a reload that put a configuration in force names its servers.
	if err != nil && change.servers == nil {
		if strings.HasPrefix(err.Error(), configNotReloaded) {
			return control.ReloadReply{}, fmt.Errorf("%w: %w", control.ErrConfigNotLoaded, err)
		}
		return control.ReloadReply{}, controlError(err)
	}
	return control.ReloadReply{Servers: len(change.servers), Added: change.added, Removed: change.removed,
		LeasesEnded: change.ended, RecordFailed: err != nil}, nil
}

// controlError adds the control sentinel the handlers branch on to a
// runtime or gateway error (the error itself is kept for the log).
func controlError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gateway.ErrUnknownSession), errors.Is(err, runtime.ErrNoLease), errors.Is(err, runtime.ErrSessionEnded):
		return fmt.Errorf("%w: %w", control.ErrNotFound, err)
	case errors.Is(err, runtime.ErrInvalidRequest):
		return fmt.Errorf("%w: %w", control.ErrInvalid, err)
	case errors.Is(err, runtime.ErrClosed), errors.Is(err, gateway.ErrClosed):
		return fmt.Errorf("%w: %w", control.ErrUnavailable, err)
	}
	return err
}

// busServices are the services serve adds to its bus: the projection API
// always, the control API when the runtime runs and there is a control
// user to call it.
func busServices(proj *live.Projection, rt *serveRuntime, controlUser string) []bus.Service {
	s := control.ProjectionServices(proj)
	if rt != nil && controlUser != "" {
		c := controlRuntime{mgr: rt.mgr, gw: rt.gw, reload: rt.reload, stdout: rt.a.stdout, stderr: rt.a.stderr}
		s = append(s, control.RuntimeServices(c, proj)...)
	}
	return s
}

// checkpointFlags are serve's checkpoint publication flags: with a key,
// serve signs checkpoints of its head, publishes them on
// busclient.CheckpointSubject every interval when the head moved, and
// answers the proof API's checkpoint requests (package control).
type checkpointFlags struct {
	key      string
	origin   string
	interval time.Duration
}

func (f *checkpointFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.key, "checkpoint-key", "", "file holding a checkpoint signer key (from 'checkpoint keygen'): publish signed checkpoints on "+busclient.CheckpointSubject+" (empty: off)")
	fl.StringVar(&f.origin, "checkpoint-origin", "leaseledger", "the published checkpoints' origin line: who keeps this log")
	fl.DurationVar(&f.interval, "checkpoint-interval", time.Minute, "publish a checkpoint this often when the head moved")
}

// checkpointer returns the Checkpointer of l the flags ask for (nil
// without --checkpoint-key).
func (f *checkpointFlags) checkpointer(ctx context.Context, l *ledger.Ledger) (*control.Checkpointer, error) {
	if f.key == "" {
		return nil, nil
	}
	if f.interval <= 0 {
		return nil, errors.New("--checkpoint-interval must be positive")
	}
	skey, err := os.ReadFile(f.key)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-key: %w", err)
	}
	signer, err := note.NewSigner(strings.TrimSpace(string(skey)))
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-key: not a signer key: %w", err)
	}
	if _, err := verify.CheckpointAt(ctx, l, f.origin, 0); err != nil {
		return nil, fmt.Errorf("--checkpoint-origin: %w", err)
	}
	return control.NewCheckpointer(l, f.origin, signer), nil
}

// publishCheckpoints publishes cp's checkpoints on b at the flags'
// interval until stop, which waits for the publisher to end (call it
// before closing the bus). A nil cp publishes nothing.
func (f *checkpointFlags) publishCheckpoints(cp *control.Checkpointer, b *bus.Bus, logger *slog.Logger) (stop func()) {
	if cp == nil {
		return func() {}
	}
	cp.SetPublish(b.PublishCheckpoint)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cp.Run(ctx, f.interval, func(err error) { logger.Warn("serve: checkpoint not published", "err", err) })
	}()
	return func() { cancel(); <-done }
}
