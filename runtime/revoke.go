package runtime

import (
	"context"
	"errors"

	"github.com/leaseledger/leaseledger/events"
)

// Revocation and denial. A session's lease and a server's shared lease are
// revoked by separate operations: Revoke never touches a shared lease (a
// session must not end a child every session uses), RevokeShared is the
// explicit operation for it. Deny and DenyShared revoke and keep the key
// denied until Allow or AllowShared lifts it.
//
// Denials live in their own set under denyMu, a leaf lock: the call gate
// consults it while holding its lease's gate lock, and nothing is taken
// while denyMu is held.

// Revoke marks the session's own lease of server (a config name) cancelled
// under its call gate, and returns once no further call can pass that gate
// and lease.revoked is durable. Calls already past the gate may complete;
// the last of them to complete kills the child before returning. With no
// call in flight, Revoke ends the child itself (and its error includes
// what of that termination failed to record). A shared lease is never
// revoked here, whoever the session is (see RevokeShared). Revoking nothing
// is not an error; reason is a machine code ([a-z0-9_]{1,64},
// events.ValidCode). The next call acquires a fresh lease unless the key is
// denied (Deny).
func (m *Manager) Revoke(ctx context.Context, session, server, reason string) error {
	key, err := sessionKey("revoke", session, server, reason)
	if err != nil {
		return err
	}
	_, err = m.revokeKey(ctx, key, reason)
	return err
}

// RevokeShared revokes the shared lease of server (a server configured
// "shared": true) like Revoke does a session's lease: every session's calls
// on it are refused after it returns, and the next call acquires a fresh
// shared lease unless it is denied (DenyShared).
func (m *Manager) RevokeShared(ctx context.Context, server, reason string) error {
	key, err := sharedKey("revoke", server, reason)
	if err != nil {
		return err
	}
	_, err = m.revokeKey(ctx, key, reason)
	return err
}

// Deny denies server (a config name) to session and revokes the session's
// own lease of it (as Revoke, with reason). Until Allow lifts the denial,
// every Call or Tools of that session for that server — shared or not —
// is refused with ErrDenied: an acquisition records
// lease.acquire_failed{reason: denied} and starts nothing; a call reaching
// a lease's gate records call.refused{reason: denied}. Other sessions are
// not affected. A session's denials end with the session (its last
// release), like its leases.
//
// Deny fails with ErrSessionEnded, denying nothing, when session has no
// open scope: the denied set stays bounded by the open sessions (denials
// are held in memory only and do not survive a restart).
func (m *Manager) Deny(ctx context.Context, session, server, reason string) error {
	_, err := m.deny(ctx, session, server, reason)
	return err
}

// deny is Deny, saying how many leases it revoked.
func (m *Manager) deny(ctx context.Context, session, server, reason string) (int, error) {
	key, err := sessionKey("deny", session, server, reason)
	if err != nil {
		return 0, err
	}
	// Checked and set under the map lock (denyMu is a leaf taken under
	// it): a session's release marks it ended under that lock before it
	// forgets the session's denials, so none outlives its session.
	m.mu.Lock()
	st, open := m.sessions[session]
	if !open || st.ended {
		m.mu.Unlock()
		return 0, newErr("deny", &key, ErrSessionEnded, nil)
	}
	m.setDenied(key, true)
	m.mu.Unlock()
	return m.revokeKey(ctx, key, reason)
}

// DenyShared denies the shared lease of server to every session and
// revokes it (as RevokeShared), until AllowShared lifts it.
func (m *Manager) DenyShared(ctx context.Context, server, reason string) error {
	key, err := sharedKey("deny", server, reason)
	if err != nil {
		return err
	}
	m.setDenied(key, true)
	_, err = m.revokeKey(ctx, key, reason)
	return err
}

// Allow lifts Deny for (session, server); allowing what is not denied is
// not an error.
func (m *Manager) Allow(session, server string) error {
	key, err := sessionKey("allow", session, server, "allowed")
	if err != nil {
		return err
	}
	m.setDenied(key, false)
	return nil
}

// AllowShared lifts DenyShared for server.
func (m *Manager) AllowShared(server string) error {
	key, err := sharedKey("allow", server, "allowed")
	if err != nil {
		return err
	}
	m.setDenied(key, false)
	return nil
}

// sessionKey validates a session operation's arguments and returns the
// session's own key. SharedSessionKey is not a session.
func sessionKey(op, session, server, reason string) (leaseKey, error) {
	id, err := ServerID(server)
	if err != nil || !events.ValidID(session) || session == SharedSessionKey || !events.ValidCode(reason) {
		return leaseKey{}, newErr(op, nil, ErrInvalidRequest, nil)
	}
	return leaseKey{session, id}, nil
}

