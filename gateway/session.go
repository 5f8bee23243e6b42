package gateway

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Why a session ended (logged).
const (
	endedByClient    = "client_delete"
	endedByIdle      = "idle_timeout"
	endedByHost      = "end_session"
	endedByClose     = "gateway_close"
	endedByRevoke    = "token_revoked"
	endedByTransport = "transport_closed"
	endedByInitFail  = "initialize_failed"
)

// session is one MCP session: its runtime scope (the only owner the
// gateway holds), the request owner of its resource handles, and the tool
// listing it was shown.
type session struct {
	g         *Gateway
	id        string
	principal string
	tokenHash string
	opened    time.Time
	scope     *runtime.SessionScope
	capa      runtime.LeaseCapability
	owner     *runtime.Owner
	ss        *mcp.ServerSession
	// pol is the session's access policy (the zero value without
	// Options.Policy).
	pol sessionPolicy
	// clientCaps are the capabilities the client declared at initialize.
	clientCaps *mcp.ClientCapabilities
	// ctx is cancelled when the session ends: every handler of the
	// session runs under it as well as under its own request's context.
	ctx    context.Context
	cancel context.CancelFunc
	// slot: the session holds a slot under the caps (guarded by g.mu).
	slot bool

	mu sync.Mutex
	// shown is, per server, the pinned tools of the listing the session
	// was shown; tools indexes them by exposed name (under the prefixes
	// of the server list of generation toolsGen), toolClashes the names
	// more than one server exposes.
	shown       map[string][]runtime.PinnedTool
	tools       map[string]toolRef
	toolClashes map[string][]string
	toolsGen    uint64
	// cat is the catalog of prompts and resources the session was shown.
	cat       catalog
	active    int // POSTs in flight (the opening one included)
	idleSince time.Time
	timer     *time.Timer
	ending    bool

	startOnce sync.Once
	done      chan struct{}
	endErr    error
}

// toolRef is one listed tool: its server, its runtime name and the digest
// of the pinned listing it was shown from.
type toolRef struct{ server, tool, digest string }

// initialize opens the runtime session of a new MCP session, then lets the
// go-sdk answer initialize. A refusal leaves the go-sdk session
// uninitialized, which the go-sdk then closes.
func (g *Gateway) initialize(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if ss == nil || ss.ID() == "" {
		return next(ctx, method, req)
	}
	id := ss.ID()
	g.mu.Lock()
	_, known := g.sessions[id]
	g.mu.Unlock()
	if known { // a repeated initialize: the go-sdk refuses it
		return next(ctx, method, req)
	}
	var principal, hash string
	var addr netip.Addr
	if x := req.GetExtra(); x != nil {
		principal, hash = principalOf(x.TokenInfo)
		addr = clientAddress(x.Header)
	}
	// The session is the runtime session's client peer: it exists before
	// the scope opens (the runtime asks it for the client's capabilities
	// only when a lease starts, after initialize).
	s := &session{g: g, id: id, principal: principal, tokenHash: hash, opened: time.Now(), ss: ss, active: 1,
		shown: map[string][]runtime.PinnedTool{}, tools: map[string]toolRef{}, toolClashes: map[string][]string{},
		done: make(chan struct{})}
	s.initCatalog()
	if g.opts.Policy != nil {
		s.pol = sessionPolicy{sa: g.opts.Policy.Session(principal, id, addr)}
	}
	if p, ok := req.GetParams().(*mcp.InitializeParams); ok && p != nil {
		s.clientCaps = p.Capabilities
	}
	scope, err := g.openScope(ctx, id, principal, s, s.pol)
	if err != nil {
		g.opts.Logger.Warn("gateway: session not opened", "session", id, "err", err)
		return nil, rpcError(ctx, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	capa := scope.Capability()
	owner, err := capa.NewOwner(sctx)
	if err != nil {
		cancel()
		_ = scope.Release(context.WithoutCancel(ctx))
		return nil, rpcError(ctx, err)
	}
	s.scope, s.capa, s.owner, s.ctx, s.cancel = scope, capa, owner, sctx, cancel
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		cancel()
		_, _ = owner.End(context.WithoutCancel(ctx))
		_ = scope.Release(context.WithoutCancel(ctx))
		return nil, rpcError(ctx, runtime.ErrClosed)
	}
	g.sessions[id] = s
	// A reload that ran while the scope was opening scanned g.sessions
	// before s was in it: the token is checked again now that s is (a
	// later reload's scan sees s), so a removed token's session never
	// survives its reload.
	revoked := g.opts.Tokens != nil && !g.opts.Tokens.holds(hash)
	g.mu.Unlock()
	if revoked {
		g.startEnd(s, endedByRevoke)
		return nil, codeError(CodeSessionEnded, msgEnded)
	}
	res, err := next(ctx, method, req)
	if err != nil {
		g.startEnd(s, endedByInitFail)
		return nil, err
	}
	g.mu.Lock()
	if !g.closed {
		// Ends the session when the go-sdk closes it on its own.
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			_ = ss.Wait()
			g.startEnd(s, endedByTransport)
		}()
	}
	g.mu.Unlock()
	g.opts.Logger.Info("gateway: session opened", "session", id, "principal", principal)
	return res, nil
}

