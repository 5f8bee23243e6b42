package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// asyncLedger is the test's real ledger with its async appends' waits
// observed: held until release is closed, or lost (the host stopped
// before the queued outcome became durable: nothing is written and the
// wait fails).
type asyncLedger struct {
	*ledger.Ledger
	release chan struct{}
	lose    bool
	queued  chan events.Kind
}

var errHostLost = errors.New("test: host lost before the append was durable")

func (a *asyncLedger) AppendAsync(ctx context.Context, drafts ...events.Draft) (func(context.Context) ([]events.Seq, error), error) {
	a.queued <- drafts[0].Payload.Kind()
	if a.lose {
		return func(context.Context) ([]events.Seq, error) { return nil, errHostLost }, nil
	}
	wait, err := a.Ledger.AppendAsync(ctx, drafts...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) ([]events.Seq, error) {
		<-a.release
		return wait(ctx)
	}, nil
}

func newAsyncEnv(t *testing.T, lose bool) (*env, *asyncLedger) {
	var al *asyncLedger
	e := newEnv(t, func(o *Options) {
		al = &asyncLedger{Ledger: o.Ledger.(*ledger.Ledger), release: make(chan struct{}), lose: lose, queued: make(chan events.Kind, 16)}
		o.Ledger = al
	})
	e.cfg.Set("ts", testServer(nil))
	return e, al
}

// A call returns without waiting for its call.finished to be durable,
// and the session's end (its release, its leases' termination and close
// reports) waits for it, so the outcome precedes them in the log.
func TestCallReturnsBeforeOutcomeIsDurable(t *testing.T) {
	e, al := newAsyncEnv(t, false)
	ctx := ctxT(t, 20*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	res, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v", err)
	}
	// Call returned while the wait for its outcome is held.
	select {
	case k := <-al.queued:
		if k != events.Kind("call.finished") {
			t.Fatalf("queued without waiting: %s, want only call.finished", k)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call.finished was not queued without waiting")
	}
	released := make(chan error, 1)
	go func() { released <- s.Release(ctx) }()
	select {
	case err := <-released:
		t.Fatalf("session ended before its call's outcome was durable: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(al.release)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	var finished, ended, terminated ledger.Seq
	for _, x := range e.events() {
		switch x.Kind {
		case events.Kind("call.finished"):
			finished = x.Seq
		case events.Kind("session.ended"):
			ended = x.Seq
		case events.Kind("lease.terminated"):
			terminated = x.Seq
		}
	}
	if finished == 0 || ended <= finished || terminated <= finished {
		t.Fatalf("call.finished %d, session.ended %d, lease.terminated %d", finished, ended, terminated)
	}
}

// A host lost after a call's admission and before its outcome was durable
// leaves the call admitted with no outcome: the audit reports it as
// outcome unknown, never an outcome; the failure is not lost silently
// (Close returns it).
func TestLostOutcomeIsUnknownInTheAudit(t *testing.T) {
	e, al := newAsyncEnv(t, true)
	ctx := ctxT(t, 20*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	act := e.m.leaseOf("s1", "ts").activation
	if res, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil || res.IsError {
		t.Fatalf("call: %v", err)
	}
	select {
	case <-al.queued:
	case <-time.After(5 * time.Second):
		t.Fatal("call.finished was not queued without waiting")
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Close(ctx); !errors.Is(err, ErrLedger) || !errors.Is(err, errHostLost) {
		t.Fatalf("Close after a lost outcome: %v", err)
	}
	f := audit.NewFold(act, audit.Options{})
	for env, err := range e.l.Events(ctx, ledger.Query{Activation: act}) {
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind == events.Kind("call.finished") {
			t.Fatalf("call.finished at seq %d although it was lost", env.Seq)
		}
		if err := f.Add(&env); err != nil {
			t.Fatal(err)
		}
	}
	out, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(out.CallsOutcomeUnknown) != 1 || out.CallsOutcomeUnknown[0].Tool != "echo" || out.CallsOutcomeUnknown[0].Session != "s1" {
		t.Fatalf("outcome unknown: %+v", out.CallsOutcomeUnknown)
	}
}

// An appender without AppendAsync (the remote bus appender) gets the
// outcome synchronously: it is durable when Call returns.
func TestSyncAppenderOutcomeDurableOnReturn(t *testing.T) {
	var l *ledger.Ledger
	e := newEnv(t, func(o *Options) {
		l = o.Ledger.(*ledger.Ledger)
		o.Ledger = syncOnly{l}
	})
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 20*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for env, err := range l.Events(ctx, ledger.Query{Kind: events.Kind("call.finished")}) {
		if err != nil {
			t.Fatal(err)
		}
		_ = env
		n++
	}
	if n != 1 {
		t.Fatalf("%d call.finished durable when Call returned, want 1", n)
	}
}

// syncOnly hides AppendAsync: an Appender that only appends durably.
type syncOnly struct{ l *ledger.Ledger }

func (s syncOnly) Append(ctx context.Context, drafts ...events.Draft) ([]events.Seq, error) {
	return s.l.Append(ctx, drafts...)
}
