//go:build linux

package runtime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Policy tests: the lease policy (single-flight, the live-lease cap, idle
// reaping, the call gate and revocation, session end, shared servers,
// recording failures) against in-process fake children (fakechild_test.go)
// and an in-memory ledger. No process and no Node.js: each runs in
// milliseconds, so they can run under -race -count=20. The integration
// tests (runtime_test.go, lease_races_test.go) cover the same paths with real
// guardian-run children.

func echoReq(server, digest string) CallRequest {
	return CallRequest{Server: server, Tool: "echo", Digest: digest, Arguments: map[string]any{"text": "x"}}
}

// N concurrent first calls start exactly one child: the launch is held
// until every other caller is parked on the acquirer's placeholder.
func TestPolicySingleFlight(t *testing.T) {
	p := newPolicyEnv(t, nil)
	probe := p.open("probe")
	echo := p.digest(probe, "fs", "echo")
	const n = 64
	var parked atomic.Int64
	p.m.testHookWaiting = func(string, string) { parked.Add(1) }
	p.w.launchGate = make(chan struct{})
	s := p.open("s1")
	capa := s.Capability()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := capa.Call(context.Background(), echoReq("fs", echo))
			errs <- err
		})
	}
	testproc.Eventually(t, "every other acquirer parked", func() bool { return parked.Load() == n-1 })
	close(p.w.launchGate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := p.w.launches.Load(); got != 2 { // the probe's and s1's
		t.Fatalf("launches = %d, want 2", got)
	}
	evs := p.events()
	s1 := func(x ev) bool { return x.Session == "s1" }
	for kind, want := range map[events.Kind]int{"lease.acquiring": 1, "lease.acquired": 1, "guardian.started": 1, "call.admitted": n, "call.finished": n} {
		if got := count(evs, kind, s1); got != want {
			t.Errorf("%s for s1: %d, want %d", kind, got, want)
		}
	}
	if l := p.m.leaseOf("s1", "fs"); l == nil || l.wire.toolsLists.Load() != 1 {
		t.Fatal("listing not fetched exactly once")
	}
}

// A failed acquisition is shared by its waiters (one launch, one
// lease.acquire_failed); a failure that was only the acquirer's own
// cancellation is not: a waiter with a live context retries and succeeds.
func TestPolicySingleFlightFailure(t *testing.T) {
	p := newPolicyEnv(t, nil)
	s := p.open("s1")
	capa := s.Capability()
	boom := errors.New("no helper")
	p.w.launchErr.Store(&boom)
	var parked atomic.Int64
	p.m.testHookWaiting = func(string, string) { parked.Add(1) }
	p.w.launchGate = make(chan struct{})
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := capa.Tools(context.Background(), "fs")
			errs <- err
		})
	}
	testproc.Eventually(t, "every other acquirer parked", func() bool { return parked.Load() == n-1 })
	close(p.w.launchGate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrSpawn) || !errors.Is(err, boom) {
			t.Fatalf("waiter error %v, want ErrSpawn wrapping the launch error", err)
		}
	}
	if got := p.w.launches.Load(); got != 1 {
		t.Fatalf("launches = %d, want 1", got)
	}
	if got := count(p.events(), "lease.acquire_failed", func(x ev) bool {
		return string(x.Payload.(*events.LeaseAcquireFailed).Reason) == "spawn_failed"
	}); got != 1 {
		t.Fatalf("lease.acquire_failed spawn_failed: %d", got)
	}

	// The acquirer is cancelled while a waiter with a live context waits.
	p.w.launchErr.Store(nil)
	p.w.launchGate = make(chan struct{})
	parked.Store(0)
	acqCtx, cancel := context.WithCancel(context.Background())
	acqDone := make(chan error, 1)
	go func() { _, err := capa.Tools(acqCtx, "fs"); acqDone <- err }()
	testproc.Eventually(t, "the lease acquired", func() bool { return p.m.leaseOf("s1", "fs") != nil })
	waiterDone := make(chan error, 1)
	go func() { _, err := capa.Tools(context.Background(), "fs"); waiterDone <- err }()
	testproc.Eventually(t, "the waiter parked", func() bool { return parked.Load() == 1 })
	cancel()
	if err := <-acqDone; err == nil {
		t.Fatal("cancelled acquirer succeeded")
	}
	close(p.w.launchGate)
	if err := <-waiterDone; err != nil {
		t.Fatalf("waiter inherited the acquirer's cancellation: %v", err)
	}
}

