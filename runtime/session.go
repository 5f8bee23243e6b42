package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionState is the shared last-owner count of one session, guarded by
// Manager.mu.
type sessionState struct {
	id     string
	owners int
	ended  bool
	// finishing counts the session's calls whose call.finished is not
	// yet durable; the session's end waits for them.
	finishing pendingFacts
	// peer is the session's client side (SessionOptions.Client), fixed at
	// open; logLevel the level it set (SetLogLevel), guarded by
	// Manager.mu.
	peer     ClientPeer
	logLevel mcp.LoggingLevel
	// access is the session's access policy (SessionOptions.Access), nil
	// when none: everything allowed, nothing recorded.
	access *sessionAccess
}

// SessionScope is one owner of a session's durable scope. The host opens
// one per tool session (OpenSession) and hands clones to every runtime
// copy and in-flight stream; each owner releases its own clone. When the
// last owner releases, the session ends: its leases are terminated, shared
// leases are spared, and session.ended is recorded. Calls made through the
// scope's capability hold the scope for their duration, so a session never
// ends under a running call. Leases therefore live across turns; there is
// no per-turn guard.
type SessionScope struct {
	m        *Manager
	st       *sessionState
	released atomic.Bool
}

// SessionOptions are the facts recorded when a host opens a session
// (session.opened).
type SessionOptions struct {
	// Principal names the access token or tenant that opens the session:
	// an identifier (events.IDRule), never a secret. Empty when the host
	// has no principal; it is then omitted from the record.
	Principal string
	// Transport is the host's entry point; the zero value means
	// events.SessionEmbedded.
	Transport events.SessionTransport
	// Client is the session's client side: the capabilities every lease
	// acquired for the session declares to its server (a shared lease:
	// those of the session that started it), and where the servers'
	// requests are relayed and their notifications delivered (see
	// ClientPeer). nil: the servers see a client with no capabilities and
	// their notifications reach no one.
	Client ClientPeer
	// Access decides what the session's principal may do (see Access);
	// nil: everything is allowed and no decision is recorded.
	Access Access
}

// OpenSession opens the scope of session with one owner (the returned
// value), recorded as session.opened with transport embedded and no
// principal. See OpenSessionWith.
func (m *Manager) OpenSession(ctx context.Context, session string) (*SessionScope, error) {
	return m.OpenSessionWith(ctx, session, SessionOptions{})
}

// OpenSessionWith opens the scope of session with one owner (the returned
// value) and records session.opened (opts' principal and transport)
// durably before returning. It fails with ErrSessionOpen while a scope for
// session is open, with ErrInvalidRequest for SharedSessionKey, a malformed
// session or principal, or an unknown transport (nothing recorded), and
// with ErrLedger when the record failed: the session is then not open.
//
// The record is appended detached from ctx's cancellation (bounded like
// every fact): a session.opened that became durable is always followed
// by its session.ended once the scope is released. When the append fails
// its outcome may be unknown (durable but not acknowledged, a timeout),
// so session.ended (no leases) is recorded before the error is returned,
// with the id still reserved so that no new scope of it can interleave;
// the returned error joins what of that failed.
func (m *Manager) OpenSessionWith(ctx context.Context, session string, opts SessionOptions) (*SessionScope, error) {
	tr := opts.Transport
	if tr == "" {
		tr = events.SessionEmbedded
	}
	if !events.ValidID(session) || session == SharedSessionKey || !tr.Valid() ||
		(opts.Principal != "" && !events.ValidID(opts.Principal)) {
		return nil, newErr("open_session", nil, ErrInvalidRequest, nil)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, newErr("open_session", &leaseKey{session: session}, ErrClosed, nil)
	}
	if _, open := m.sessions[session]; open {
		m.mu.Unlock()
		return nil, newErr("open_session", &leaseKey{session: session}, ErrSessionOpen, nil)
	}
	// Reserved before the append, so a concurrent open of the same id
	// fails with ErrSessionOpen; nobody holds the scope until it returns.
	st := &sessionState{id: session, owners: 1, peer: opts.Client}
	if opts.Access != nil {
		st.access = &sessionAccess{a: opts.Access}
	}
	m.sessions[session] = st
	m.mu.Unlock()
	err := m.emitFact(ctx, events.Draft{Session: session, Payload: &events.SessionOpened{Principal: opts.Principal, Transport: tr}})
	if err != nil {
		m.mu.Lock()
		st.owners, st.ended = 0, true
		m.mu.Unlock()
		err = errors.Join(err, m.emitFact(ctx, events.Draft{Session: session, Payload: &events.SessionEnded{}}))
		m.mu.Lock()
		if m.sessions[session] == st {
			delete(m.sessions, session)
		}
		m.mu.Unlock()
		return nil, err
	}
	return &SessionScope{m: m, st: st}, nil
}

// Session returns the session identity.
func (s *SessionScope) Session() string { return s.st.id }

// Clone returns a new owner of the same scope; it must be released on its
// own. It fails with ErrSessionEnded after the session ended.
func (s *SessionScope) Clone() (*SessionScope, error) {
	if err := s.m.retain(s.st); err != nil {
		return nil, err
	}
	return &SessionScope{m: s.m, st: s.st}, nil
}

// Release gives up this owner; releasing twice is a no-op. The release of
// the last owner ends the session (see SessionScope) before returning, and
// its error joins what of that failed to record (session.ended, the
// terminations); nil when everything was recorded or the session goes on.
// The leases are ended either way.
func (s *SessionScope) Release(ctx context.Context) error {
	if s.released.Swap(true) {
		return nil
	}
	return s.m.release(ctx, s.st)
}

