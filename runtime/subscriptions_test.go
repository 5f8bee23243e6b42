//go:build linux

package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// subLines reads the test server's record of resources/subscribe and
// resources/unsubscribe.
func subLines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func subEnded(evs []ev, session string) []*events.SubscriptionEnded {
	var out []*events.SubscriptionEnded
	for _, x := range evs {
		if p, ok := x.Payload.(*events.SubscriptionEnded); ok && x.Session == session {
			out = append(out, p)
		}
	}
	return out
}

func seqOf(evs []ev, kind events.Kind, pred func(ev) bool) events.Seq {
	for _, x := range evs {
		if x.Kind == kind && (pred == nil || pred(x)) {
			return events.Seq(x.Seq)
		}
	}
	return 0
}

// On the session's own lease: a subscribe round-trips and the session
// holds it (once, however often it subscribes), an unsubscribe ends it,
// the session bound is a typed error recorded nowhere, and the session's
// end ends what it still holds before session.ended, without telling a
// server whose lease ends with it.
func TestSubscriptionOwnLease(t *testing.T) {
	e := newEnv(t, nil)
	subs := filepath.Join(t.TempDir(), "subs")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_SUBS": subs}))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	capa := s.Capability()
	o, err := capa.NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultRequestOptions()
	sub := func(uri string) *ResourceHandle {
		t.Helper()
		h, err := capa.Subscribe(ctx, o, "ts", uri, opts)
		if err != nil {
			t.Fatal(err)
		}
		if r := await(t, h); !r.Subscribed {
			t.Fatalf("subscribe result %+v", r)
		}
		return h
	}
	first := sub("test://a")
	sub("test://a") // sent again, held once
	l := e.m.leaseOf("s1", "ts")
	if got := e.m.subscribers(l, "test://a"); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("subscribers %v", got)
	}
	if got := subLines(subs); !slices.Equal(got, []string{"sub_test://a", "sub_test://a"}) {
		t.Fatalf("server saw %v", got)
	}
	evs := e.events()
	if n := count(evs, "subscription.started", nil); n != 1 {
		t.Fatalf("%d subscription.started", n)
	}
	var sp *events.SubscriptionStarted
	var started events.Seq
	for _, x := range evs {
		if p, ok := x.Payload.(*events.SubscriptionStarted); ok {
			sp, started = p, events.Seq(x.Seq)
		}
	}
	done := seqOf(evs, "request.completed", func(x ev) bool { return x.Payload.(*events.RequestCompleted).Handle == first.ID() })
	if sp.Handle != first.ID() || sp.URISHA256 != sha256Hex("test://a") || started < done {
		t.Fatalf("subscription.started %+v at %d (completed at %d)", sp, started, done)
	}

	h, err := capa.Unsubscribe(ctx, o, "ts", "test://a", opts)
	if err != nil {
		t.Fatal(err)
	}
	if r := await(t, h); !r.Unsubscribed {
		t.Fatalf("unsubscribe result %+v", r)
	}
	if got := e.m.subscribers(l, "test://a"); got != nil {
		t.Fatalf("subscribers after unsubscribe %v", got)
	}
	if got := subEnded(e.events(), "s1"); len(got) != 1 || got[0].Reason != events.SubscriptionUnsubscribed || got[0].Handle != h.ID() {
		t.Fatalf("subscription.ended %+v", got)
	}

	// The bound: held and in-flight subscribes count; a held uri does not.
	sub("test://b")
	regs := count(e.events(), "request.registered", nil)
	e.m.subs.mu.Lock()
	e.m.subs.pending["s1"] = MaxSubscriptionsPerSession - 1
	e.m.subs.mu.Unlock()
	if _, err := capa.Subscribe(ctx, o, "ts", "test://c", opts); !errors.Is(err, ErrTooManySubscriptions) {
		t.Fatalf("beyond the bound: %v", err)
	}
	if n := count(e.events(), "request.registered", nil); n != regs {
		t.Fatal("a refused subscribe was registered")
	}
	sub("test://b") // already held: no new slot
	e.m.subs.mu.Lock()
	delete(e.m.subs.pending, "s1")
	e.m.subs.mu.Unlock()

	if _, err := o.End(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	evs = e.events()
	got := subEnded(evs, "s1")
	if len(got) != 2 || got[1].Reason != events.SubscriptionSessionEnded || got[1].URISHA256 != sha256Hex("test://b") || got[1].Unsubscribe != "" {
		t.Fatalf("subscription.ended %+v", got)
	}
	ended := seqOf(evs, "subscription.ended", func(x ev) bool {
		return x.Payload.(*events.SubscriptionEnded).Reason == events.SubscriptionSessionEnded
	})
	if sess := seqOf(evs, "session.ended", nil); ended == 0 || ended > sess {
		t.Fatalf("subscription.ended at %d, session.ended at %d", ended, sess)
	}
	if slices.Contains(subLines(subs), "unsub_test://b") {
		t.Fatal("the session's own lease was sent an unsubscribe at its end")
	}
	if got := e.m.subscribers(l, "test://b"); got != nil {
		t.Fatalf("subscribers after the session %v", got)
	}
}

