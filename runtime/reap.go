package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// maybeReap runs an opportunistic pass at most every IdleMax/4 (and at
// least every second), so a hot call path does not scan the map on every
// call. Reaped leases end in background goroutines the manager waits for
// in Close; there is never more than one per lease.
func (m *Manager) maybeReap(ctx context.Context) {
	now := m.opts.Now()
	every := min(max(m.opts.IdleMax/4, time.Millisecond), time.Second)
	last := m.lastReap.Load()
	if now.UnixNano()-last < int64(every) || !m.lastReap.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	_, err := m.reapPass(ctx, m.opts.IdleMax, false)
	m.keep(err)
}

// reapPass scans at most maxLive entries and removes leases idle for at
// least idleMax with no call in flight. sync terminates them before
// returning (and returns what failed to record); otherwise they end in
// tracked background goroutines whose failures are kept for Close. Shared
// leases are reaped too.
func (m *Manager) reapPass(ctx context.Context, idleMax time.Duration, sync bool) (int, error) {
	now := m.opts.Now()
	type victim struct {
		l    *lease
		idle time.Duration
	}
	var victims []victim
	m.mu.Lock()
	if m.closed {
		// Close ends every lease itself and must not race a pass whose
		// background terminations it could miss.
		m.mu.Unlock()
		return 0, nil
	}
	scanned := 0
	for k, l := range m.leases {
		if scanned >= m.maxLive {
			break
		}
		scanned++
		if !l.isReady() || l.err != nil {
			continue
		}
		// Lock order: m.mu then l.mu; l.mu is never held while taking m.mu.
		l.mu.Lock()
		idle := now.Sub(l.lastUsed)
		if l.state == stateActive && l.inflight == 0 && idle >= idleMax {
			l.state, l.goneReason = stateGone, "reaped"
			victims = append(victims, victim{l, idle})
			delete(m.leases, k)
			m.detached[l] = struct{}{}
		}
		l.mu.Unlock()
	}
	if !sync {
		// Registered under the lock that Close takes to set closed, so
		// Close's bg.Wait covers every background termination of a pass
		// that ran before it.
		m.bg.Add(len(victims))
	}
	m.mu.Unlock()
	if h := m.testHookReapScanned; h != nil {
		h()
	}
	errs := make([]error, 0, len(victims))
	for _, v := range victims {
		run := func() error {
			err := m.emitFact(ctx, v.l.draft(&events.LeaseReaped{IdleNS: int64(v.idle), IdleMaxNS: int64(max(idleMax, 1))}))
			return errors.Join(err, v.l.terminate(ctx, "reaped"))
		}
		if sync {
			errs = append(errs, run())
			continue
		}
		go func() {
			defer m.bg.Done()
			m.keep(run())
		}()
	}
	return len(victims), errors.Join(errs...)
}

// ReapIdle runs one reap pass now (shared leases included) with idleMax
// (the manager's IdleMax when zero) and ends the reaped leases before
// returning. It scans at most MaxLiveLeases entries and returns how many
// leases it reaped, and what of their reaping and termination failed to
// record (nil when everything was recorded).
func (m *Manager) ReapIdle(ctx context.Context, idleMax time.Duration) (int, error) {
	if idleMax <= 0 {
		idleMax = m.opts.IdleMax
	}
	return m.reapPass(ctx, idleMax, true)
}
