package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// AsyncAppender is an Appender that can also queue events without waiting
// for their durability. AppendPreparedAsync returns once its events are
// queued as one atomic append: every append queued after it returns is
// ordered after them. wait blocks until they are durable (or returns the
// failure: a failed append leaves the appender failed, so later appends
// fail too). An error from AppendPreparedAsync means nothing was queued. *ledger.Ledger
// implements it; an Appender without it (the remote bus appender) gets
// every event synchronously, each append awaited.
//
// With it, a call's call.finished is not awaited: it is carried, in the
// same atomic append, by the manager's next append (a sequential caller's
// next call.admitted shares its fsync) or appended on its own after
// outcomeLinger. call.admitted stays durable before the request is sent,
// so a crash can only leave an admitted call with no outcome (the audit
// reports it as outcome unknown), never a wrong one.
type AsyncAppender interface {
	Appender
	// AppendPreparedAsync queues events already prepared (events.Prepare,
	// so the runtime prepares outside the lock that orders its appends);
	// it keeps prepared until the append completed.
	AppendPreparedAsync(ctx context.Context, prepared ...events.Prepared) (wait func(context.Context) ([]events.Seq, error), err error)
}

// pendingFacts counts facts queued without waiting for their durability,
// so what must follow them durably (a lease's termination and close
// report, a session's end, Close) waits for them first. Unlike a
// sync.WaitGroup, add may run concurrently with wait at zero.
type pendingFacts struct {
	mu   sync.Mutex
	cond *sync.Cond // created on first wait
	n    int
}

func (p *pendingFacts) add() {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
}

func (p *pendingFacts) done() {
	p.mu.Lock()
	p.n--
	if p.n == 0 && p.cond != nil {
		p.cond.Broadcast()
	}
	p.mu.Unlock()
}

// wait returns once no fact is pending. Each pending fact's wait is bounded
// by factTimeout, so wait is too once adds stop.
func (p *pendingFacts) wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n > 0 {
		if p.cond == nil {
			p.cond = sync.NewCond(&p.mu)
		}
		p.cond.Wait()
	}
}

// Bounds of deferred facts.
const (
	// outcomeLinger bounds how long a deferred fact (a call's
	// call.finished, an HTTP call's call.admitted, the HTTP cleanup
	// worker's settle facts) waits for a later append of the manager to
	// carry it (in the same atomic append, so one fsync covers both: a
	// sequential caller's next call.admitted or registration usually does)
	// before it is appended on its own.
	outcomeLinger = 2 * time.Millisecond
	// maxDeferredOutcomes bounds the facts waiting to be carried; the
	// deferral that fills it appends them all at once.
	maxDeferredOutcomes = 256
)

// deferredFact is one fact waiting to be carried by a later append, with
// the trackers that count it.
type deferredFact struct {
	p              events.Prepared
	lease, session *pendingFacts
	// done, set on the last fact of a deferFactsWait group, receives
	// the group's append outcome (cap 1). A group is deferred under one
	// hold of deferredFacts.mu and taken whole, so its facts share one
	// atomic append.
	done chan error
}

// deferredFacts holds facts appended without waiting (emitFactAsync,
// deferFactsWait) until the next append of the manager carries them or the
// linger expires. mu is held across the enqueue of every append of the
// manager (never across its wait), so a deferred fact is queued before
// everything the manager appends after deferring it.
type deferredFacts struct {
	mu    sync.Mutex
	list  []deferredFact
	timer *time.Timer // the linger, armed while list is not empty
	// linger replaces outcomeLinger when set (tests, before first use).
	linger time.Duration
}

func (df *deferredFacts) lingerOr() time.Duration {
	if df.linger > 0 {
		return df.linger
	}
	return outcomeLinger
}

// takeLocked returns the deferred facts and disarms the linger; mu held.
func (df *deferredFacts) takeLocked() []deferredFact {
	taken := df.list
	df.list = nil
	if df.timer != nil {
		df.timer.Stop()
	}
	return taken
}

