//go:build linux

package runtime

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
)

// Regression tests for past defects of the lease manager, with
// real guardian-run children. Each names the behaviour it pins down; the
// policy tests (policy_test.go) cover the same paths with fake children.

// hookAppender runs before (when set) ahead of every append, so a test can
// observe the manager's state at the moment an event is recorded, or delay
// a kind's append.
type hookAppender struct {
	inner  Appender
	before atomic.Pointer[func([]events.Draft)]
}

func (h *hookAppender) Append(ctx context.Context, drafts ...events.Draft) ([]ledger.Seq, error) {
	if f := h.before.Load(); f != nil {
		(*f)(drafts)
	}
	return h.inner.Append(ctx, drafts...)
}

func (h *hookAppender) set(f func([]events.Draft)) { h.before.Store(&f) }

func newHookEnv(t *testing.T, tweak func(*Options)) (*env, *hookAppender) {
	h := &hookAppender{}
	e := newEnv(t, func(o *Options) {
		h.inner = o.Ledger
		o.Ledger = h
		if tweak != nil {
			tweak(o)
		}
	})
	return e, h
}

func hasKind(ds []events.Draft, k events.Kind) bool {
	for _, d := range ds {
		if d.Payload.Kind() == k {
			return true
		}
	}
	return false
}

func terminated(l *lease) bool {
	select {
	case <-l.termDone:
		return true
	default:
		return false
	}
}

// the last owner's release with an already-cancelled context (a
// cancelled Call whose deferred release ends the session) must still
// terminate every lease of the session.
func TestSessionEndWithCancelledContextTerminates(t *testing.T) {
	e := newEnv(t, nil)
	const n = 5
	for i := 0; i < n; i++ {
		e.cfg.Set("ts"+strconv.Itoa(i), testServer(nil))
	}
	ctx := ctxT(t, 60*time.Second)
	scope, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	capa := scope.Capability()
	var ls []*lease
	var slow string
	for i := 0; i < n; i++ {
		tools, err := capa.Tools(ctx, "ts"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		slow = digestOf(t, tools, "slow")
		ls = append(ls, e.m.leaseOf("s1", "ts"+strconv.Itoa(i)))
	}
	// A call holds the session; the host releases its scope; the call is
	// cancelled, and its deferred release is the last owner's.
	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := capa.Call(callCtx, CallRequest{Server: "ts0", Tool: "slow", Digest: slow, Arguments: map[string]any{"ms": 3000}})
		done <- err
	}()
	testproc.Eventually(t, "the call in flight", func() bool { ls[0].mu.Lock(); defer ls[0].mu.Unlock(); return ls[0].inflight == 1 })
	scope.Release(ctx)
	cancel()
	<-done
	for i, l := range ls {
		if !terminated(l) {
			t.Errorf("lease %d not terminated after the last owner's cancelled release", i)
		}
	}
	if kids := childrenOf(os.Getpid()); len(kids) != 0 {
		t.Errorf("children remain after session end: %v", kids)
	}
}

// a revoked lease whose call hangs is out of the map; Close (and
// TerminateAll) must still kill its child, and the hung call then fails.
func TestCloseKillsRevokedLeaseWithHungCall(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 60*time.Second)
	scope, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "ts")
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := capa.Call(callCtx, CallRequest{Server: "ts", Tool: "slow", Digest: digestOf(t, tools, "slow"), Arguments: map[string]any{"ms": 60000}})
		done <- err
	}()
	testproc.Eventually(t, "the call in flight", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.inflight == 1 && l.wire.toolsCalls.Load() == 1 })
	if err := e.m.Revoke(ctx, "s1", "ts", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	e.m.Close(ctx)
	t.Logf("Close took %v", time.Since(t0))
	if !terminated(l) {
		t.Error("Close left the revoked lease with a hung call unterminated")
	}
	if kids := childrenOf(os.Getpid()); len(kids) != 0 {
		t.Errorf("children remain after Close: %v", kids)
	}
	cancel() // unblocks the call before the fix; harmless after
	if err := <-done; !errors.Is(err, ErrCallFailed) {
		t.Errorf("hung call: %v, want ErrCallFailed", err)
	}
	scope.Release(ctx)
}