// Capability returns the typed lease capability of this session for tool
// contexts. It does not own the scope: the scope must stay retained by an
// owner while the capability is used.
func (s *SessionScope) Capability() LeaseCapability { return LeaseCapability{m: s.m, st: s.st} }

func (m *Manager) retain(st *sessionState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.ended {
		return newErr("session", &leaseKey{session: st.id}, ErrSessionEnded, nil)
	}
	st.owners++
	return nil
}

// release gives up one owner of st; the last owner's release ends the
// session and returns what of that failed to record.
func (m *Manager) release(ctx context.Context, st *sessionState) error {
	m.mu.Lock()
	st.owners--
	if st.owners > 0 || st.ended {
		m.mu.Unlock()
		return nil
	}
	st.ended = true
	if m.sessions[st.id] == st {
		delete(m.sessions, st.id)
	}
	var mine []*lease
	spared := 0
	for k, l := range m.leases {
		switch k.session {
		case st.id:
			mine = append(mine, l)
			delete(m.leases, k)
			m.detached[l] = struct{}{}
		case SharedSessionKey:
			spared++
		}
	}
	m.mu.Unlock()
	m.forgetDenials(st.id)
	// The last owner may be a call whose context already ended (Call and
	// Tools release with the caller's context): session-end cleanup is
	// detached from that cancellation (emitFact and terminateAll bound it
	// on their own), so it always completes. Its calls' outcomes are
	// durable first (each bounded by factTimeout).
	m.awaitFacts(&st.finishing)
	// Its subscriptions end before it (subscription.ended{session_ended};
	// a shared lease's server is told first, best effort).
	subErr := m.endSessionSubscriptions(ctx, st.id)
	err := m.emitFact(ctx, events.Draft{Session: st.id, Payload: &events.SessionEnded{LeasesTerminated: len(mine), SharedSpared: spared}})
	return errors.Join(subErr, err, terminateAll(ctx, mine, events.TerminatedSessionEnded))
}

// LeaseCapability is the typed per-session handle given to tool contexts:
// the exact session identity plus the manager. It never widens to a server
// grant: every call names the exact tool and digest the host authorized
// and is re-validated against the lease's pinned listing.
type LeaseCapability struct {
	m  *Manager
	st *sessionState
}

// Session returns the session identity.
func (c LeaseCapability) Session() string { return c.st.id }

// Tools acquires (or reuses) the lease of server (its config name) for
// this session and returns its pinned listing, sorted by name, for the host
// to authorize exact calls from.
func (c LeaseCapability) Tools(ctx context.Context, server string) ([]PinnedTool, error) {
	if _, err := ServerID(server); err != nil {
		return nil, newErr("tools", &leaseKey{session: c.st.id}, ErrInvalidRequest, nil)
	}
	if err := c.m.retain(c.st); err != nil {
		return nil, err
	}
	// A release ending the session here has no caller to report to: its
	// failures are kept for the next TerminateAll or Close.
	defer func() { c.m.keep(c.m.release(ctx, c.st)) }()
	if err := c.m.allowStart(ctx, c.st, server); err != nil {
		return nil, err
	}
	l, err := c.m.leaseFor(ctx, c.st.id, server)
	if err != nil {
		return nil, err
	}
	l.remember(c.st.id)
	return l.pinned().sorted(), nil
}

// Call runs one authorized tool call on the lease of req.Server for this
// session: acquired on first use (single-flight), validated by exact name
// and digest before tools/call (a mismatch poisons the lease and nothing is
// sent), admitted through the lease's call gate, with every step recorded.
// A tool error is returned as a result with IsError set, not as an error;
// a JSON-RPC error response is ErrRemote (the lease is kept).
//
// A call whose child had already ended before its request was written
// (killed or crashed while idle; the guardian's reap time precedes the
// write) is recorded as failed on the old activation and run once more on
// a fresh lease; a call the child may have seen is never repeated.
func (c LeaseCapability) Call(ctx context.Context, req CallRequest) (*mcp.CallToolResult, error) {
	id, err := ServerID(req.Server)
	if err != nil || !events.ValidToolName(req.Tool) || !events.ValidDigest(req.Digest) {
		return nil, newErr("call", &leaseKey{c.st.id, id}, ErrInvalidRequest, nil)
	}
	var args []byte
	switch a := req.Arguments.(type) {
	case nil:
		args = []byte("{}")
	case json.RawMessage:
		args = a
	default:
		b, err := json.Marshal(a)
		if err != nil {
			return nil, newErr("call", &leaseKey{c.st.id, req.Server}, ErrInvalidRequest, nil)
		}
		args = b
	}
	if err := c.m.retain(c.st); err != nil {
		return nil, err
	}
	defer func() { c.m.keep(c.m.release(ctx, c.st)) }()
	if err := c.m.allowStart(ctx, c.st, req.Server); err != nil {
		return nil, err
	}
	retried := false
	for attempt := 0; ; attempt++ {
		l, err := c.m.leaseFor(ctx, c.st.id, req.Server)
		if err != nil {
			return nil, err
		}
		res, retry, err := l.callIn(ctx, c.st, req, args)
		if retry && !retried {
			// The request provably never reached a live child: once more,
			// on a fresh lease (a new call on a new activation).
			retried = true
			attempt--
			continue
		}
		// A lease taken out of service for a reason that is not about this
		// call (reaped, replaced, child exited while idle) between lookup
		// and gate: acquire again.
		if err != nil && attempt+1 < maxAcquireAttempts && isGoneRefusal(err) {
			continue
		}
		return res, err
	}
}
