package runtime

import (
	"context"
	"sync"

	"github.com/leaseledger/leaseledger/events"
)

// AsyncAppender is an Appender that can also queue events without waiting
// for their durability. AppendAsync returns once drafts are queued as one
// atomic append: every append queued after it returns is ordered after
// them. wait blocks until they are durable (or returns the failure: a
// failed append leaves the appender failed, so later appends fail too). An
// error from AppendAsync means nothing was queued. *ledger.Ledger
// implements it; an Appender without it (the remote bus appender) gets
// every event synchronously.
//
// The runtime uses it for exactly one record: a call's call.finished, so
// the caller does not wait for its fsync. call.admitted stays durable
// before the request is sent, so a crash can only leave an admitted call
// with no outcome (the audit reports it as outcome unknown), never a wrong
// one.
type AsyncAppender interface {
	Appender
	AppendAsync(ctx context.Context, drafts ...events.Draft) (wait func(context.Context) ([]events.Seq, error), err error)
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

// emitFactAsync appends facts about a step already taken, like emitFact,
// but without waiting for their durability when the appender can queue
// (AsyncAppender): they are queued before it returns, so everything
// appended later is ordered after them, and their durability is awaited in
// the background, counted in lease and session (either may be nil) and in
// the manager's tracker, which Close waits for. A failure is kept (Manager.keep): the next TerminateAll
// or Close returns it.
func (m *Manager) emitFactAsync(ctx context.Context, lease, session *pendingFacts, drafts ...events.Draft) {
	aa, ok := m.opts.Ledger.(AsyncAppender)
	if !ok {
		m.keep(m.emitFact(ctx, drafts...))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), factTimeout)
	wait, err := aa.AppendAsync(ctx, drafts...)
	if err != nil {
		cancel()
		m.keep(appendErr(err, drafts))
		return
	}
	m.facts.add()
	for _, t := range [2]*pendingFacts{lease, session} {
		if t != nil {
			t.add()
		}
	}
	go func() {
		defer cancel()
		if _, err := wait(ctx); err != nil {
			m.keep(appendErr(err, drafts)) // kept before anyone waiting is woken
		}
		for _, t := range [2]*pendingFacts{lease, session} {
			if t != nil {
				t.done()
			}
		}
		m.facts.done()
	}()
}