// bind returns ctx ended also by the session's end.
func (s *session) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// busy marks a POST of the session in flight: no idle end meanwhile.
func (s *session) busy() {
	s.mu.Lock()
	s.active++
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
}

// idle marks a POST done; the last one starts the idle timer.
func (s *session) idle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active > 0 || s.ending {
		return
	}
	s.idleSince = time.Now()
	if s.timer == nil {
		s.timer = time.AfterFunc(s.g.opts.SessionIdleTimeout, s.idleFired)
	} else {
		s.timer.Reset(s.g.opts.SessionIdleTimeout)
	}
}

// idleFired ends the session when it is still idle and has been for the
// whole timeout (a firing that raced with activity does nothing: the
// activity's idle re-armed the timer).
func (s *session) idleFired() {
	s.mu.Lock()
	expired := s.active == 0 && !s.ending && time.Since(s.idleSince) >= s.g.opts.SessionIdleTimeout
	s.mu.Unlock()
	if expired {
		s.g.startEnd(s, endedByIdle)
	}
}

// end starts the session's end and waits for it, or for ctx.
func (g *Gateway) end(ctx context.Context, s *session, reason string) error {
	g.startEnd(s, reason)
	select {
	case <-s.done:
		return s.endErr
	case <-ctx.Done():
		return &Error{Op: "end_session", Session: s.id, Err: ErrEndPending, cause: ctx.Err()}
	}
}

// startEnd starts the session's end once, in a goroutine Close waits for.
func (g *Gateway) startEnd(s *session, reason string) {
	s.startOnce.Do(func() {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			s.finish(reason)
		}()
	})
}

// finish ends the session: no new handler, the handlers in flight
// cancelled (a call's cancellation reaches its server), the MCP session
// closed once they returned, the owner's unsettled handles settled, then
// the runtime scope released (the last owner: session.ended, its leases
// terminated). Cleanup is detached from every caller and bounded by
// SessionEndTimeout.
func (s *session) finish(reason string) {
	g := s.g
	s.mu.Lock()
	s.ending = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), SessionEndTimeout)
	defer cancel()
	if s.ss != nil {
		_ = s.ss.Close() // waits for the session's handlers
	}
	_, oerr := s.owner.End(ctx)
	rerr := s.scope.Release(ctx)
	g.mu.Lock()
	if g.sessions[s.id] == s {
		delete(g.sessions, s.id)
	}
	if s.slot {
		s.slot = false
		g.releaseLocked(s.principal)
	}
	g.mu.Unlock()
	s.endErr = errors.Join(oerr, rerr)
	g.opts.Logger.Info("gateway: session ended", "session", s.id, "reason", reason, "err", s.endErr)
	close(s.done)
}

// joinErrs is errors.Join that keeps nil for none.
func joinErrs(errs []error) error { return errors.Join(errs...) }

// openScope opens the runtime session id, recording principal; its
// actions are decided by pol when the gateway has a policy.
func (g *Gateway) openScope(ctx context.Context, id, principal string, peer runtime.ClientPeer, pol sessionPolicy) (*runtime.SessionScope, error) {
	opts := runtime.SessionOptions{Principal: principal, Transport: events.SessionMCPHTTP, Client: peer}
	if pol.sa != nil {
		opts.Access = pol
	}
	return g.opts.Manager.OpenSessionWith(ctx, id, opts)
}