// The cap counts mapped leases and detached ones whose child still lives
// (a revoked lease with a call in flight); a full cap of busy leases is a
// typed error recorded as too_many_leases; idle leases are reaped to make
// room, all of them in one pass.
func TestPolicyLiveLeaseCap(t *testing.T) {
	const capN = 3
	p := newPolicyEnv(t, func(o *Options) { o.MaxLiveLeases = capN; o.IdleMax = time.Minute })
	ctx := context.Background()
	probe := p.open("probe")
	block := p.digest(probe, "fs", "block")
	if err := probe.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range capN {
		s := p.open(sessionName(i))
		wg.Go(func() {
			if _, err := s.Capability().Call(ctx, CallRequest{Server: "fs", Tool: "block", Digest: block}); err != nil {
				t.Error(err)
			}
		})
		<-p.w.blocked
	}
	extra := p.open("extra")
	_, err := extra.Capability().Tools(ctx, "fs")
	var le *LeaseError
	if !errors.Is(err, ErrTooManyLeases) || !errors.As(err, &le) || le.Count != capN || le.Err != ErrTooManyLeases {
		t.Fatalf("over the cap: %#v", err)
	}
	if got := count(p.events(), "lease.acquire_failed", func(x ev) bool {
		return string(x.Payload.(*events.LeaseAcquireFailed).Reason) == "too_many_leases"
	}); got != 1 {
		t.Fatalf("too_many_leases events: %d", got)
	}
	// Revoke one busy lease: it leaves the map but its child lives on
	// until its call returns, so the cap still holds.
	if err := p.m.Revoke(ctx, sessionName(0), "fs", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	if _, err := extra.Capability().Tools(ctx, "fs"); !errors.Is(err, ErrTooManyLeases) {
		t.Fatalf("revoked lease with a call in flight did not count: %v", err)
	}
	close(p.w.unblock)
	wg.Wait()
	// Every lease idle past IdleMax: one acquisition reaps all of them.
	p.clock.Advance(2 * time.Minute)
	if _, err := extra.Capability().Tools(ctx, "fs"); err != nil {
		t.Fatal(err)
	}
	// The acquisition took the idle leases out of the map before it
	// returned; their lease.reaped events are recorded by the terminations,
	// which run in the background when the revoked lease's slot was already
	// free (an opportunistic pass) and before returning when the cap was
	// still reached (the acquisition's own pass): wait for them either way.
	if got := p.m.mapped(); got != 1 {
		t.Fatalf("mapped leases %d, want 1", got)
	}
	testproc.Eventually(t, "the idle leases reaped", func() bool { return count(p.events(), "lease.reaped", nil) >= capN-1 })
	if got := count(p.events(), "lease.reaped", nil); got != capN-1 {
		t.Fatalf("reaped %d, want %d", got, capN-1)
	}
}

// A reap pass scans the whole capped map (so nothing starves behind busy
// entries), spares leases with a call in flight and leases not yet idle,
// records lease.reaped with the idle time, and ends shared leases too.
// Opportunistic passes run at most once per interval.
func TestPolicyReapScanBound(t *testing.T) {
	const capN = 8
	p := newPolicyEnv(t, func(o *Options) { o.MaxLiveLeases = capN; o.IdleMax = time.Minute })
	shared := ServerConfig{Command: "fake", Shared: true}
	p.cfg.Set("shared", shared)
	ctx := context.Background()
	var scopes []*SessionScope
	for i := range capN - 2 {
		s := p.open(sessionName(i))
		scopes = append(scopes, s)
		if _, err := s.Capability().Tools(ctx, "fs"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := scopes[0].Capability().Tools(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	// One busy lease, one recently used lease.
	block := p.digest(scopes[1], "fs", "block")
	done := make(chan error, 1)
	go func() {
		_, err := scopes[1].Capability().Call(ctx, CallRequest{Server: "fs", Tool: "block", Digest: block})
		done <- err
	}()
	<-p.w.blocked
	p.clock.Advance(2 * time.Minute)
	n, err := p.m.ReapIdle(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// capN-2 session leases + 1 shared, minus the busy one.
	if want := capN - 2; n != want {
		t.Fatalf("ReapIdle reaped %d, want %d", n, want)
	}
	if p.m.leaseOf(sessionName(1), "fs") == nil {
		t.Fatal("busy lease reaped")
	}
	if p.m.leaseOf(SharedSessionKey, "shared") != nil {
		t.Fatal("shared lease not reaped")
	}
	for _, x := range p.events() {
		if r, ok := x.Payload.(*events.LeaseReaped); ok && (r.IdleNS < int64(time.Minute) || r.IdleMaxNS != int64(time.Minute)) {
			t.Fatalf("lease.reaped %+v", r)
		}
	}
	close(p.w.unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Opportunistic passes: the first call after the interval reaps (in
	// the background), a second one right after does not scan again.
	var passes atomic.Int64
	p.m.testHookReapScanned = func() { passes.Add(1) }
	p.clock.Advance(2 * time.Minute)
	s := p.open("late")
	if _, err := s.Capability().Tools(ctx, "fs"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Capability().Tools(ctx, "fs"); err != nil {
		t.Fatal(err)
	}
	if got := passes.Load(); got != 1 {
		t.Fatalf("opportunistic passes %d, want 1", got)
	}
	testproc.Eventually(t, "the lease gone", func() bool { return p.m.leaseOf(sessionName(1), "fs") == nil })
}

// A background reap racing Close: Close returns only once the reaped
// lease is terminated. The hooks put Close exactly in the window between
// the pass's scan and the start of its background termination.
func TestPolicyBackgroundReapRacingClose(t *testing.T) {
	p := newPolicyEnv(t, func(o *Options) { o.IdleMax = time.Minute })
	ctx := context.Background()
	s := p.open("s1")
	if _, err := s.Capability().Tools(ctx, "fs"); err != nil {
		t.Fatal(err)
	}
	victim := p.m.leaseOf("s1", "fs")
	p.clock.Advance(2 * time.Minute)
	closing := make(chan struct{})
	closed := make(chan bool, 1)
	var once sync.Once
	p.m.testHookCloseWaiting = func() { once.Do(func() { close(closing) }) }
	p.m.testHookReapScanned = func() {
		go func() {
			_ = p.m.Close(ctx)
			closed <- terminated(victim)
		}()
		<-closing // Close is past its own terminations, about to wait
	}
	p.m.maybeReap(ctx)
	if !<-closed {
		t.Fatal("Close returned before the background-reaped lease was terminated")
	}
}

// Revocation through the gate: a call past the gate completes after Revoke
// returned; no call passes the gate after Revoke; the completing call
// kills the child; the order is admitted < revoked < refused < finished <
// terminated.
func TestPolicyRevokeThroughGate(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	capa := s.Capability()
	block, echo := p.digest(s, "fs", "block"), p.digest(s, "fs", "echo")
	l := p.m.leaseOf("s1", "fs")
	done := make(chan error, 1)
	go func() {
		_, err := capa.Call(ctx, CallRequest{Server: "fs", Tool: "block", Digest: block})
		done <- err
	}()
	<-p.w.blocked
	if err := p.m.Revoke(ctx, "s1", "fs", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Revoke waited for the call past the gate (%v)", err)
	default:
	}
	if _, _, err := l.call(ctx, l.key.session, echoReq("fs", echo), []byte(`{"text":"x"}`)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("call after Revoke: %v", err)
	}
	if terminated(l) {
		t.Fatal("child ended while a call was in flight")
	}
	close(p.w.unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !terminated(l) || !l.cleanup.Confirmed {
		t.Fatal("the last call out did not end the child")
	}
	kinds := strings.Join(p.kinds(l.activation), ",")
	if want := "call.admitted,lease.revoked,call.refused,call.finished,lease.terminated,connection.phase,guardian.reaped,guardian.receipt,"; !strings.Contains(kinds, want) {
		t.Fatalf("order %s\nwant %s", kinds, want)
	}
	for _, x := range p.events() {
		if f, ok := x.Payload.(*events.CallFinished); ok && x.Activation == l.activation && !f.KilledOnCancel {
			t.Fatal("finishing call did not record killed_on_cancel")
		}
	}
	// A new call gets a fresh lease.
	if _, err := capa.Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatal(err)
	}
	if nl := p.m.leaseOf("s1", "fs"); nl == nil || nl == l {
		t.Fatal("no fresh lease after Revoke")
	}
}

// Many calls racing a revocation: every admission of the lease precedes
// lease.revoked, every admitted call finishes, the rest are refused.
func TestPolicyRevokeRace(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	echo := p.digest(s, "fs", "echo")
	l := p.m.leaseOf("s1", "fs")
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			if _, _, err := l.call(ctx, l.key.session, echoReq("fs", echo), []byte(`{"text":"x"}`)); err != nil && !errors.Is(err, ErrRevoked) {
				t.Error(err)
			}
		})
	}
	close(start)
	if err := p.m.Revoke(ctx, "s1", "fs", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	testproc.Eventually(t, "the lease terminated", func() bool { return terminated(l) })
	var revoked events.Seq
	admitted, finished, refused := 0, 0, 0
	for _, x := range p.events() {
		if x.Activation != l.activation {
			continue
		}
		switch x.Kind {
		case "lease.revoked":
			revoked = x.Seq
		case "call.admitted":
			admitted++
			if revoked != 0 {
				t.Fatalf("call.admitted at %d after lease.revoked at %d", x.Seq, revoked)
			}
		case "call.finished":
			finished++
		case "call.refused":
			refused++
		}
	}
	if revoked == 0 || admitted != finished || admitted+refused != n {
		t.Fatalf("revoked=%d admitted=%d finished=%d refused=%d", revoked, admitted, finished, refused)
	}
}

// A second Revoke of a lease being revoked returns only once lease.revoked
// is durable (the append is held until the second Revoke waits).
func TestPolicySecondRevokeWaitsForRecord(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	if _, err := s.Capability().Tools(ctx, "fs"); err != nil {
		t.Fatal(err)
	}
	l := p.m.leaseOf("s1", "fs")
	hold := make(chan struct{})
	p.l.setBefore(func(ds []events.Draft) {
		if hasKind(ds, "lease.revoked") {
			<-hold
		}
	})
	waiting := make(chan struct{})
	p.m.testHookRevokeWaiting = func() { close(waiting) }
	first := make(chan error, 1)
	go func() { first <- l.revoke(ctx, "host_revoked") }()
	testproc.Eventually(t, "the lease revoked", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.state == stateRevoked })
	second := make(chan error, 1)
	go func() { second <- l.revoke(ctx, "host_revoked") }()
	select {
	case err := <-second:
		t.Fatalf("second Revoke returned before lease.revoked was recorded (%v)", err)
	case <-waiting:
	}
	close(hold)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if count(p.events(), "lease.revoked", nil) != 1 {
		t.Fatal("second Revoke returned before lease.revoked was durable")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// Session end by the last owner: a clone keeps the session alive; the last
// release ends the session's leases and spares the shared one, which keeps
// serving other sessions (still validating digests) until TerminateAll.
func TestPolicySessionEndAndShared(t *testing.T) {
	p := newPolicyEnv(t, nil)
	p.cfg.Set("shared", ServerConfig{Command: "fake", Shared: true})
	ctx := context.Background()
	a, err := p.m.OpenSession(ctx, "sa")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.m.OpenSession(ctx, "sa"); !errors.Is(err, ErrSessionOpen) {
		t.Fatalf("second open: %v", err)
	}
	clone, err := a.Clone()
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []string{"fs", "shared"} {
		if _, err := a.Capability().Tools(ctx, srv); err != nil {
			t.Fatal(err)
		}
	}
	own, shared := p.m.leaseOf("sa", "fs"), p.m.leaseOf(SharedSessionKey, "shared")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil { // idempotent per owner
		t.Fatal(err)
	}
	if terminated(own) {
		t.Fatal("session ended while a clone owned it")
	}
	if err := clone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !terminated(own) || p.m.leaseOf("sa", "fs") != nil {
		t.Fatal("last release did not end the session's lease")
	}
	if terminated(shared) || p.m.leaseOf(SharedSessionKey, "shared") != shared {
		t.Fatal("shared lease did not survive session end")
	}
	if _, err := a.Capability().Tools(ctx, "fs"); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("capability after session end: %v", err)
	}
	if count(p.events(), "session.ended", func(x ev) bool {
		e := x.Payload.(*events.SessionEnded)
		return x.Session == "sa" && e.LeasesTerminated == 1 && e.SharedSpared == 1
	}) != 1 {
		t.Fatal("session.ended not recorded as expected")
	}
	b := p.open("sb")
	echo := p.digest(b, "shared", "echo")
	if p.m.leaseOf(SharedSessionKey, "shared") != shared {
		t.Fatal("shared lease not reused")
	}
	if _, err := b.Capability().Call(ctx, echoReq("shared", echo)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Capability().Call(ctx, echoReq("shared", strings.Repeat("a", 64))); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("shared lease skipped digest validation: %v", err)
	}
	if err := p.m.TerminateAll(ctx); err != nil {
		t.Fatal(err)
	}
	if p.m.mapped() != 0 || p.w.live.Load() != 0 {
		t.Fatal("TerminateAll left leases or children")
	}
}

// A name or digest mismatch poisons the lease: the child never receives
// tools/call, the lease is terminated, and the next correct call runs on a
// fresh child.
func TestPolicyPoison(t *testing.T) {
	for _, tc := range []struct {
		tool, digest string
		want         error
	}{
		{"echo", strings.Repeat("0", 64), ErrDigestMismatch},
		{"no-such-tool", "", ErrNameMismatch},
	} {
		t.Run(tc.want.Error(), func(t *testing.T) {
			p := newPolicyEnv(t, nil)
			ctx := context.Background()
			s := p.open("s1")
			echo := p.digest(s, "fs", "echo")
			if tc.digest == "" {
				tc.digest = echo
			}
			l := p.m.leaseOf("s1", "fs")
			_, err := s.Capability().Call(ctx, CallRequest{Server: "fs", Tool: tc.tool, Digest: tc.digest})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if p.w.calls.Load() != 0 || l.wire.toolsCalls.Load() != 0 {
				t.Fatal("tools/call reached the child")
			}
			if !terminated(l) || p.m.leaseOf("s1", "fs") != nil {
				t.Fatal("poisoned lease not terminated")
			}
			if kinds := strings.Join(p.kinds(l.activation), ","); !strings.Contains(kinds, "call.refused,lease.poisoned,lease.terminated,") {
				t.Fatalf("events %s", kinds)
			}
			if _, err := s.Capability().Call(ctx, echoReq("fs", echo)); err != nil {
				t.Fatal(err)
			}
			if p.w.calls.Load() != 1 {
				t.Fatal("call after poison did not reach a fresh child")
			}
		})
	}
}

// A child that exits mid-call ends its lease (transport_error, out of the
// map before call.finished); a config change replaces the lease
// (stale_config) before the next call, and a changed schema behind the old
// authorization poisons the new lease.
func TestPolicyChildExitAndStaleConfig(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	capa := s.Capability()
	crash, echo := p.digest(s, "fs", "crash"), p.digest(s, "fs", "echo")
	first := p.m.leaseOf("s1", "fs")
	var mappedAtFinish atomic.Bool
	p.l.setBefore(func(ds []events.Draft) {
		if hasKind(ds, "call.finished") && p.m.stillMapped(first) {
			mappedAtFinish.Store(true)
		}
	})
	if _, err := capa.Call(ctx, CallRequest{Server: "fs", Tool: "crash", Digest: crash}); !errors.Is(err, ErrCallFailed) {
		t.Fatalf("crash: %v", err)
	}
	if mappedAtFinish.Load() {
		t.Fatal("call.finished of a transport error recorded while the lease was mapped")
	}
	if _, err := capa.Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatal(err)
	}
	cur := p.m.leaseOf("s1", "fs")
	if cur == nil || cur == first {
		t.Fatal("no fresh lease after the child exited")
	}
	p.cfg.Set("fs", ServerConfig{Command: "fake", Env: map[string]string{"V": "2"}})
	if _, err := capa.Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatal(err)
	}
	if nl := p.m.leaseOf("s1", "fs"); nl == nil || nl == cur || !terminated(cur) {
		t.Fatal("config change did not replace the lease")
	}
	for _, x := range p.events() {
		if r, ok := x.Payload.(*events.LeaseTerminated); ok && x.Activation == cur.activation && string(r.Reason) != "stale_config" {
			t.Fatalf("stale lease terminated for %q", r.Reason)
		}
	}
	p.cfg.Set("fs", ServerConfig{Command: "fake-v2"})
	if _, err := capa.Call(ctx, echoReq("fs", echo)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("changed schema: %v", err)
	}
}

// Close ends a revoked lease whose call hangs (it is out of the map): the
// hung call fails, the child is closed.
func TestPolicyCloseEndsRevokedHungCall(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	block := p.digest(s, "fs", "block")
	l := p.m.leaseOf("s1", "fs")
	done := make(chan error, 1)
	go func() {
		_, err := s.Capability().Call(ctx, CallRequest{Server: "fs", Tool: "block", Digest: block})
		done <- err
	}()
	<-p.w.blocked
	if err := p.m.Revoke(ctx, "s1", "fs", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	if err := p.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !terminated(l) || p.w.live.Load() != 0 {
		t.Fatal("Close left the revoked lease's child")
	}
	if err := <-done; !errors.Is(err, ErrCallFailed) {
		t.Fatalf("hung call: %v, want ErrCallFailed", err)
	}
}

// Recording failures surface: Release, TerminateAll, ReapIdle, Revoke and
// Close return what failed to record (matching ErrLedger and the
// appender's own error), failures of work no caller waited for reach the
// next TerminateAll, and the leases are ended anyway.
func TestPolicyAppendFailuresSurface(t *testing.T) {
	p := newPolicyEnv(t, func(o *Options) { o.IdleMax = time.Minute })
	p.cfg.Set("shared", ServerConfig{Command: "fake", Shared: true})
	ctx := context.Background()
	broken := errors.New("disk on fire")
	check := func(what string, err error) {
		t.Helper()
		var le *LeaseError
		if !errors.Is(err, ErrLedger) || !errors.Is(err, broken) || !errors.As(err, &le) || le.Op != "append" {
			t.Fatalf("%s: %v, want ErrLedger wrapping the appender's error", what, err)
		}
	}
	acquire := func(s *SessionScope, server string) *lease {
		t.Helper()
		p.l.fail.Store(nil)
		if _, err := s.Capability().Tools(ctx, server); err != nil {
			t.Fatal(err)
		}
		p.l.fail.Store(&broken)
		key := s.Session()
		if server == "shared" {
			key = SharedSessionKey
		}
		return p.m.leaseOf(key, server)
	}

	a := p.open("sa")
	l := acquire(a, "fs")
	check("Release", a.Release(ctx))
	if !terminated(l) {
		t.Fatal("lease not ended")
	}
	p.l.fail.Store(nil) // the open records session.opened
	b := p.open("sb")
	_ = acquire(b, "fs")
	check("Revoke", p.m.Revoke(ctx, "sb", "fs", "host_revoked"))
	_ = acquire(b, "fs")
	p.clock.Advance(2 * time.Minute)
	n, err := p.m.ReapIdle(ctx, 0)
	if n != 1 {
		t.Fatalf("reaped %d", n)
	}
	check("ReapIdle", err)
	_ = acquire(b, "shared")
	check("TerminateAll", p.m.TerminateAll(ctx))

	// A session end run by a call's deferred release has no caller to
	// tell: the next TerminateAll reports it.
	p.l.fail.Store(nil) // the open records session.opened
	c := p.open("sc")
	block := func() string {
		p.l.fail.Store(nil)
		return p.digest(c, "fs", "block")
	}()
	done := make(chan error, 1)
	go func() {
		_, err := c.Capability().Call(ctx, CallRequest{Server: "fs", Tool: "block", Digest: block})
		done <- err
	}()
	<-p.w.blocked
	if err := c.Release(ctx); err != nil { // the call still owns the session
		t.Fatal(err)
	}
	p.l.fail.Store(&broken)
	close(p.w.unblock)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p.w.live.Load() != 0 {
		t.Fatal("the call's release did not end the session's lease")
	}
	check("TerminateAll after a background failure", p.m.TerminateAll(ctx))
	if err := p.m.TerminateAll(ctx); err != nil {
		t.Fatalf("a failure was reported twice: %v", err)
	}

	p.l.fail.Store(nil)
	d := p.open("sd")
	_ = acquire(d, "fs")
	check("Close", p.m.Close(ctx))
	if p.w.live.Load() != 0 {
		t.Fatal("children live after Close")
	}
}
