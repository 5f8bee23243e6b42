package runtime

import (
	"context"
	"errors"

	"github.com/leaseledger/leaseledger/events"
)

// leaseFor looks up the server's current config and returns a ready lease
// pinned to it, after an opportunistic reap pass.
func (m *Manager) leaseFor(ctx context.Context, session, server string) (*lease, error) {
	return m.leaseForOpts(ctx, session, server, acquireOpts{})
}

// acquireOpts are an acquisition's connection options (OpenConnection);
// the zero value is an ordinary call's acquisition.
type acquireOpts struct {
	// explicit: the host opens this connection (OpenConnection). It may
	// start a new activation where a one-shot one ended, and refuses a
	// live connection that does not match the options.
	explicit bool
	// activation is the host-supplied activation id; empty mints one.
	activation string
	// oneShot asks for a one-shot activation (also set by the entry).
	oneShot bool
}

// leaseForOpts is leaseFor with connection options.
func (m *Manager) leaseForOpts(ctx context.Context, session, server string, o acquireOpts) (*lease, error) {
	m.maybeReap(ctx)
	cfg, err := m.lookup(ctx, session, server)
	if err != nil {
		return nil, err
	}
	if err := m.refuseDenied(ctx, session, keyFor(session, server, cfg), m.fingerprint(cfg)); err != nil {
		return nil, err
	}
	if h := m.testHookDenyChecked; h != nil {
		h()
	}
	return m.acquireOpts(ctx, session, server, cfg, o)
}

// oneShotEnded is the refusal of an acquisition under an ended one-shot
// activation.
func oneShotEnded(key leaseKey, act string) error {
	e := newErr("acquire", &key, ErrOneShotEnded, nil)
	e.Activation = act
	return e
}

// lookup reads the server's current config entry; server is its config
// name, which the entry remembers (lease.acquiring's config_name).
func (m *Manager) lookup(ctx context.Context, session, server string) (ServerConfig, error) {
	cfg, err := m.opts.Config.Lookup(ctx, server)
	if err != nil {
		if le, ok := err.(*LeaseError); ok {
			le.Session = session
			return ServerConfig{}, le
		}
		return ServerConfig{}, newErr("config", &leaseKey{session, configErrID(server)}, ErrConfigInvalid, nil)
	}
	if err := cfg.check(); err != nil {
		var cause error // check's text is our own, but only this one is a host's remedy to name
		if errors.Is(err, ErrVerifiedUnsupported) {
			cause = ErrVerifiedUnsupported
		}
		return ServerConfig{}, newErr("config", &leaseKey{session, configErrID(server)}, ErrConfigInvalid, cause)
	}
	cfg.name = server
	return cfg, nil
}

// acquire returns a ready lease of server for session pinned to cfg's
// fingerprint, starting one if needed. Single-flight: the first caller
// inserts a starting placeholder and does the I/O without the map lock;
// others wait on its ready channel.
func (m *Manager) acquire(ctx context.Context, session, server string, cfg ServerConfig) (*lease, error) {
	return m.acquireOpts(ctx, session, server, cfg, acquireOpts{})
}

