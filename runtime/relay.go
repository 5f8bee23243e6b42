package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The server→client direction of a lease (see ClientPeer): each lease has
// its own go-sdk client, declaring exactly the capabilities of the session
// that acquired it; the server's requests are relayed to that session's
// peer, its notifications delivered to the sessions they concern, and a
// tool list change re-pins the lease's listing.

// Bounds of the server→client direction.
const (
	// RelayTimeout bounds one relayed request (sampling, elicitation,
	// roots) when neither the server's request nor the related client
	// request bounds it: an elicitation waits for a human.
	RelayTimeout = 10 * time.Minute
	// RelistTimeout bounds the tools/list a lease runs again after its
	// server notified a tool list change.
	RelistTimeout = 30 * time.Second
	// MaxLeaseSessions bounds the sessions a shared lease remembers as
	// having used it (the recipients of its prompts and resources list
	// changes); beyond it, sessions whose scope ended are forgotten first,
	// then new ones are not remembered.
	MaxLeaseSessions = 256
	// MaxSupersededListings bounds the earlier listings a lease keeps to
	// tell a call against a replaced listing (ErrListingChanged) from one
	// naming a digest the lease never had (which poisons it).
	MaxSupersededListings = 8
)

// ErrListingChanged: the call named a tool digest of a listing the lease
// pinned earlier and replaced after its server notified a tool list
// change. Nothing was sent and the lease is kept: the host lists the tools
// again (LeaseCapability.Tools) and authorizes against the new listing.
var ErrListingChanged = errors.New("runtime: tool listing changed since it was shown")

// JSON-RPC errors a lease answers its server's requests with when it does
// not relay them. Their text is static. Sampling and elicitation use the
// codes the go-sdk's client answers with when it has no handler for them;
// roots/list, which the go-sdk's client always answers, is method not
// found when the session's client did not declare roots.
var (
	errNoSampling = &jsonrpc.Error{Code: codeUnsupportedMethod, Message: "client does not support CreateMessage"}
	errNoElicit   = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "client does not support elicitation"}
	errNoRoots    = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "client does not support roots"}
	// errNotAttributable: a shared lease's request while not exactly one
	// session has a request in flight through it.
	errNotAttributable = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "request of a shared server not attributable to one session"}
	// errRelayFailed: the peer failed without a JSON-RPC error of its own.
	errRelayFailed = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "relay to the client failed"}
	// errRelayDenied: the session's access policy does not let the server
	// ask its client (answer_sampling, answer_elicitation, answer_roots).
	errRelayDenied = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "request denied by the session's access policy"}
)

// codeUnsupportedMethod is the go-sdk's code for a client request it has
// no handler for (its unexported codeUnsupportedMethod).
const codeUnsupportedMethod = -31001

// relatedReq is one client request of a session in flight through a lease
// (a call, a request handle's request): the context the host passed, which
// a relay's PeerRequest.Related carries.
type relatedReq struct {
	ctx     context.Context
	session string
	id      string
}

// peerState is a lease's server→client state, guarded by its own mutex (a
// leaf: nothing is taken while it is held).
type peerState struct {
	mu sync.Mutex
	// inflight are the client requests in flight through the lease, oldest
	// first; bounded by the calls and handles the lease admits.
	inflight []*relatedReq
	// sessions are the sessions that used the lease (at most
	// MaxLeaseSessions).
	sessions map[string]struct{}
	// logsDropped counts log messages of a shared lease delivered to no
	// one (not exactly one session with a request in flight).
	logsDropped int
	// relisting: a re-list runs; again: another change arrived meanwhile.
	relisting, again bool
	// superseded are earlier listings, newest last (MaxSupersededListings).
	superseded []*pinnedListing
}

// track records a client request of session in flight through l, with the
// host's context; untrack ends it. A nil ctx tracks nothing.
func (l *lease) track(ctx context.Context, session, id string) *relatedReq {
	if ctx == nil {
		return nil
	}
	r := &relatedReq{ctx: ctx, session: session, id: id}
	l.peer.mu.Lock()
	l.peer.inflight = append(l.peer.inflight, r)
	l.peer.mu.Unlock()
	l.remember(session)
	return r
}