// withDeferred returns taken's events followed by prepared.
func withDeferred(taken []deferredFact, prepared []events.Prepared) []events.Prepared {
	if len(taken) == 0 {
		return prepared
	}
	all := make([]events.Prepared, 0, len(taken)+len(prepared))
	for _, f := range taken {
		all = append(all, f.p)
	}
	return append(all, prepared...)
}

// prepare prepares drafts (the error is the ledger's for an invalid draft).
func prepare(drafts []events.Draft) ([]events.Prepared, error) {
	out := make([]events.Prepared, len(drafts))
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// preparedDraft is enough of a prepared event to name it in an error.
func preparedDraft(p events.Prepared) events.Draft {
	return events.Draft{Activation: p.Activation, Session: p.Session, Server: p.Server}
}

// emitFactAsync appends facts about a step already taken, like emitFact,
// but without waiting for their durability when the appender can queue
// (AsyncAppender): they are deferred until the manager's next append,
// which carries them in front of its own events, or for at most
// outcomeLinger, and everything the manager appends later is ordered after
// them. They are counted in lease and session (either may be nil) and in
// the manager's tracker until durable (see settle). Without an
// AsyncAppender they are appended synchronously.
func (m *Manager) emitFactAsync(ctx context.Context, lease, session *pendingFacts, d events.Draft) {
	if _, ok := m.opts.Ledger.(AsyncAppender); !ok {
		m.keep(m.emitFact(ctx, d))
		return
	}
	p, err := events.Prepare(d)
	if err != nil {
		m.keep(appendErr(err, []events.Draft{d}))
		return
	}
	m.deferFacts([]events.Prepared{p}, lease, session, nil)
}

// deferFactsWait defers facts about a step already taken until the
// manager's next append carries them (in the same atomic append, within
// outcomeLinger) instead of committing them on their own, and returns a
// wait for their durability. Two callers use it: the HTTP cleanup worker,
// whose settle facts then ride the next call's registration, and an HTTP
// call's call.admitted, which rides its own request's registration (the
// next append of the manager, ordered before it: its acknowledgement
// proves the admission durable, and a failed append fails it), so a
// sequential HTTP call costs one commit, not two or three. Everything the
// manager appends after deferFactsWait returns is ordered after the facts.
// wait is bounded by factTimeout; the facts stay counted in the manager's
// tracker until their append completed, whatever wait returned. Without
// an AsyncAppender the facts are appended at once (emitFact) and wait
// returns nil.
func (m *Manager) deferFactsWait(drafts ...events.Draft) (wait func() error, err error) {
	if _, ok := m.opts.Ledger.(AsyncAppender); !ok {
		if err := m.emitFact(context.Background(), drafts...); err != nil {
			return nil, err
		}
		return func() error { return nil }, nil
	}
	prepared, err := prepare(drafts)
	if err != nil {
		return nil, appendErr(err, drafts)
	}
	done := make(chan error, 1)
	m.deferFacts(prepared, nil, nil, done)
	return func() error {
		timer := time.NewTimer(factTimeout)
		defer timer.Stop()
		var err error
		select {
		case err = <-done:
		case <-timer.C:
			err = context.DeadlineExceeded
		}
		if err != nil {
			return appendErr(err, drafts)
		}
		return nil
	}, nil
}

// deferFacts adds prepared to the deferred facts (counted in lease,
// session and the manager's tracker until durable) and arms the linger;
// done, if not nil, is told the outcome of their append. Filling
// maxDeferredOutcomes appends them all at once.
func (m *Manager) deferFacts(prepared []events.Prepared, lease, session *pendingFacts, done chan error) {
	for range prepared {
		m.facts.add()
		if lease != nil {
			lease.add()
		}
		if session != nil {
			session.add()
		}
	}
	df := &m.deferred
	df.mu.Lock()
	for i, p := range prepared {
		f := deferredFact{p: p, lease: lease, session: session}
		if i == len(prepared)-1 {
			f.done = done
		}
		df.list = append(df.list, f)
	}
	full := len(df.list) >= maxDeferredOutcomes
	if !full {
		if df.timer == nil {
			df.timer = time.AfterFunc(df.lingerOr(), func() { m.flushDeferred(true) })
		} else if len(df.list) == len(prepared) {
			df.timer.Reset(df.lingerOr())
		}
	}
	df.mu.Unlock()
	if full {
		m.flushDeferred(false)
	}
}

// flushDeferred appends the deferred facts on their own; inline waits for
// their durability before returning (the linger's own goroutine), else a
// goroutine does.
func (m *Manager) flushDeferred(inline bool) {
	aa := m.opts.Ledger.(AsyncAppender)
	df := &m.deferred
	df.mu.Lock()
	taken := df.takeLocked()
	if len(taken) == 0 {
		df.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), factTimeout)
	wait, err := aa.AppendPreparedAsync(ctx, withDeferred(taken, nil)...)
	df.mu.Unlock()
	if err != nil {
		cancel()
		m.settle(taken, err)
		return
	}
	finish := func() {
		defer cancel()
		_, err := wait(ctx)
		m.settle(taken, err)
	}
	if inline {
		finish()
	} else {
		go finish()
	}
}

