//go:build linux

package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
)

// Owned connections: one-shot, host activation ids, CloseConnection under
// one budget, retained reports and status, the dead-tree close, and the
// partial facts of an unconfirmed cleanup in the ledger.

// agree replays envs and checks that the projector's close report of the
// manager report's activation has the same result and obligation statuses.
func agree(t *testing.T, envs []events.Envelope, rep ConnectionReport) {
	t.Helper()
	st := projector.New()
	for i := range envs {
		if err := st.Apply(&envs[i]); err != nil {
			t.Fatal(err)
		}
	}
	pr, ok := st.Report(rep.Activation)
	if !ok || pr.Connection.Report == nil {
		t.Fatalf("projector: no close report for %s", rep.Activation)
	}
	cr := pr.Connection.Report
	if pr.Verdict != rep.Result || cr.Result != rep.Result {
		t.Errorf("verdict: projector %s (report %s) %v, manager %s", pr.Verdict, cr.Result, pr.Reasons, rep.Result)
	}
	if len(cr.Obligations) != len(rep.Obligations) {
		t.Fatalf("obligations: projector %d, manager %d", len(cr.Obligations), len(rep.Obligations))
	}
	for i, o := range cr.Obligations {
		m := rep.Obligations[i]
		if o.Name != m.Name || o.Status != m.Status || o.Last.ElapsedNS != m.ElapsedNS {
			t.Errorf("obligation %d: projector %s %s (%s, %d ns), manager %s %s (%d ns)", i, o.Name, o.Status, o.Reason, o.Last.ElapsedNS, m.Name, m.Status, m.ElapsedNS)
		}
	}
}