// sharedKey validates a shared-lease operation's arguments and returns the
// shared key of server.
func sharedKey(op, server, reason string) (leaseKey, error) {
	id, err := ServerID(server)
	if err != nil || !events.ValidCode(reason) {
		return leaseKey{}, newErr(op, nil, ErrInvalidRequest, nil)
	}
	return leaseKey{SharedSessionKey, id}, nil
}

// ErrNoLease: RevokeLease found nothing to act on — no lease at the key
// to revoke, or, to deny, neither a lease nor a configured server of that
// name.
var ErrNoLease = errors.New("runtime: no such lease")

// RevokeLease is the operator's revocation (the control API's): Revoke,
// or with shared RevokeShared (session ""), or with deny Deny or
// DenyShared, saying how many leases it revoked (0 or 1). server is a
// config name or a server id (ServerID's, as the lease table shows it);
// an id that is not a valid name's own id finds the lease but cannot be
// looked up in the configuration. Unlike those, finding nothing is an
// error: ErrNoLease when there is no lease to revoke (a session's revoke
// of a shared server's lease included: see RevokeShared), or, to deny,
// neither a lease nor a configured server.
func (m *Manager) RevokeLease(ctx context.Context, session string, shared bool, server, reason string, deny bool) (int, error) {
	op := "revoke"
	if deny {
		op = "deny"
	}
	var key leaseKey
	var err error
	if shared {
		key, err = sharedKey(op, server, reason)
	} else {
		key, err = sessionKey(op, session, server, reason)
	}
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	_, leased := m.leases[key]
	m.mu.Unlock()
	if !leased && (!deny || !m.configured(ctx, server)) {
		return 0, newErr(op, &key, ErrNoLease, nil)
	}
	switch {
	case deny && shared:
		m.setDenied(key, true)
		return m.revokeKey(ctx, key, reason)
	case deny:
		return m.deny(ctx, session, server, reason)
	}
	n, err := m.revokeKey(ctx, key, reason)
	if n == 0 && err == nil {
		return 0, newErr(op, &key, ErrNoLease, nil) // ended meanwhile
	}
	return n, err
}

// configured reports whether server is a name the configuration has.
func (m *Manager) configured(ctx context.Context, server string) bool {
	_, err := m.opts.Config.Lookup(ctx, server)
	return err == nil
}

// revokeKey revokes the mapped lease of key, if any, and says how many it
// revoked (0 or 1).
func (m *Manager) revokeKey(ctx context.Context, key leaseKey, reason string) (int, error) {
	m.mu.Lock()
	l := m.leases[key]
	m.mu.Unlock()
	if l == nil {
		return 0, nil
	}
	select {
	case <-l.ready:
	case <-ctx.Done():
		return 0, newErr("revoke", &l.key, ErrTerminated, ctx.Err())
	}
	if l.err != nil {
		return 0, nil
	}
	return 1, l.revoke(ctx, reason)
}

// setDenied adds key to or removes it from the denied set.
func (m *Manager) setDenied(key leaseKey, on bool) {
	m.denyMu.Lock()
	defer m.denyMu.Unlock()
	if !on {
		delete(m.denied, key)
		return
	}
	if m.denied == nil {
		m.denied = make(map[leaseKey]struct{})
	}
	m.denied[key] = struct{}{}
}

// isDenied reports whether session may not use a lease of key: the server
// is denied to the session, or key is a shared key that is denied.
func (m *Manager) isDenied(session string, key leaseKey) bool {
	m.denyMu.Lock()
	defer m.denyMu.Unlock()
	if len(m.denied) == 0 {
		return false
	}
	_, mine := m.denied[leaseKey{session, key.server}]
	_, shared := m.denied[key]
	return mine || (key.session == SharedSessionKey && shared)
}

// forgetDenials drops session's denials when it ends (bounding the set by
// live sessions).
func (m *Manager) forgetDenials(session string) {
	m.denyMu.Lock()
	defer m.denyMu.Unlock()
	for k := range m.denied {
		if k.session == session {
			delete(m.denied, k)
		}
	}
}

// refuseDenied refuses an acquisition of key for session while it is
// denied: lease.acquire_failed{reason: denied} under a fresh activation
// (nothing is started, so the audit reports it as never started).
func (m *Manager) refuseDenied(ctx context.Context, session string, key leaseKey, fingerprint string) error {
	if !m.isDenied(session, key) {
		return nil
	}
	act := newActivationID()
	m.keep(m.emitFact(ctx, events.Draft{Activation: act, Session: session, Server: key.server,
		Payload: &events.LeaseAcquireFailed{Fingerprint: fingerprint, Reason: "denied"}}))
	e := newErr("acquire", &leaseKey{session, key.server}, ErrDenied, nil)
	e.Activation = act
	return e
}