// a revoked lease with a call in flight still has a live child and
// counts toward MaxLiveLeases.
func TestRevokedLeaseCountsTowardCap(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxLiveLeases = 1 })
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 60*time.Second)
	scope, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer scope.Release(ctx)
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "ts")
	done := make(chan error, 1)
	go func() {
		_, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "slow", Digest: digestOf(t, tools, "slow"), Arguments: map[string]any{"ms": 1500}})
		done <- err
	}()
	testproc.Eventually(t, "the call in flight", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.inflight == 1 && l.wire.toolsCalls.Load() == 1 })
	if err := e.m.Revoke(ctx, "s1", "ts", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	if _, err := capa.Tools(ctx, "ts"); !errors.Is(err, ErrTooManyLeases) {
		t.Errorf("acquisition while a revoked lease still runs its child: %v, want ErrTooManyLeases", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Once the revoked lease's child is gone, the slot is free again.
	if _, err := capa.Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
}

// an opportunistic reap pass racing Close: Close must not return
// before the reaped lease is terminated.
func TestBackgroundReapRacingClose(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.IdleMax = time.Minute })
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 60*time.Second)
	a, err := e.m.OpenSession(ctx, "sa")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	if _, err := a.Capability().Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	victim := e.m.leaseOf("sa", "ts")
	e.clock.Advance(2 * time.Minute)

	closed := make(chan struct{})
	closing := make(chan struct{})
	var once sync.Once
	var victimDoneAtClose atomic.Bool
	e.m.testHookCloseWaiting = func() { once.Do(func() { close(closing) }) }
	e.m.testHookReapScanned = func() {
		e.m.testHookReapScanned = nil
		go func() {
			_ = e.m.Close(ctx)
			victimDoneAtClose.Store(terminated(victim))
			close(closed)
		}()
		// Close runs in the window between the scan and the start of the
		// background termination: it has ended what it found and is about
		// to wait for background work.
		<-closing
	}
	e.m.maybeReap(ctx)
	<-closed
	if !victimDoneAtClose.Load() {
		t.Error("Close returned before the background-reaped lease was terminated")
	}
	testproc.Eventually(t, "the victim terminated", func() bool { return terminated(victim) })
}

// single-flight waiters do not inherit the acquirer's own
// cancellation; a waiter whose context is live retries and succeeds.
func TestWaiterSurvivesAcquirerCancellation(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", ServerConfig{Command: "/bin/sh", Args: []string{"-c", "sleep 1; exec " + testserverBin.Out}})
	ctx := ctxT(t, 60*time.Second)
	a, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	capa := a.Capability()
	parked := make(chan struct{})
	var once sync.Once
	e.m.testHookWaiting = func(string, string) { once.Do(func() { close(parked) }) }
	acqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	acqDone := make(chan error, 1)
	go func() {
		_, err := capa.Tools(acqCtx, "ts")
		acqDone <- err
	}()
	testproc.Eventually(t, "the lease acquired", func() bool { return e.m.leaseOf("s1", "ts") != nil })
	waiterDone := make(chan error, 1)
	go func() {
		_, err := capa.Tools(ctx, "ts")
		waiterDone <- err
	}()
	<-parked // the waiter is parked on the placeholder
	cancel()
	if err := <-acqDone; err == nil {
		t.Log("acquirer finished before its cancellation")
	}
	if err := <-waiterDone; err != nil {
		t.Fatalf("waiter with a live context failed with the acquirer's cancellation: %v", err)
	}
}

// staleOnce returns an old entry on its next lookup (a caller that read
// the config just before it changed), then the current one.
type staleOnce struct {
	*MapConfigSource
	stale atomic.Pointer[ServerConfig]
}

func (s *staleOnce) Lookup(ctx context.Context, server string) (ServerConfig, error) {
	if c := s.stale.Swap(nil); c != nil {
		return *c, nil
	}
	return s.MapConfigSource.Lookup(ctx, server)
}

