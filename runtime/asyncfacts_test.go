//go:build linux

package runtime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// asyncLedger is the test's real ledger with the waits of its async
// appends that carry a call.finished observed (queued reports them): held
// until release is closed, or lost (the host stopped before the outcome
// became durable: the outcomes are not written, the rest is, and the wait
// fails).
type asyncLedger struct {
	*ledger.Ledger
	release chan struct{}
	lose    bool
	queued  chan int // the call.finished events of each such append
}

var errHostLost = errors.New("test: host lost before the append was durable")

func (a *asyncLedger) AppendPreparedAsync(ctx context.Context, prepared ...events.Prepared) (func(context.Context) ([]events.Seq, error), error) {
	var kept []events.Prepared
	for _, p := range prepared {
		if p.Kind != "call.finished" {
			kept = append(kept, p)
		}
	}
	finished := len(prepared) - len(kept)
	if finished == 0 {
		return a.Ledger.AppendPreparedAsync(ctx, prepared...)
	}
	select {
	case a.queued <- finished:
	default:
	}
	if a.lose {
		wait, err := a.Ledger.AppendPreparedAsync(ctx, kept...)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) ([]events.Seq, error) {
			if _, err := wait(ctx); err != nil {
				return nil, err
			}
			return nil, errHostLost
		}, nil
	}
	wait, err := a.Ledger.AppendPreparedAsync(ctx, prepared...)
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
		al = &asyncLedger{Ledger: o.Ledger.(*ledger.Ledger), release: make(chan struct{}), lose: lose, queued: make(chan int, 16)}
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
	case n := <-al.queued:
		if n != 1 {
			t.Fatalf("%d call.finished appended, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call.finished was not appended without waiting (within outcomeLinger)")
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
		t.Fatal("call.finished was not appended without waiting (within outcomeLinger)")
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

// recordingLedger is the test's real ledger recording the kinds of each
// append, in the order they were queued.
type recordingLedger struct {
	*ledger.Ledger
	mu      sync.Mutex
	appends [][]string
}

func (r *recordingLedger) AppendPreparedAsync(ctx context.Context, prepared ...events.Prepared) (func(context.Context) ([]events.Seq, error), error) {
	kinds := make([]string, len(prepared))
	for i, p := range prepared {
		kinds[i] = string(p.Kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.appends = append(r.appends, kinds)
	return r.Ledger.AppendPreparedAsync(ctx, prepared...)
}

// A sequential caller's next call.admitted carries the previous call's
// call.finished in front of it, in the same atomic append: one fsync per
// call instead of two.
func TestNextAdmissionCarriesOutcome(t *testing.T) {
	var rl *recordingLedger
	e := newEnv(t, func(o *Options) {
		rl = &recordingLedger{Ledger: o.Ledger.(*ledger.Ledger)}
		o.Ledger = rl
	})
	e.m.deferred.linger = time.Hour // only a later append carries it
	e.cfg.Set("ts", testServer(nil))
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
	req := CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}
	for range 3 {
		if _, err := capa.Call(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rl.mu.Lock()
	var got []string
	for _, a := range rl.appends {
		if slices.Contains(a, "call.admitted") || slices.Contains(a, "call.finished") {
			got = append(got, strings.Join(a, "+"))
		}
	}
	rl.mu.Unlock()
	want := "call.admitted call.finished+call.admitted call.finished+call.admitted call.finished"
	if strings.Join(got, " ") != want {
		t.Fatalf("appends %q, want %q", got, want)
	}
	// The log holds every outcome, each after its admission.
	var order []string
	for _, x := range e.events() {
		if x.Kind == "call.admitted" || x.Kind == "call.finished" {
			order = append(order, string(x.Kind))
		}
	}
	if strings.Join(order, " ") != "call.admitted call.finished call.admitted call.finished call.admitted call.finished" {
		t.Fatalf("log order %v", order)
	}
}