// remember counts session among the sessions that used l (the recipients
// of its list changes): a listing shown to it counts as much as a
// request, so a session that only listed a shared server's tools hears
// that they changed.
func (l *lease) remember(session string) {
	p := &l.peer
	p.mu.Lock()
	_, known := p.sessions[session]
	full := !known && len(p.sessions) >= MaxLeaseSessions
	if !known && !full {
		if p.sessions == nil {
			p.sessions = make(map[string]struct{})
		}
		p.sessions[session] = struct{}{}
	}
	p.mu.Unlock()
	if full {
		p.prune(l.m, session)
	}
}

func (l *lease) untrack(r *relatedReq) {
	if r == nil {
		return
	}
	p := &l.peer
	p.mu.Lock()
	for i, x := range p.inflight {
		if x == r {
			p.inflight = append(p.inflight[:i], p.inflight[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
}

// prune forgets the remembered sessions whose scope ended, then remembers
// session if there is room. p.mu is a leaf: the manager's lock is taken
// only while it is not held.
func (p *peerState) prune(m *Manager, session string) {
	p.mu.Lock()
	known := make([]string, 0, len(p.sessions))
	for s := range p.sessions {
		known = append(known, s)
	}
	p.mu.Unlock()
	var ended []string
	for _, s := range known {
		if !m.sessionOpen(s) {
			ended = append(ended, s)
		}
	}
	p.mu.Lock()
	for _, s := range ended {
		delete(p.sessions, s)
	}
	if len(p.sessions) < MaxLeaseSessions {
		p.sessions[session] = struct{}{}
	}
	p.mu.Unlock()
}

// target returns the session a server's request or log message belongs
// to and its most recent client request in flight (nil when none): the
// lease's own session for a session's lease; for a shared lease the one
// session with requests in flight, and ok false when there is not exactly
// one.
func (l *lease) target() (session string, rel *relatedReq, ok bool) {
	p := &l.peer
	p.mu.Lock()
	defer p.mu.Unlock()
	shared := l.key.session == SharedSessionKey
	if !shared {
		session = l.key.session
	}
	for i := len(p.inflight) - 1; i >= 0; i-- {
		r := p.inflight[i]
		if r.ctx.Err() != nil {
			continue // its caller gave up: no longer a request to relate to
		}
		if !shared {
			return session, r, true
		}
		switch {
		case rel == nil:
			rel, session = r, r.session
		case r.session != session:
			return "", nil, false
		}
	}
	if shared && rel == nil {
		return "", nil, false
	}
	return session, rel, true
}

// sessionsOf returns the sessions to tell about a list change: the lease's
// own, or every session that used a shared lease.
func (l *lease) sessionsOf() []string {
	if l.key.session != SharedSessionKey {
		return []string{l.key.session}
	}
	p := &l.peer
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.sessions))
	for s := range p.sessions {
		out = append(out, s)
	}
	return out
}

// openSession returns the state of the open session id, nil when it is
// not open.
func (m *Manager) openSession(id string) *sessionState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.sessions[id]; st != nil && !st.ended {
		return st
	}
	return nil
}

// relayAction is the access action of a relayed method.
func relayAction(method events.RelayMethod) events.AccessAction {
	switch method {
	case events.RelaySampling:
		return events.AccessAnswerSampling
	case events.RelayElicit:
		return events.AccessAnswerElicitation
	}
	return events.AccessAnswerRoots
}

// sessionPeer returns the peer of the open session id, nil when it has
// none or is not open.
func (m *Manager) sessionPeer(id string) ClientPeer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.sessions[id]; st != nil && !st.ended {
		return st.peer
	}
	return nil
}

func (m *Manager) sessionOpen(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.sessions[id]
	return st != nil && !st.ended
}

// sessionLogLevel returns the logging level the open session id set ("":
// none).
func (m *Manager) sessionLogLevel(id string) mcp.LoggingLevel {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.sessions[id]; st != nil {
		return st.logLevel
	}
	return ""
}