// newLossyEnv is a policy env whose post-test audit accepts unconfirmed
// activations (the tests that make them check them themselves): it only
// requires that Close ends every fake child.
func newLossyEnv(t *testing.T, tweak func(*Options)) *policyEnv {
	t.Helper()
	p := &policyEnv{t: t, l: &memLedger{}, w: newFakeWorld(), cfg: &MapConfigSource{}, clock: &fakeClock{}}
	opts := Options{Config: p.cfg, Ledger: p.l, Now: p.clock.Now}
	if tweak != nil {
		tweak(&opts)
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	m.launch = p.w.launch
	p.m = m
	p.cfg.Set("fs", ServerConfig{Command: "fake"})
	t.Cleanup(func() {
		close(p.w.unblock)
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := p.w.live.Load(); n != 0 {
			t.Errorf("%d fake children still live after Close", n)
		}
	})
	return p
}

// One-shot by option and by config: host activation ids are used and
// validated; once the child ended, calls under the activation fail with
// ErrOneShotEnded and nothing is launched; an explicit open starts anew.
func TestConnOneShotPolicy(t *testing.T) {
	p := newPolicyEnv(t, nil)
	s := p.open("s1")
	capa := s.Capability()
	ctx := context.Background()
	for _, bad := range []string{"act/1", "a b", string(make([]byte, 200))} {
		if _, err := capa.OpenConnection(ctx, "fs", ConnectionOptions{Activation: bad}); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("activation %q: %v, want ErrInvalidRequest", bad, err)
		}
	}
	rep, err := capa.OpenConnection(ctx, "fs", ConnectionOptions{Activation: "act-host-1", OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Activation != "act-host-1" || !rep.OneShot || rep.Phase != ConnectionActive {
		t.Fatalf("open: %+v", rep)
	}
	// The id is in use: another key cannot take it; the same key with a
	// different activation is another connection.
	p.cfg.Set("fs2", ServerConfig{Command: "fake"})
	if _, err := capa.OpenConnection(ctx, "fs2", ConnectionOptions{Activation: "act-host-1"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("reused live id: %v, want ErrInvalidRequest", err)
	}
	if _, err := capa.OpenConnection(ctx, "fs", ConnectionOptions{Activation: "act-host-2"}); !errors.Is(err, ErrConnectionOpen) {
		t.Fatalf("second activation on a key: %v, want ErrConnectionOpen", err)
	}
	echo := p.digest(s, "fs", "echo")
	if _, err := capa.Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatal(err)
	}
	// The child exits while idle: no replacement executable.
	launches := p.w.launches.Load()
	p.m.leaseOf("s1", "fs").child.(*fakeChild).exit()
	for range 2 {
		if _, err := capa.Call(ctx, echoReq("fs", echo)); !errors.Is(err, ErrOneShotEnded) {
			t.Fatalf("call after the one-shot child exited: %v, want ErrOneShotEnded", err)
		}
	}
	if _, err := capa.Tools(ctx, "fs"); !errors.Is(err, ErrOneShotEnded) {
		t.Fatalf("Tools after exit: %v", err)
	}
	if got := p.w.launches.Load(); got != launches {
		t.Fatalf("launches %d → %d: a one-shot activation was replaced", launches, got)
	}
	if n := count(p.events(), "lease.child_started", func(x ev) bool { return x.Activation == "act-host-1" }); n != 1 {
		t.Fatalf("lease.child_started for act-host-1: %d", n)
	}
	if n := count(p.events(), "connection.opened", func(x ev) bool {
		return x.Activation == "act-host-1" && x.Payload.(*events.ConnectionOpened).OneShot
	}); n != 1 {
		t.Fatal("connection.opened one_shot not recorded")
	}
	// A retained report's id cannot be reused; an explicit open starts a
	// new activation (minted).
	if _, err := capa.OpenConnection(ctx, "fs", ConnectionOptions{Activation: "act-host-1"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("reused closed id: %v, want ErrInvalidRequest", err)
	}
	rep2, err := capa.OpenConnection(ctx, "fs", ConnectionOptions{})
	if err != nil || rep2.Activation == "act-host-1" || rep2.OneShot {
		t.Fatalf("reopen: %+v %v", rep2, err)
	}

	// One-shot by config, ended by revocation and by stale config.
	p.cfg.Set("one", ServerConfig{Command: "fake", OneShot: true})
	if (ServerConfig{Command: "fake"}).Fingerprint(testFPKey) == (ServerConfig{Command: "fake", OneShot: true}).Fingerprint(testFPKey) {
		t.Fatal("oneShot is not fingerprinted")
	}
	d := p.digest(s, "one", "echo")
	if err := p.m.Revoke(ctx, "s1", "one", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	if _, err := capa.Call(ctx, echoReq("one", d)); !errors.Is(err, ErrOneShotEnded) {
		t.Fatalf("call after revoke: %v, want ErrOneShotEnded", err)
	}
	s2 := p.open("s2")
	d2 := p.digest(s2, "one", "echo")
	p.cfg.Set("one", ServerConfig{Command: "fake", OneShot: true, Args: []string{"v2"}})
	if _, err := s2.Capability().Call(ctx, echoReq("one", d2)); !errors.Is(err, ErrOneShotEnded) {
		t.Fatalf("call after a config change: %v, want ErrOneShotEnded", err)
	}
	if n := count(p.events(), "lease.stale_replaced", nil); n != 0 {
		t.Fatalf("a one-shot lease recorded as replaced %d times", n)
	}
}

// A close returns a confirmed report that the projector rebuilds from the
// events alone; a repeated close returns the identical stored report and
// appends no second cleanup; the status call returns it too.
func TestConnCloseRepeatAndStatus(t *testing.T) {
	p := newPolicyEnv(t, func(o *Options) { o.MaxRetainedReports = 2 })
	s := p.open("s1")
	capa := s.Capability()
	ctx := context.Background()
	if _, err := capa.OpenConnection(ctx, "fs", ConnectionOptions{Activation: "act-c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := capa.Call(ctx, echoReq("fs", p.digest(s, "fs", "echo"))); err != nil {
		t.Fatal(err)
	}
	if st, ok := p.m.ConnectionStatus("act-c1"); !ok || st.Phase != ConnectionActive {
		t.Fatalf("status before close: %+v %v", st, ok)
	}
	rep, err := p.m.CloseConnection(ctx, ConnectionRef{Session: "s1", Server: "fs"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed() || !rep.Retained || !rep.Recorded || rep.BudgetNS != int64(5*time.Second) || len(rep.Obligations) != 4 {
		t.Fatalf("close report: %+v", rep)
	}
	agree(t, p.l.envelopes(), rep)
	cleanups := func() int {
		return len(p.events()) - count(p.events(), "connection.closed", nil)
	}
	before := cleanups()
	again, err := p.m.CloseConnection(ctx, ConnectionRef{Activation: "act-c1"}, time.Second)
	if err != nil || !reflect.DeepEqual(again, rep) {
		t.Fatalf("repeated close: %+v %v, want the stored %+v", again, err, rep)
	}
	if st, ok := p.m.ConnectionStatus("act-c1"); !ok || !reflect.DeepEqual(st, rep) {
		t.Fatalf("status: %+v %v", st, ok)
	}
	if after := cleanups(); after != before {
		t.Fatalf("a repeated close appended %d events besides connection.closed", after-before)
	}
	if n := count(p.events(), "connection.closed", func(x ev) bool { return x.Activation == "act-c1" && x.Payload.(*events.ConnectionClosed).Repeat }); n != 1 {
		t.Fatalf("connection.closed{repeat} = %d", n)
	}
	agree(t, p.l.envelopes(), rep) // the projector keeps the first outcome
	if _, err := p.m.CloseConnection(ctx, ConnectionRef{Session: "s1", Server: "fs"}, 0); !errors.Is(err, ErrNoConnection) {
		t.Fatalf("close by key after close: %v, want ErrNoConnection", err)
	}
	// The retention bound: the oldest report is evicted and counted.
	for _, srv := range []string{"a1", "a2"} {
		p.cfg.Set(srv, ServerConfig{Command: "fake"})
		if _, err := capa.Tools(ctx, srv); err != nil {
			t.Fatal(err)
		}
		if _, err := p.m.CloseConnection(ctx, ConnectionRef{Session: "s1", Server: srv}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := p.m.ConnectionStatus("act-c1"); ok || p.m.EvictedReports() != 1 {
		t.Fatalf("retention: act-c1 still retained or evicted=%d", p.m.EvictedReports())
	}
}

// A close against an activation the manager holds nothing for (its tree
// already gone) is unconfirmed, recorded, and agreed on by the projector.
func TestConnCloseDeadTreeUnconfirmed(t *testing.T) {
	p := newLossyEnv(t, nil)
	ctx := context.Background()
	rep, err := p.m.CloseConnection(ctx, ConnectionRef{Session: "s1", Activation: "act-gone"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Confirmed() || rep.Result != ResultUnconfirmed || rep.Retained || rep.Phase != ConnectionClosed {
		t.Fatalf("dead-tree close: %+v", rep)
	}
	for _, o := range rep.Obligations {
		if o.Status != ObligationMissing {
			t.Fatalf("obligation %s: %s", o.Name, o.Status)
		}
	}
	agree(t, p.l.envelopes(), rep)
	again, err := p.m.CloseConnection(ctx, ConnectionRef{Activation: "act-gone"}, 0)
	if err != nil || !reflect.DeepEqual(again, rep) {
		t.Fatalf("repeat: %+v %v", again, err)
	}
}

// lossyChild reports a correlated receipt that does not confirm: the
// helper exited 1 after reporting pipe closes, a TERM and two descendants.
type lossyChild struct{ *fakeChild }

func (c lossyChild) close(ctx context.Context) guardian.CleanupResult {
	r := c.fakeChild.close(ctx)
	rc := *r.Receipt
	rc.DescendantsSeen, rc.DescendantsKilled = []int{424242, 424243}, []int{424242}
	rc.Signals = []guardian.SignalFact{{Signal: "TERM", At: rc.Stdin.ClosedAt, Alive: true}}
	rc.Stderr = nil
	r.Receipt, r.Confirmed, r.Reason, r.HelperExitCode = &rc, false, guardian.ReasonHelperLost, 1
	return r
}

// Every fact of an unconfirmed cleanup reaches the ledger: guardian.signal,
// guardian.reaped and guardian.lost with the receipt's pipe closes and
// descendants; the activation stays unconfirmed for manager and projector.
func TestConnUnconfirmedCleanupPartialFacts(t *testing.T) {
	p := newLossyEnv(t, nil)
	launch := p.w.launch
	p.m.launch = func(ctx context.Context, spec guardian.Spec) (child, error) {
		c, err := launch(ctx, spec)
		if err != nil {
			return nil, err
		}
		return lossyChild{c.(*fakeChild)}, nil
	}
	s := p.open("s1")
	ctx := context.Background()
	open, err := s.Capability().OpenConnection(ctx, "fs", ConnectionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := p.m.CloseConnection(ctx, ConnectionRef{Activation: open.Activation}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Confirmed() || rep.Obligations[2].Status != ObligationFailed || rep.Lost != events.LostHelper {
		t.Fatalf("report: %+v", rep)
	}
	agree(t, p.l.envelopes(), rep)
	var lost *events.GuardianLost
	signals, reaped := 0, 0
	for _, x := range p.events() {
		switch pl := x.Payload.(type) {
		case *events.GuardianLost:
			lost = pl
		case *events.GuardianSignal:
			signals++
		case *events.GuardianReaped:
			reaped++
		case *events.GuardianReceipt:
			t.Fatal("guardian.receipt for an unconfirmed cleanup")
		}
	}
	if lost == nil || !lost.Receipt || lost.StdinClosedAt == nil || lost.StdoutClosedAt == nil || lost.StderrClosedAt != nil ||
		len(lost.DescendantsSeen) != 2 || len(lost.DescendantsKilled) != 1 || signals != 1 || reaped != 1 {
		t.Fatalf("partial facts: lost %+v, %d signals, %d reaped", lost, signals, reaped)
	}
	st := projector.New()
	for _, e := range p.l.envelopes() {
		if err := st.Apply(&e); err != nil {
			t.Fatal(err)
		}
	}
	pr, _ := st.Report(open.Activation)
	if pr.Verdict != projector.ResultUnconfirmed || len(pr.Resources) != 1 || pr.Resources[0].Facts.DescendantsSeen != 2 {
		t.Fatalf("projector: %s %+v", pr.Verdict, pr.Resources)
	}
}

// slowStream delays its Close: a transport whose close report is slow.
type slowStream struct {
	io.ReadWriteCloser
	delay time.Duration
	once  atomic.Bool
}

func (s *slowStream) Close() error {
	if s.once.CompareAndSwap(false, true) {
		time.Sleep(s.delay)
	}
	return s.ReadWriteCloser.Close()
}

// slowChild is a real guardian child whose stream closes slowly and which
// measures the budget its supervisor step is given.
type slowChild struct {
	child
	s     *slowStream
	given *atomic.Int64 // ns left on the supervisor's context at entry
}

func (c slowChild) stream() io.ReadWriteCloser { return c.s }
func (c slowChild) close(ctx context.Context) guardian.CleanupResult {
	if d, ok := ctx.Deadline(); ok {
		c.given.Store(int64(time.Until(d)))
	}
	return c.child.close(ctx)
}

// A close whose transport step eats part of the budget leaves the guardian
// only the rest: measured from the recorded barriers and the deadline the
// guardian's context carried, against a real server under the guardian.
func TestConnCloseBudgetSplit(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	const delay = 1500 * time.Millisecond
	var given atomic.Int64
	e.m.launch = func(ctx context.Context, spec guardian.Spec) (child, error) {
		c, err := launchGuardian(ctx, spec)
		if err != nil {
			return nil, err
		}
		return slowChild{child: c, s: &slowStream{ReadWriteCloser: c.stream(), delay: delay}, given: &given}, nil
	}
	s, err := e.m.OpenSession(ctxT(t, 30*time.Second), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(context.Background())
	ctx := ctxT(t, 30*time.Second)
	open, err := s.Capability().OpenConnection(ctx, "ts", ConnectionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 4 * time.Second
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Activation: open.Activation}, budget)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed() {
		t.Fatalf("close: %+v", rep)
	}
	var phase, sum int64
	bar := map[events.Obligation]int64{}
	for _, x := range e.events() {
		if x.Activation != open.Activation {
			continue
		}
		switch pl := x.Payload.(type) {
		case *events.ConnectionPhase:
			phase = pl.BudgetNS
		case *events.ConnectionBarrier:
			bar[pl.Obligation] = pl.ElapsedNS
			sum += pl.ElapsedNS
		}
	}
	tr, sup := bar[events.ObligationTransport], bar[events.ObligationSupervisor]
	t.Logf("budget %v: transport %v, workers %v, supervisor %v (given %v), sum %v",
		time.Duration(phase), time.Duration(tr), time.Duration(bar[events.ObligationWorkers]), time.Duration(sup),
		time.Duration(given.Load()), time.Duration(sum))
	switch {
	case phase != int64(budget):
		t.Fatalf("recorded budget %v, want %v", time.Duration(phase), budget)
	case tr < int64(delay):
		t.Fatalf("transport step %v shorter than the delayed close %v", time.Duration(tr), delay)
	case given.Load() <= 0 || tr+given.Load() > int64(budget):
		t.Fatalf("guardian given %v after transport %v: more than the rest of %v", time.Duration(given.Load()), time.Duration(tr), budget)
	case sum > int64(budget):
		t.Fatalf("steps took %v, more than the budget %v", time.Duration(sum), budget)
	}
	agree(t, e.envelopes(), rep)
}

// One-shot against a real server: the idle child is killed from outside;
// later calls fail with ErrOneShotEnded and no second child starts.
func TestConnOneShotRealKill(t *testing.T) {
	e := newEnv(t, nil)
	cfg := testServer(nil)
	cfg.OneShot = true
	e.cfg.Set("ts", cfg)
	s, err := e.m.OpenSession(ctxT(t, 30*time.Second), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(context.Background())
	ctx := ctxT(t, 30*time.Second)
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	req := CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "a"}}
	if _, err := capa.Call(ctx, req); err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "ts")
	act, pid := l.activation, l.child.facts().TargetPID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-l.child.done()
	for range 3 {
		if _, err := capa.Call(ctx, req); !errors.Is(err, ErrOneShotEnded) {
			t.Fatalf("call after the kill: %v, want ErrOneShotEnded", err)
		}
	}
	evs := e.events()
	if n := count(evs, "lease.child_started", nil); n != 1 {
		t.Fatalf("lease.child_started: %d, want 1 (no replacement)", n)
	}
	if n := count(evs, "connection.opened", func(x ev) bool { return x.Activation == act && x.Payload.(*events.ConnectionOpened).OneShot }); n != 1 {
		t.Fatal("connection.opened{one_shot} missing")
	}
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Session: "s1", Server: "ts"}, 0)
	if err != nil || rep.Activation != act || rep.Reason != "child_exited" {
		t.Fatalf("close of the ended one-shot: %+v %v", rep, err)
	}
	agree(t, e.envelopes(), rep)
}

// envelopes reads the env's ledger.
func (e *env) envelopes() []events.Envelope {
	e.t.Helper()
	e.m.awaitFacts(nil) // call outcomes queued so far are durable
	var out []events.Envelope
	for env, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

// A close whose caller's deadline has already passed gets the smallest
// budget, never the default: the one budget never outlives ctx. Every step
// then reports past the deadline, and each records timeout: a step's report
// and the deadline are both ready, and the outcome must not depend on which
// one a select picks (eight closes: any wait that picks the report fails
// the test).
func TestConnCloseExpiredDeadline(t *testing.T) {
	p := newLossyEnv(t, nil) // no post-test audit: this close cannot confirm
	closeExpired(t, p, "fs", 8, events.ObligationHTTPRequests)
}

// closeExpired opens n connections to server in a session of p and closes
// each with its caller's deadline already passed: each gets at most 1 ms
// of budget, is unconfirmed, and records timeout for every obligation but
// unawaited (the one whose outcome is not awaited by the close); the
// projector agrees with every report.
func closeExpired(t *testing.T, p *policyEnv, server string, n int, unawaited events.Obligation) {
	t.Helper()
	s := p.open("s1")
	ctx := ctxT(t, 60*time.Second)
	var reps []ConnectionReport
	for i := range n {
		act := fmt.Sprintf("act-x%d", i)
		if _, err := s.Capability().OpenConnection(ctx, server, ConnectionOptions{Activation: act}); err != nil {
			t.Fatal(err)
		}
		expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		rep, _ := p.m.CloseConnection(expired, ConnectionRef{Activation: act}, 5*time.Second)
		cancel()
		if rep.BudgetNS <= 0 || rep.BudgetNS > int64(time.Millisecond) {
			t.Fatalf("%s: budget %v with an expired deadline, want at most 1ms: %+v", act, time.Duration(rep.BudgetNS), rep)
		}
		if rep.Confirmed() {
			t.Fatalf("%s: a close with no budget left confirmed: %+v", act, rep)
		}
		for _, o := range rep.Obligations {
			if o.Name != unawaited && o.Outcome != events.BarrierTimeout {
				t.Fatalf("%s: obligation %s %s (%s) past the deadline, want timeout: %+v", act, o.Name, o.Outcome, o.Detail, rep)
			}
		}
		reps = append(reps, rep)
	}
	envs := p.l.envelopes()
	for _, rep := range reps {
		agree(t, envs, rep)
	}
}