// On a shared lease: sessions holding the same uri share the server's one
// subscription — an unsubscribe while another session holds it sends
// nothing, a session's end unsubscribes only what nobody else holds (and
// records the outcome), the last holder's unsubscribe reaches the server;
// the lease's end ends what remains.
func TestSubscriptionSharedLease(t *testing.T) {
	e := newEnv(t, nil)
	subs := filepath.Join(t.TempDir(), "subs")
	cfg := testServer(map[string]string{"TESTSERVER_SUBS": subs})
	cfg.Shared = true
	e.cfg.Set("sh", cfg)
	ctx := ctxT(t, 60*time.Second)
	open := func(id string) (*SessionScope, LeaseCapability, *Owner) {
		s, err := e.m.OpenSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Release(context.Background()) })
		o, err := s.Capability().NewOwner(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Capability(), o
	}
	sa, ca, oa := open("sa")
	_, cb, ob := open("sb")
	opts := DefaultRequestOptions()
	do := func(h *ResourceHandle, err error) *ResourceHandle {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		await(t, h)
		return h
	}
	do(ca.Subscribe(ctx, oa, "sh", "test://a", opts))
	do(cb.Subscribe(ctx, ob, "sh", "test://a", opts))
	do(ca.Subscribe(ctx, oa, "sh", "test://b", opts))
	l := e.m.leaseOf(SharedSessionKey, "sh")
	if got := e.m.subscribers(l, "test://a"); !slices.Equal(got, []string{"sa", "sb"}) {
		t.Fatalf("subscribers of a %v", got)
	}
	h := do(cb.Unsubscribe(ctx, ob, "sh", "test://a", opts))
	if len(h.WireIDs()) != 0 || slices.Contains(subLines(subs), "unsub_test://a") {
		t.Fatalf("an unsubscribe while another session holds the uri reached the server (wire %v)", h.WireIDs())
	}
	if got := e.m.subscribers(l, "test://a"); !slices.Equal(got, []string{"sa"}) {
		t.Fatalf("subscribers of a %v", got)
	}
	do(cb.Subscribe(ctx, ob, "sh", "test://a", opts))

	// sa ends: a is still sb's (nothing sent), b was only sa's.
	if _, err := oa.End(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sa.Release(ctx); err != nil {
		t.Fatal(err)
	}
	evs := e.events()
	byURI := map[string]*events.SubscriptionEnded{}
	for _, p := range subEnded(evs, "sa") {
		byURI[p.URISHA256] = p
	}
	if a, b := byURI[sha256Hex("test://a")], byURI[sha256Hex("test://b")]; len(byURI) != 2 ||
		a.Reason != events.SubscriptionSessionEnded || a.Unsubscribe != "" ||
		b.Reason != events.SubscriptionSessionEnded || b.Unsubscribe != events.RequestOK {
		t.Fatalf("sa's subscriptions ended %+v", byURI)
	}
	if got := subLines(subs); !slices.Contains(got, "unsub_test://b") || slices.Contains(got, "unsub_test://a") {
		t.Fatalf("server saw %v", got)
	}
	if got := e.m.subscribers(l, "test://a"); !slices.Equal(got, []string{"sb"}) {
		t.Fatalf("subscribers of a after sa %v", got)
	}
	if e.m.leaseOf(SharedSessionKey, "sh") != l {
		t.Fatal("the shared lease did not survive the session")
	}

	// sb, the last holder of a: its unsubscribe reaches the server.
	do(cb.Unsubscribe(ctx, ob, "sh", "test://a", opts))
	if !slices.Contains(subLines(subs), "unsub_test://a") {
		t.Fatal("the last holder's unsubscribe did not reach the server")
	}
	// The lease ends under a subscription.
	do(cb.Subscribe(ctx, ob, "sh", "test://c", opts))
	if err := e.m.RevokeShared(ctx, "sh", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	// The subscribe's worker may still hold the lease's gate after Await
	// returned (it releases after completing the handle): the revocation
	// then leaves the termination to that release. Wait for it.
	testproc.Eventually(t, "the revoked shared lease terminated", func() bool {
		return count(e.events(), "lease.terminated", func(x ev) bool { return x.Activation == l.activation }) == 1
	})
	evs = e.events()
	var last *events.SubscriptionEnded
	for _, p := range subEnded(evs, "sb") {
		last = p
	}
	if last == nil || last.Reason != events.SubscriptionLeaseEnded || last.URISHA256 != sha256Hex("test://c") {
		t.Fatalf("sb's last subscription.ended %+v", last)
	}
	endSeq := seqOf(evs, "subscription.ended", func(x ev) bool {
		return x.Payload.(*events.SubscriptionEnded).Reason == events.SubscriptionLeaseEnded
	})
	if term := seqOf(evs, "lease.terminated", func(x ev) bool { return x.Activation == l.activation }); endSeq == 0 || endSeq > term {
		t.Fatalf("subscription.ended at %d, lease.terminated at %d", endSeq, term)
	}
	if got := e.m.subscribers(l, "test://c"); got != nil {
		t.Fatalf("subscribers after the lease ended %v", got)
	}
	if n, m := count(evs, "subscription.started", nil), count(evs, "subscription.ended", nil); n != m {
		t.Fatalf("%d started, %d ended", n, m)
	}
}

// request.registered of a subscribe is durable before anything is
// written to the server, and a registration that fails sends nothing and
// gives the session's slot back.
func TestSubscribeRegisteredBeforeDispatch(t *testing.T) {
	p := newPolicyEnv(t, func(o *Options) {
		o.HelperPath = helperBin.Out
		o.EOFGrace, o.TermGrace, o.KillGrace, o.PipeGrace = time.Second, 500*time.Millisecond, time.Second, 200*time.Millisecond
	})
	p.m.launch = launchGuardian
	p.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	capa := p.open("s1").Capability()
	o, err := capa.NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := capa.Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	l := p.m.leaseOf("s1", "ts")
	sent0 := l.wire.sent.Load()
	var atReg atomic.Int64
	atReg.Store(-1)
	p.l.setBefore(func(ds []events.Draft) {
		for _, d := range ds {
			if r, ok := d.Payload.(*events.RequestRegistered); ok && r.Method == events.MethodSubscribe {
				atReg.Store(l.wire.sent.Load())
			}
		}
	})
	h, err := capa.Subscribe(ctx, o, "ts", "test://a", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	await(t, h)
	if got := atReg.Load(); got != sent0 || l.wire.sent.Load() <= sent0 {
		t.Fatalf("messages sent: %d before, %d at the registration, %d after", sent0, got, l.wire.sent.Load())
	}
	var order []events.Kind
	for _, x := range p.events() {
		switch x.Kind {
		case "request.registered", "request.dispatched", "request.completed", "subscription.started":
			order = append(order, x.Kind)
		}
	}
	if want := []events.Kind{"request.registered", "request.dispatched", "request.completed", "subscription.started"}; !slices.Equal(order, want) {
		t.Fatalf("events %v", order)
	}

	p.l.setBefore(func([]events.Draft) {})
	fail := errors.New("append refused")
	p.l.fail.Store(&fail)
	sent1 := l.wire.sent.Load()
	if _, err := capa.Subscribe(ctx, o, "ts", "test://b", DefaultRequestOptions()); !errors.Is(err, ErrLedger) {
		t.Fatalf("failed registration: %v", err)
	}
	p.l.fail.Store(nil)
	if l.wire.sent.Load() != sent1 {
		t.Fatal("a subscribe whose registration failed was sent")
	}
	p.m.subs.mu.Lock()
	pending := p.m.subs.pending["s1"]
	p.m.subs.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d slots still reserved", pending)
	}
}