// emitAsync is emit through an AsyncAppender: the deferred facts are
// queued in front of drafts, in the same atomic append, and become durable
// with them.
func (m *Manager) emitAsync(ctx context.Context, aa AsyncAppender, drafts []events.Draft) error {
	prepared, err := prepare(drafts)
	if err != nil {
		return appendErr(err, drafts)
	}
	wait, taken, err := m.enqueue(ctx, aa, prepared)
	if err != nil {
		return appendErr(err, drafts)
	}
	_, err = wait(ctx)
	if len(taken) > 0 {
		if err == nil {
			m.settle(taken, nil)
		} else {
			// In doubt for the caller (its context ended): the deferred
			// facts' own wait is detached from that.
			go func() {
				wctx, cancel := context.WithTimeout(context.Background(), factTimeout)
				defer cancel()
				_, err := wait(wctx)
				m.settle(taken, err)
			}()
		}
	}
	if err != nil {
		return appendErr(err, drafts)
	}
	return nil
}

// enqueue queues prepared behind the deferred facts it takes, in one
// atomic append, and returns its wait and the facts taken (to settle once
// it completed). When nothing could be queued (the caller's context
// ended, say), the deferred facts go on their own, still before anything
// appended later, and none is returned.
func (m *Manager) enqueue(ctx context.Context, aa AsyncAppender, prepared []events.Prepared) (func(context.Context) ([]events.Seq, error), []deferredFact, error) {
	df := &m.deferred
	df.mu.Lock()
	taken := df.takeLocked()
	wait, err := aa.AppendPreparedAsync(ctx, withDeferred(taken, prepared)...)
	if err != nil && len(taken) > 0 {
		df.list = append(taken, df.list...)
		df.mu.Unlock()
		m.flushDeferred(false)
		return nil, nil, err
	}
	df.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	return wait, taken, nil
}

// settle ends the tracking of deferred facts whose append completed with
// err: a failure is kept (Manager.keep) before anyone waiting is woken.
func (m *Manager) settle(taken []deferredFact, err error) {
	if err != nil {
		m.keep(appendErr(err, []events.Draft{preparedDraft(taken[0].p)}))
	}
	for _, f := range taken {
		if f.done != nil {
			f.done <- err
		}
		if f.lease != nil {
			f.lease.done()
		}
		if f.session != nil {
			f.session.done()
		}
		m.facts.done()
	}
}

// awaitFacts makes the deferred facts durable now and waits for those
// counted in p (nil: the manager's).
func (m *Manager) awaitFacts(p *pendingFacts) {
	if _, ok := m.opts.Ledger.(AsyncAppender); !ok {
		return
	}
	m.flushDeferred(false)
	if p == nil {
		p = &m.facts
	}
	p.wait()
}
