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
			l.state, l.goneReason = stateGone, events.TerminatedReaped
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
			return errors.Join(err, v.l.terminate(ctx, events.TerminatedReaped))
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

// ReapIdle runs one reap pass now (shared leases included) and ends the
// reaped leases before returning. A lease is reaped when it has no call in
// flight and has been idle for at least idleMax; idleMax zero (or
// negative) means the manager's IdleMax — it does not mean "every idle
// lease" (pass a small positive bound for that). It scans at most
// MaxLiveLeases entries and returns how many leases it reaped, and what of
// their reaping and termination failed to record (nil when everything was
// recorded).
func (m *Manager) ReapIdle(ctx context.Context, idleMax time.Duration) (int, error) {
	if idleMax <= 0 {
		idleMax = m.opts.IdleMax
	}
	return m.reapPass(ctx, idleMax, true)
}

// startReaper starts the background reaper (Options.ReapInterval). It is
// registered in bg, which Close waits for after closing stopReaper.
func (m *Manager) startReaper(every time.Duration) {
	m.stopReaper = make(chan struct{})
	m.bg.Add(1)
	go m.reaper(every)
}

// reaper runs a synchronous reap pass every interval until Close. Its
// passes terminate their leases in this goroutine (no goroutine per
// lease), and what fails to record is kept for TerminateAll or Close. A
// pass after Close began reaps nothing (reapPass checks closed), and the
// leases of a pass under way are ended by Close's TerminateAll if this
// goroutine has not got to them.
func (m *Manager) reaper(every time.Duration) {
	defer m.bg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stopReaper:
			return
		case <-t.C:
		}
		_, err := m.reapPass(context.Background(), m.opts.IdleMax, true)
		m.keep(err)
	}
}