// declaredCaps returns the capabilities a lease declares for peer: its
// sampling, elicitation and roots, nothing else; none without a peer.
// Roots are declared when RootsV2 is set, or the deprecated Roots says
// listChanged (a decoded InitializeParams cannot tell an empty "roots"
// from none: a peer declares roots through RootsV2).
func declaredCaps(peer ClientPeer) *mcp.ClientCapabilities {
	out := &mcp.ClientCapabilities{}
	if peer == nil {
		return out
	}
	c := peer.Capabilities()
	if c == nil {
		return out
	}
	if c.Sampling != nil {
		x := *c.Sampling
		out.Sampling = &x
	}
	if c.Elicitation != nil {
		x := *c.Elicitation
		out.Elicitation = &x
	}
	switch {
	case c.RootsV2 != nil:
		x := *c.RootsV2
		out.RootsV2 = &x
	case c.Roots.ListChanged:
		out.RootsV2 = &mcp.RootCapabilities{ListChanged: true}
	}
	return out
}

// newClient returns the lease's go-sdk client: the capabilities of the
// session that acquires it (for a shared lease, the session whose call
// started it: every later session's requests are relayed only when its
// own client declared the capability too), a receiving middleware that
// relays the server's requests, and the notification handlers.
func (l *lease) newClient() *mcp.Client {
	c := mcp.NewClient(&mcp.Implementation{Name: "leaseledger", Version: "0.1.0"}, &mcp.ClientOptions{
		Capabilities: declaredCaps(l.m.sessionPeer(l.starter)),
		// Each handler counts its delivery (noteBarrier), whatever it
		// did with the notification.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			defer l.wire.notes.delivered()
			l.listChanged(events.ListTools)
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			defer l.wire.notes.delivered()
			l.listChanged(events.ListPrompts)
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			defer l.wire.notes.delivered()
			l.listChanged(events.ListResources)
		},
		ResourceUpdatedHandler: func(ctx context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			defer l.wire.notes.delivered()
			l.resourceUpdated(ctx, r.Params)
		},
		LoggingMessageHandler: func(ctx context.Context, r *mcp.LoggingMessageRequest) {
			defer l.wire.notes.delivered()
			l.logMessage(ctx, r.Params)
		},
	})
	c.AddReceivingMiddleware(l.relayMiddleware)
	return c
}

// relayMiddleware takes the server's sampling, elicitation and roots
// requests before the go-sdk's own handlers (which would answer roots/list
// from the client's own, empty, roots).
func (l *lease) relayMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch events.RelayMethod(method) {
		case events.RelaySampling, events.RelayElicit, events.RelayListRoots:
			return l.relay(ctx, events.RelayMethod(method), req)
		}
		return next(ctx, method, req)
	}
}