// a caller holding an old config must not tear down the lease
// pinned to the current config, nor start a child on the stale one.
func TestStaleCallerKeepsCurrentLease(t *testing.T) {
	src := &staleOnce{MapConfigSource: &MapConfigSource{}}
	e := newEnv(t, func(o *Options) { o.Config = src })
	e.cfg = src.MapConfigSource
	v1 := testServer(map[string]string{"V": "1"})
	v2 := testServer(map[string]string{"V": "2"})
	e.cfg.Set("ts", v1)
	ctx := ctxT(t, 60*time.Second)
	a, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	capa := a.Capability()
	if _, err := capa.Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	e.cfg.Set("ts", v2)
	if _, err := capa.Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	cur := e.m.leaseOf("s1", "ts")
	if cur.fingerprint != e.m.fingerprint(v2) {
		t.Fatal("config change did not replace the lease")
	}
	src.stale.Store(&v1)
	if _, err := capa.Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	if got := e.m.leaseOf("s1", "ts"); got != cur {
		t.Errorf("stale caller replaced the current lease (now pinned to v1: %v)", got != nil && got.fingerprint == e.m.fingerprint(v1))
	}
	if terminated(cur) {
		t.Error("current lease terminated by a stale caller")
	}
	if got := count(e.events(), "guardian.started", nil); got != 2 {
		t.Errorf("guardian.started %d, want 2 (v1, v2)", got)
	}
}

// the guardian adapter, checked against the real projector.
func TestGuardianCleanupDraftsProjectorCounts(t *testing.T) {
	const act, pid, hpid = "act-1", 4242, 4241
	now := time.Now().UTC()
	reaped := now.Add(time.Millisecond)
	good := func() *guardian.Receipt {
		return &guardian.Receipt{ActivationID: act, HelperVersion: "1", HelperPID: hpid, TargetPID: pid,
			Reaped: true, ReapedAt: &reaped, ExitCode: 0,
			Stdin: &guardian.PipeFact{ClosedAt: now}, Stdout: &guardian.PipeFact{ClosedAt: now}, Stderr: &guardian.PipeFact{ClosedAt: now},
			Signals: []guardian.SignalFact{{Signal: "TERM", At: now, Alive: true}}}
	}
	base := guardian.CleanupResult{ActivationID: act, HelperPID: hpid, TargetPID: pid, HelperVersion: "1", HelperExitCode: 0}
	for _, tc := range []struct {
		name            string
		mutate          func(*guardian.CleanupResult)
		confirmed, lost uint64
		receipt         bool
	}{
		{"confirmed", func(r *guardian.CleanupResult) { r.Confirmed, r.Receipt = true, good() }, 1, 0, true},
		{"unconfirmed with receipt", func(r *guardian.CleanupResult) { r.Reason, r.Receipt = guardian.ReasonDeadline, good() }, 0, 1, false},
		{"wrong activation", func(r *guardian.CleanupResult) {
			rc := good()
			rc.ActivationID = "act-other"
			r.Reason, r.Receipt = guardian.ReasonReceiptLost, rc
		}, 0, 1, false},
		{"wrong target pid", func(r *guardian.CleanupResult) {
			rc := good()
			rc.TargetPID = 999
			r.Reason, r.Receipt = guardian.ReasonReceiptLost, rc
		}, 0, 1, false},
		{"wrong helper pid, claimed confirmed", func(r *guardian.CleanupResult) {
			rc := good()
			rc.HelperPID = 998
			r.Confirmed, r.Receipt = true, rc
		}, 0, 1, false},
		{"no receipt", func(r *guardian.CleanupResult) { r.Reason = guardian.ReasonHelperLost }, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.mutate(&r)
			l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx := ctxT(t, 10*time.Second)
			drafts := []events.Draft{{Activation: act, Session: "s1", Server: "x", Payload: &events.GuardianStarted{GuardianPID: hpid, TargetPID: pid, HelperVersion: "1"}}}
			drafts = append(drafts, guardianCleanupDrafts(act, "s1", "x", r)...)
			if _, err := l.Append(ctx, drafts...); err != nil {
				t.Fatal(err)
			}
			st := projector.New()
			receipts := 0
			for env, err := range l.Events(ctx, ledger.Query{}) {
				if err != nil {
					t.Fatal(err)
				}
				if env.Kind == "guardian.receipt" {
					receipts++
				}
				if err := st.Apply(&env); err != nil {
					t.Fatal(err)
				}
			}
			a, ok := st.Activation(act)
			if !ok {
				t.Fatal("no activation")
			}
			c := a.Evidence.Counts()
			if c.Resources != 1 || c.Confirmed != tc.confirmed || c.Lost != tc.lost || a.Evidence.Anomalies() != 0 {
				t.Errorf("counts %+v anomalies %d, want 1 resource, confirmed %d, lost %d", c, a.Evidence.Anomalies(), tc.confirmed, tc.lost)
			}
			if (receipts > 0) != tc.receipt {
				t.Errorf("guardian.receipt events: %d, want present=%v", receipts, tc.receipt)
			}
		})
	}
}

