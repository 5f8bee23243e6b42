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

// Revoke implements control.Runtime.
func (c controlRuntime) Revoke(ctx context.Context, req control.RevokeRequest) error {
	var err error
	switch {
	case req.Shared && req.Deny:
		err = c.mgr.DenyShared(ctx, req.Server, req.Reason)
	case req.Shared:
		err = c.mgr.RevokeShared(ctx, req.Server, req.Reason)
	case req.Deny:
		err = c.mgr.Deny(ctx, req.Session, req.Server, req.Reason)
	default:
		err = c.mgr.Revoke(ctx, req.Session, req.Server, req.Reason)
	}
	return controlError(err)
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
	case errors.Is(err, gateway.ErrUnknownSession):
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