// acquireOpts is acquire with connection options. A one-shot activation
// (the entry's oneShot or o.oneShot) is never replaced: once its lease is
// gone (child exit, reap, revoke, stale config, close), acquisitions at
// its key fail with ErrOneShotEnded until an explicit open or the end of
// the session.
func (m *Manager) acquireOpts(ctx context.Context, session, server string, cfg ServerConfig, o acquireOpts) (*lease, error) {
	key, fp := keyFor(session, server, cfg), m.fingerprint(cfg)
	capTried := false
	for attempt := 0; ; attempt++ {
		if attempt >= maxAcquireAttempts {
			return nil, newErr("acquire", &key, ErrTerminated, nil)
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, newErr("acquire", &key, ErrClosed, nil)
		}
		m.conns.init()
		if c, ok := m.conns.claims[key]; ok {
			cur := m.leases[key]
			switch {
			case c.st != nil && m.sessions[key.session] != c.st:
				delete(m.conns.claims, key) // its session ended: stale
			case cur != nil && cur.activation == c.activation:
				// The one-shot lease itself is live (or starting).
			case o.explicit:
				delete(m.conns.claims, key) // the host opens a new activation
			default:
				m.mu.Unlock()
				return nil, oneShotEnded(key, c.activation)
			}
		}
		if l := m.leases[key]; l != nil {
			m.mu.Unlock()
			if h := m.testHookWaiting; h != nil && !l.isReady() {
				h(key.session, key.server)
			}
			select {
			case <-l.ready:
			case <-ctx.Done():
				return nil, newErr("acquire", &key, ErrTerminated, ctx.Err())
			}
			if l.err != nil {
				if l.acquirerCancelled && ctx.Err() == nil {
					// Only the acquirer's own context ended: that is no
					// verdict on this caller's acquisition. Try again (not
					// counted: each such retry consumed another caller's
					// cancellation).
					attempt--
					continue
				}
				return nil, l.err
			}
			if o.explicit && ((o.activation != "" && o.activation != l.activation) || (o.oneShot && !l.oneShot)) {
				e := newErr("acquire", &key, ErrConnectionOpen, nil)
				e.Activation = l.activation
				return nil, e
			}
			if l.fingerprint != fp {
				// The pinned entry differs from ours. Ours may be the stale
				// one (read before a change a newer lease is pinned to), so
				// decide against the current entry: only a lease whose
				// fingerprint differs from the current entry is replaced.
				cur, err := m.lookup(ctx, session, server)
				if err != nil {
					return nil, err
				}
				if curFP := m.fingerprint(cur); curFP != fp {
					cfg, fp, key = cur, curFP, keyFor(session, server, cur)
					continue
				}
				// Ours is current: a call must never run on the old child.
				// Take it out of service first, then record and end it.
				if m.removeIf(l) {
					l.markGone(events.TerminatedStaleConfig)
					if !l.oneShot {
						m.keep(m.emitFact(ctx, l.draft(&events.LeaseStaleReplaced{OldFingerprint: l.fingerprint, NewFingerprint: fp})))
					}
					m.keep(l.terminate(ctx, events.TerminatedStaleConfig))
				}
				if l.oneShot && !o.explicit {
					return nil, oneShotEnded(key, l.activation) // never replaced
				}
				continue
			}
			if l.childGone() {
				if m.removeIf(l) {
					l.markGone(events.TerminatedChildExited)
					m.keep(l.terminate(ctx, events.TerminatedChildExited))
				}
				if l.oneShot && !o.explicit {
					return nil, oneShotEnded(key, l.activation) // never replaced
				}
				continue
			}
			return l, nil
		}
		if len(m.leases)+len(m.detached) >= m.maxLive {
			ending := m.endingLocked()
			// The refusal's activation is chosen under m.mu: the connection
			// table is written by closes running concurrently.
			refused := o.activation
			if refused == "" || m.conns.inUse(refused) {
				refused = newActivationID()
			}
			m.mu.Unlock()
			if !capTried {
				// Once per acquisition: reap idle leases now, and wait for
				// detached leases already being terminated (a background
				// reap, a stale or poisoned lease) to free their slots.
				capTried = true
				n, err := m.reapPass(ctx, m.opts.IdleMax, true)
				m.keep(err)
				if n > 0 || waitTerminated(ctx, ending) > 0 {
					continue
				}
			}
			m.keep(m.emit(ctx, events.Draft{Activation: refused, Session: key.session, Server: key.server,
				Payload: &events.LeaseAcquireFailed{Fingerprint: fp, Reason: "too_many_leases"}}))
			e := newErr("acquire", &key, ErrTooManyLeases, nil)
			e.Count = m.maxLive
			return nil, e
		}
		if m.isDenied(session, key) {
			// Deny may have run since leaseForOpts checked. Deny marks the
			// key before it looks for a lease under m.mu, so checking again
			// here, under m.mu and before the placeholder exists, leaves no
			// window: either this sees the denial, or Deny sees the lease.
			m.mu.Unlock()
			if err := m.refuseDenied(ctx, session, key, fp); err != nil {
				return nil, err
			}
			continue // allowed again meanwhile
		}
		act := o.activation
		if act == "" {
			act = newActivationID()
		} else if m.conns.inUse(act) {
			m.mu.Unlock()
			e := newErr("acquire", &key, ErrInvalidRequest, nil)
			e.Activation = act
			return nil, e
		}
		l := newLease(m, key, cfg, fp, act, cfg.OneShot || o.oneShot)
		l.starter = session
		m.leases[key] = l
		m.conns.byAct[act] = l
		if l.oneShot {
			m.claimLocked(key, act)
		}
		m.mu.Unlock()

		err := l.start(ctx)
		if err == nil && !m.stillMapped(l) {
			// Removed while starting (session end, TerminateAll): the
			// remover saw a placeholder, so ending the child is ours.
			l.markGone(events.TerminatedWhileStarting)
			m.keep(l.terminate(ctx, events.TerminatedWhileStarting))
			le := newErr("acquire", &key, ErrTerminated, nil)
			le.Activation = l.activation
			err = le
		}
		if err != nil {
			m.removeIf(l)
			m.settled(l)
			m.mu.Lock()
			if c, ok := m.conns.claims[key]; ok && c.activation == l.activation {
				// A failed acquisition is no activation to hold the key for.
				delete(m.conns.claims, key)
			}
			m.mu.Unlock()
			l.err = err
			// Waiters whose own context is live retry rather than share a
			// failure that was only this caller's cancellation.
			l.acquirerCancelled = ctx.Err() != nil
		}
		close(l.ready) // wakes every waiter; a closed channel cannot be missed
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// removeIf deletes l from the map if it is still the entry for its key;
// it stays tracked as detached until its termination completes.
func (m *Manager) removeIf(l *lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.key] == l {
		delete(m.leases, l.key)
		m.detached[l] = struct{}{}
		return true
	}
	return false
}

// endingLocked returns the detached ready leases whose termination is
// under way or imminent: every one except revoked leases with calls still
// in flight (those end when their last call returns, which may be never).
// m.mu is held (lock order m.mu, then l.mu).
func (m *Manager) endingLocked() []*lease {
	var out []*lease
	for l := range m.detached {
		if !l.isReady() || l.err != nil {
			continue
		}
		l.mu.Lock()
		if l.state != stateRevoked || l.inflight == 0 {
			out = append(out, l)
		}
		l.mu.Unlock()
	}
	return out
}

// waitTerminated waits (bounded by ctx) for the terminations of ls and
// returns how many completed.
func waitTerminated(ctx context.Context, ls []*lease) int {
	n := 0
	for _, l := range ls {
		select {
		case <-l.termDone:
			n++
		case <-ctx.Done():
			return n
		}
	}
	return n
}

// settled forgets a detached lease whose termination completed (or whose
// acquisition failed, so it has no child).
func (m *Manager) settled(l *lease) {
	m.mu.Lock()
	delete(m.detached, l)
	if m.conns.byAct[l.activation] == l {
		delete(m.conns.byAct, l.activation)
	}
	m.mu.Unlock()
}

func (m *Manager) stillMapped(l *lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leases[l.key] == l
}