// relay relays one server request to its session's peer, records it and
// returns the peer's answer (or the refusal).
func (l *lease) relay(ctx context.Context, method events.RelayMethod, req mcp.Request) (mcp.Result, error) {
	m := l.m
	t0 := time.Now()
	rec := &events.RelayCompleted{Method: method}
	session, rel, ok := l.target()
	if !ok {
		session = l.key.session
	}
	var relCtx context.Context
	if rel != nil {
		relCtx, rec.Related = rel.ctx, rel.id
	}
	var ep *mcp.ElicitParams
	if method == events.RelayElicit {
		ep, _ = req.GetParams().(*mcp.ElicitParams)
		rec.Mode = events.ElicitForm
		if ep != nil && ep.Mode == "url" {
			rec.Mode = events.ElicitURL
		}
	}
	finish := func(outcome events.RelayOutcome) {
		rec.Outcome, rec.DurationNS = outcome, int64(time.Since(t0))
		m.emitFactAsync(ctx, &l.finishing, nil, events.Draft{Activation: l.activation, Session: session, Server: l.key.server, Payload: rec})
	}
	if !ok {
		finish(events.RelayRefused)
		return nil, errNotAttributable
	}
	st := m.openSession(session)
	var peer ClientPeer
	if st != nil {
		peer = st.peer
	}
	if refusal := refusalFor(peer, method, rec.Mode); refusal != nil {
		finish(events.RelayRefused)
		return nil, refusal
	}
	// The session's access policy decides whether its server may ask its
	// client; the decision is durable before anything reaches the client.
	ar := AccessRequest{Action: relayAction(method), Server: l.serverName()}
	if d, enforced := st.decide(ar); enforced {
		if err := m.recordAccess(ctx, st, ar, d, l.activation); err != nil || !d.Allowed {
			finish(events.RelayRefused)
			return nil, errRelayDenied
		}
	}
	rctx, cancel := relayContext(ctx, relCtx)
	defer cancel()
	pr := PeerRequest{Server: l.serverName(), Activation: l.activation, Related: relCtx}
	var (
		res mcp.Result
		err error
	)
	outcome := events.RelayAccepted
	switch method {
	case events.RelaySampling:
		p, _ := req.GetParams().(*mcp.CreateMessageWithToolsParams)
		var r *mcp.CreateMessageWithToolsResult
		if r, err = peer.CreateMessage(rctx, pr, p); err == nil && r != nil {
			res = r
		}
	case events.RelayElicit:
		var r *mcp.ElicitResult
		if r, err = peer.Elicit(rctx, pr, ep); err == nil && r != nil {
			res = r
			switch r.Action {
			case "decline":
				outcome = events.RelayDeclined
			case "cancel":
				outcome = events.RelayCancelled
			}
		}
	default:
		p, _ := req.GetParams().(*mcp.ListRootsParams)
		var r *mcp.ListRootsResult
		if r, err = peer.ListRoots(rctx, pr, p); err == nil && r != nil {
			res = r
		}
	}
	if err == nil && res == nil {
		err = errRelayFailed // a peer answering nothing
	}
	if err != nil {
		var we *jsonrpc.Error
		switch {
		case errors.Is(rctx.Err(), context.DeadlineExceeded):
			outcome, err = events.RelayTimedOut, rctx.Err()
		case rctx.Err() != nil:
			outcome, err = events.RelayCancelled, rctx.Err()
		case errors.As(err, &we):
			// The client's own answer: relayed to the server as it is (it
			// is not recorded, and never enters this package's errors).
			outcome = events.RelayError
		default:
			outcome, err = events.RelayError, errRelayFailed
		}
		res = nil
	}
	finish(outcome)
	return res, err
}

// refusalFor returns the error a request of method is refused with when
// peer is missing or its client did not declare the capability (elicit:
// the mode), nil when it may be relayed.
func refusalFor(peer ClientPeer, method events.RelayMethod, mode events.ElicitMode) error {
	var caps *mcp.ClientCapabilities
	if peer != nil {
		caps = declaredCaps(peer)
	}
	switch method {
	case events.RelaySampling:
		if caps == nil || caps.Sampling == nil {
			return errNoSampling
		}
	case events.RelayElicit:
		if caps == nil || caps.Elicitation == nil {
			return errNoElicit
		}
		e := caps.Elicitation
		if mode == events.ElicitURL && e.URL == nil || mode == events.ElicitForm && e.Form == nil && e.URL != nil {
			return errNoElicit
		}
	default:
		if caps == nil || caps.RootsV2 == nil {
			return errNoRoots
		}
	}
	return nil
}

// relayContext is the context a relay runs under: derived from the
// related client request when there is one (its values reach the peer),
// ended when the server's request ends too, and bounded by RelayTimeout
// when neither has a deadline.
func relayContext(server, related context.Context) (context.Context, context.CancelFunc) {
	base := server
	if related != nil {
		base = related
	}
	ctx, cancel := context.WithCancel(base)
	stop := func() bool { return true }
	if related != nil {
		stop = context.AfterFunc(server, cancel)
	}
	_, d1 := server.Deadline()
	_, d2 := ctx.Deadline()
	if !d1 && !d2 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, RelayTimeout)
		prev := cancel
		cancel = func() { c2(); prev() }
	}
	return ctx, func() { stop(); cancel() }
}
