package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/ledger/bus"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/leaseledger/leaseledger/runtime"
)

// controlRuntime is the control API's view of serve's runtime: the lease
// manager for revocation and reaping, the gateway for ending sessions
// (an MCP session is ended by the gateway, which releases its runtime
// scope).
type controlRuntime struct {
	mgr *runtime.Manager
	gw  *gateway.Gateway
}

var _ control.Runtime = controlRuntime{}

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
		s = append(s, control.RuntimeServices(controlRuntime{mgr: rt.mgr, gw: rt.gw}, proj)...)
	}
	return s
}
