package gatewaybench

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/live"
	llrt "github.com/leaseledger/leaseledger/runtime"
)

// Config names of the gateway stack's two servers.
const (
	serverHTTP  = "h" // the HTTP upstream (a url entry)
	serverStdio = "s" // the stdio server under the guardian (a command entry)
)

// stack is what `leaseledger serve` runs behind its MCP endpoint: the
// ledger in dir opened through its live projection (fsync on every
// commit), the embedded NATS bus publishing every event, one
// runtime.Manager with the guardian helper, and a gateway per server (each
// exposing that server alone, as a serve with one entry would) on a
// loopback HTTP server.
type stack struct {
	proj  *live.Projection
	bus   *bus.Bus
	mgr   *llrt.Manager
	gws   []*gateway.Gateway
	lbs   map[string]*loopback // server → its gateway's MCP endpoint
	ledgr *ledger.Ledger
}

func startStack(ctx context.Context, dir, httpURL, stdioBin, helperPath string, helperArgs []string, sessions int) (st *stack, err error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st = &stack{lbs: map[string]*loopback{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, st.close(context.WithoutCancel(ctx)))
			st = nil
		}
	}()
	if st.proj, err = live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: dir, Logger: quiet}, Logger: quiet}); err != nil {
		return st, err
	}
	st.ledgr = st.proj.Ledger()
	if st.bus, err = bus.Start(st.ledgr, bus.Options{Port: bus.RandomPort, Logger: quiet}); err != nil {
		return st, err
	}
	cfg := &llrt.MapConfigSource{}
	if err := cfg.Set(serverHTTP, llrt.ServerConfig{URL: httpURL}); err != nil {
		return st, err
	}
	if err := cfg.Set(serverStdio, llrt.ServerConfig{Command: stdioBin}); err != nil {
		return st, err
	}
	if st.mgr, err = llrt.NewManager(llrt.Options{Config: cfg, Ledger: st.ledgr, HelperPath: helperPath, HelperArgs: helperArgs,
		MaxLiveLeases: max(2*sessions+8, llrt.DefaultMaxLiveLeases)}); err != nil {
		return st, err
	}
	for _, server := range []string{serverHTTP, serverStdio} {
		g, err := gateway.New(gateway.Options{Manager: st.mgr, Servers: []string{server}, MaxSessions: sessions + 8, MaxSessionsPerToken: sessions + 8, Logger: quiet})
		if err != nil {
			return st, err
		}
		st.gws = append(st.gws, g)
		lb, err := serveLoopback(g.Handler())
		if err != nil {
			return st, err
		}
		st.lbs[server] = lb
	}
	return st, nil
}

// close ends the gateways' sessions, the listeners, the manager (every
// lease ended), the bus and the projection, in that order.
func (st *stack) close(ctx context.Context) error {
	var errs []error
	for _, g := range st.gws {
		errs = append(errs, g.Close(ctx))
	}
	for _, lb := range st.lbs {
		lb.close()
	}
	if st.mgr != nil {
		errs = append(errs, st.mgr.Close(ctx))
	}
	if st.bus != nil {
		errs = append(errs, st.bus.Close())
	}
	if st.proj != nil {
		errs = append(errs, st.proj.Close())
	}
	return errors.Join(errs...)
}