// a call refused as cancelled during a revocation is recorded after
// lease.revoked, and a second Revoke returns only once lease.revoked is
// durable.
func TestRevokeOrderingWithSlowLedger(t *testing.T) {
	e, h := newHookEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 60*time.Second)
	a, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	tools, err := a.Capability().Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "ts")
	// lease.revoked's append is held until the second Revoke waits for it.
	hold := make(chan struct{})
	h.set(func(ds []events.Draft) {
		if hasKind(ds, "lease.revoked") {
			<-hold
		}
	})
	waiting := make(chan struct{})
	e.m.testHookRevokeWaiting = func() { close(waiting) }
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := l.revoke(ctx, "host_revoked"); err != nil {
			t.Error(err)
		}
	}()
	testproc.Eventually(t, "the lease revoked", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.state == stateRevoked })
	second := make(chan error, 1)
	go func() { second <- l.revoke(ctx, "host_revoked") }()
	select {
	case <-second:
		t.Fatal("second Revoke returned before lease.revoked was recorded")
	case <-waiting:
	}
	close(hold)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if count(e.events(), "lease.revoked", nil) != 1 {
		t.Error("second Revoke returned before lease.revoked was durable")
	}
	if _, _, err := l.call(ctx, l.key.session, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo")}, []byte(`{"text":"x"}`)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("call after revoke: %v", err)
	}
	wg.Wait()
	var revokedSeq, refusedSeq ledger.Seq
	for _, x := range e.events() {
		switch x.Kind {
		case "lease.revoked":
			revokedSeq = x.Seq
		case "call.refused":
			refusedSeq = x.Seq
		}
	}
	if refusedSeq == 0 || revokedSeq == 0 || refusedSeq < revokedSeq {
		t.Errorf("call.refused at %d before lease.revoked at %d", refusedSeq, revokedSeq)
	}
}

// on a transport error the lease leaves the map before
// call.finished is recorded; on a stale config the lease is out of
// service before lease.stale_replaced is recorded.
func TestRecordedAfterOutOfService(t *testing.T) {
	e, h := newHookEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 60*time.Second)
	a, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	capa := a.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[lease]
	cur.Store(e.m.leaseOf("s1", "ts"))
	var mappedAtFinish, activeAtStale atomic.Bool
	h.set(func(ds []events.Draft) {
		l := cur.Load()
		if hasKind(ds, "call.finished") && e.m.stillMapped(l) {
			mappedAtFinish.Store(true)
		}
		if hasKind(ds, "lease.stale_replaced") {
			for _, d := range ds {
				if d.Activation == l.activation {
					l.mu.Lock()
					activeAtStale.Store(l.state == stateActive)
					l.mu.Unlock()
				}
			}
		}
	})
	if _, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "crash", Digest: digestOf(t, tools, "crash")}); !errors.Is(err, ErrCallFailed) {
		t.Fatalf("crash: %v", err)
	}
	if mappedAtFinish.Load() {
		t.Error("call.finished of a transport error recorded while the lease was still mapped")
	}
	if _, err := capa.Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	cur.Store(e.m.leaseOf("s1", "ts"))
	e.cfg.Set("ts", testServer(map[string]string{"V": "2"}))
	if _, err := capa.Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	if activeAtStale.Load() {
		t.Error("lease.stale_replaced recorded while the stale lease was still active")
	}
}
