//go:build linux

package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// openPeer opens session id with peer as its client, released and its
// owner ended at the test's end.
func openPeer(t *testing.T, e *env, ctx context.Context, id string, peer *testPeer) (LeaseCapability, *Owner) {
	t.Helper()
	s, err := e.m.OpenSessionWith(ctx, id, SessionOptions{Client: peer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Release(context.Background()) })
	o, err := s.Capability().NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = o.End(context.Background()) })
	return s.Capability(), o
}

// callTool calls tool on server for capa's session under ctx (against the
// listing the session is shown now) and returns the result's text, or
// fails the test.
func callTool(t *testing.T, ctx context.Context, capa LeaseCapability, server, tool string, args any) string {
	t.Helper()
	tools, err := capa.Tools(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	res, err := capa.Call(ctx, CallRequest{Server: server, Tool: tool, Digest: digestOf(t, tools, tool), Arguments: args})
	return textOf(t, res, err)
}

// updated returns the NotifyResourceUpdated the peer got for uri.
func (p *testPeer) updated(uri string) []PeerNotification {
	var out []PeerNotification
	for _, n := range p.notified(NotifyResourceUpdated) {
		if n.ResourceUpdated != nil && n.ResourceUpdated.URI == uri {
			out = append(out, n)
		}
	}
	return out
}

func (p *testPeer) setHold(f func(context.Context)) {
	p.mu.Lock()
	p.hold = f
	p.mu.Unlock()
}

func (p *testPeer) requestCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.requests)
}

// TestRelayResourceUpdated: notifications/resources/updated reaches only
// the sessions holding a subscription to its uri on the lease — not a
// session that does not (on a shared lease, not even the one whose call
// made the server send it), not one that unsubscribed (also when the
// server goes on sending it for another session of a shared lease) — over
// stdio and Streamable HTTP, on sessions' own leases and a shared one.
// Every absence is proven by a later delivery on the same connection.
func TestRelayResourceUpdated(t *testing.T) {
	for _, tc := range []struct {
		name         string
		http, shared bool
	}{{"stdio", false, false}, {"stdio-shared", false, true}, {"http", true, false}, {"http-shared", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testServer(peerEnv)
			if tc.http {
				cfg = ServerConfig{URL: peerHTTP(t)}
			}
			cfg.Shared = tc.shared
			resourceUpdatedSuite(t, cfg, tc.shared, !tc.http)
		})
	}
}

// resourceUpdatedSuite: see TestRelayResourceUpdated. ordered: a
// notification the server sends during a call precedes its answer on the
// wire (stdio), so it reached the peer when the call returned
// (noteBarrier); over HTTP it travels on the standalone stream and is
// awaited.
func resourceUpdatedSuite(t *testing.T, cfg ServerConfig, shared, ordered bool) {
	e := newEnv(t, nil)
	e.cfg.Set("p", cfg)
	ctx := ctxT(t, 90*time.Second)
	pa, pb := &testPeer{caps: fullCaps()}, &testPeer{caps: fullCaps()}
	ca, oa := openPeer(t, e, ctx, "sa", pa)
	cb, ob := openPeer(t, e, ctx, "sb", pb)
	opts := DefaultRequestOptions()
	sub := func(c LeaseCapability, o *Owner, uri string) {
		t.Helper()
		h, err := c.Subscribe(ctx, o, "p", uri, opts)
		if err != nil {
			t.Fatal(err)
		}
		if r := await(t, h); !r.Subscribed {
			t.Fatalf("subscribe %s: %+v", uri, r)
		}
	}
	unsub := func(c LeaseCapability, o *Owner, uri string) {
		t.Helper()
		h, err := c.Unsubscribe(ctx, o, "p", uri, opts)
		if err != nil {
			t.Fatal(err)
		}
		if r := await(t, h); !r.Unsubscribed {
			t.Fatalf("unsubscribe %s: %+v", uri, r)
		}
	}
	touch := func(c LeaseCapability, uri string) {
		t.Helper()
		if got := callTool(t, ctx, c, "p", "touch", map[string]any{"uri": uri}); got != "touched" {
			t.Fatalf("touch %s: %q", uri, got)
		}
	}
	// delivered waits until p got want updates of uri.
	delivered := func(p *testPeer, who, uri string, want int) {
		t.Helper()
		if ordered {
			if got := len(p.updated(uri)); got != want {
				t.Fatalf("%s got %d updates of %s when the touch returned, want %d", who, got, uri, want)
			}
			return
		}
		testproc.Eventually(t, who+" got the update of "+uri, func() bool { return len(p.updated(uri)) >= want })
		if got := len(p.updated(uri)); got != want {
			t.Fatalf("%s got %d updates of %s, want %d", who, got, uri, want)
		}
	}

	// Each session's connection is up and carries updates: over HTTP the
	// standalone stream opens asynchronously after the initialize, and an
	// update sent before it is lost, so touch until one arrives (stdio:
	// the first touch).
	for _, w := range []struct {
		c    LeaseCapability
		o    *Owner
		p    *testPeer
		name string
	}{{ca, oa, pa, "test://warm-a"}, {cb, ob, pb, "test://warm-b"}} {
		sub(w.c, w.o, w.name)
		testproc.Eventually(t, "the update of "+w.name+" delivered", func() bool {
			touch(w.c, w.name)
			return len(w.p.updated(w.name)) > 0
		})
	}

	const u, v, w, x = "test://u", "test://v", "test://w", "test://x"
	// On a shared lease B's call makes the server send A's update: it
	// goes to the subscriber, not to the session whose call is in flight.
	toucher := ca
	if shared {
		toucher = cb
	}
	sub(ca, oa, u)
	touch(toucher, u)
	delivered(pa, "A", u, 1)
	n := pa.updated(u)[0]
	l := e.m.leaseOf("sa", "p")
	if shared {
		l = e.m.leaseOf(SharedSessionKey, "p")
	}
	if n.Server != "p" || n.Activation != l.activation || n.Log != nil {
		t.Fatalf("A's update %+v (lease %s)", n, l.activation)
	}
	// B holds no subscription to u: its later update w arrives after
	// where u's would have.
	sub(cb, ob, w)
	touch(cb, w)
	delivered(pb, "B", w, 1)
	if got := pb.updated(u); len(got) != 0 {
		t.Fatalf("B, not subscribed, got %d updates of %s", len(got), u)
	}

	// A unsubscribes: a touch of u reaches A no more; proven by v's
	// update, touched after it.
	unsub(ca, oa, u)
	touch(toucher, u)
	sub(ca, oa, v)
	touch(toucher, v)
	delivered(pa, "A", v, 1)
	if got := len(pa.updated(u)); got != 1 {
		t.Fatalf("A got %d updates of %s, want only the one before its unsubscribe", got, u)
	}
	if got := pa.updated(w); len(got) != 0 {
		t.Fatalf("A, not subscribed, got %d updates of %s", len(got), w)
	}
	if !shared {
		return
	}

	// A shared lease: A and B hold x, the server one subscription. B's
	// unsubscribe sends nothing (A still holds it) and the server goes on
	// sending x's updates: they reach A, never B; proven by B's later
	// update of w.
	sub(ca, oa, x)
	sub(cb, ob, x)
	unsub(cb, ob, x)
	if got := e.m.subscribers(l, x); len(got) != 1 || got[0] != "sa" {
		t.Fatalf("subscribers of %s: %v", x, got)
	}
	touch(cb, x)
	delivered(pa, "A", x, 1)
	touch(cb, w)
	delivered(pb, "B", w, 2)
	if got := pb.updated(x); len(got) != 0 {
		t.Fatalf("B got %d updates of %s after its unsubscribe", len(got), x)
	}
	checkNoSecrets(t, e.l)
}

// TestRelaySharedLease: the server→client direction of a shared lease
// used by two sessions with different peers. A server request during one
// session's call reaches that session's peer only, related to that call
// (also with two calls of the same session in flight: the most recent);
// while both sessions have a call in flight it is refused
// (relay.completed{refused}). A log message reaches the one session with
// a call in flight; with none it is dropped and counted, delivered to no
// one. The lease's log level is its starter's (another session's
// SetLogLevel does not reach it). A prompts (and tools) list change
// reaches both sessions' peers.
func TestRelaySharedLease(t *testing.T) {
	e := newEnv(t, nil)
	cfg := testServer(peerEnv)
	cfg.Shared = true
	e.cfg.Set("sh", cfg)
	ctx := ctxT(t, 90*time.Second)
	pa, pb := &testPeer{caps: fullCaps()}, &testPeer{caps: fullCaps()}
	ca, _ := openPeer(t, e, ctx, "sa", pa)
	cb, _ := openPeer(t, e, ctx, "sb", pb)
	// A's level reaches the lease A's first use starts; B's is B's
	// preference and does not touch the shared lease.
	if err := ca.SetLogLevel(ctx, "info"); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Tools(ctx, "sh"); err != nil {
		t.Fatal(err)
	}
	if err := cb.SetLogLevel(ctx, "debug"); err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf(SharedSessionKey, "sh")
	if l == nil {
		t.Fatal("no shared lease")
	}
	call := func(c LeaseCapability, mark, tool string, args any) string {
		t.Helper()
		return callTool(t, context.WithValue(ctx, relatedMark{}, mark), c, "sh", tool, args)
	}
	relayEvents := func() []ev {
		var out []ev
		for _, x := range e.events() {
			if _, ok := x.Payload.(*events.RelayCompleted); ok {
				out = append(out, x)
			}
		}
		return out
	}

	// (a) A's call: A's peer, related to A's call; B's peer sees nothing.
	if got := call(ca, "a1", "sample", nil); got != "peer says hi" {
		t.Fatalf("A's sample: %q", got)
	}
	r := pa.lastRequest()
	if r.method != "sampling" || r.related != "a1" || r.ctxMark != "a1" || r.req.Server != "sh" || r.req.Activation != l.activation {
		t.Fatalf("A's relay seen as %+v", r)
	}
	if n := pb.requestCount(); n != 0 {
		t.Fatalf("B's peer got %d requests of A's call", n)
	}
	if rs := relayEvents(); len(rs) != 1 || rs[0].Session != "sa" || rs[0].Activation != l.activation ||
		rs[0].Payload.(*events.RelayCompleted).Outcome != events.RelayAccepted {
		t.Fatalf("relay.completed %+v", rs)
	}

	// (b) A's first sample is held at A's peer, so A's call stays in
	// flight: A's second call's sample is related to it (one session,
	// its most recent request); B's, with both sessions in flight, is
	// refused with -32600 and reaches no peer.
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	pa.setHold(func(rctx context.Context) {
		if !held.CompareAndSwap(false, true) {
			return
		}
		close(entered)
		select {
		case <-release:
		case <-rctx.Done():
		}
	})
	tools, err := ca.Tools(ctx, "sh")
	if err != nil {
		t.Fatal(err)
	}
	sample := digestOf(t, tools, "sample")
	first := make(chan string, 1)
	go func() {
		res, err := ca.Call(context.WithValue(ctx, relatedMark{}, "a2"), CallRequest{Server: "sh", Tool: "sample", Digest: sample})
		if err != nil {
			first <- err.Error()
			return
		}
		first <- res.Content[0].(*mcp.TextContent).Text
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("A's held sample never reached A's peer")
	}
	if got := call(ca, "a3", "sample", nil); got != "peer says hi" {
		t.Fatalf("A's second sample: %q", got)
	}
	if r := pa.lastRequest(); r.related != "a3" {
		t.Fatalf("A's second relay related to %v, want its own call a3", r.related)
	}
	if got := call(cb, "b1", "sample", nil); got != "error -32600" {
		t.Fatalf("B's sample with both sessions in flight: %q", got)
	}
	close(release)
	if got := <-first; got != "peer says hi" {
		t.Fatalf("A's held sample: %q", got)
	}
	pa.setHold(nil)
	if n, m := pa.requestCount(), pb.requestCount(); n != 3 || m != 0 {
		t.Fatalf("peers got %d (A) and %d (B) requests, want 3 and 0", n, m)
	}
	rs := relayEvents()
	if len(rs) != 4 {
		t.Fatalf("%d relay.completed, want 4", len(rs))
	}
	var refused []ev
	for _, x := range rs {
		if x.Payload.(*events.RelayCompleted).Outcome == events.RelayRefused {
			refused = append(refused, x)
		}
	}
	if len(refused) != 1 || refused[0].Payload.(*events.RelayCompleted).Related != "" || refused[0].Activation != l.activation {
		t.Fatalf("refused relays %+v", refused)
	}

	// (c) A log message during one session's call reaches it, related.
	// B's own "debug" was not sent to the shared lease: its debug message
	// is held back by the server at A's "info", and its info one, after
	// it, arrives alone.
	if got := call(ca, "a-log", "log", nil); got != "logged" {
		t.Fatalf("A's log: %q", got)
	}
	for _, lvl := range []string{"debug", "info"} {
		if got := call(cb, "b-log-"+lvl, "log", map[string]any{"level": lvl}); got != "logged" {
			t.Fatalf("B's log %s: %q", lvl, got)
		}
	}
	testproc.Eventually(t, "the log messages delivered", func() bool {
		return len(pa.notified(NotifyLog)) >= 1 && len(pb.notified(NotifyLog)) >= 1
	})
	la, lb := pa.notified(NotifyLog), pb.notified(NotifyLog)
	if len(la) != 1 || la[0].Related == nil || la[0].Related.Value(relatedMark{}) != "a-log" || la[0].Server != "sh" {
		t.Fatalf("A's log messages %+v", la)
	}
	if len(lb) != 1 || lb[0].Log.Level != "info" || lb[0].Related == nil || lb[0].Related.Value(relatedMark{}) != "b-log-info" {
		t.Fatalf("B's log messages %+v", lb)
	}
	// With no request in flight (A's call cancelled, nobody else's): the
	// message the server sends then is dropped, counted, delivered to no
	// one; its sampling request after it is refused.
	if n := l.logsDropped(); n != 0 {
		t.Fatalf("%d log messages dropped before any was unattributable", n)
	}
	cctx, cancel := context.WithCancel(context.WithValue(ctx, relatedMark{}, "a-cancel"))
	defer cancel()
	logcancel := digestOf(t, tools, "logcancel")
	cancelled := make(chan error, 1)
	go func() {
		_, err := ca.Call(cctx, CallRequest{Server: "sh", Tool: "logcancel", Digest: logcancel, Arguments: map[string]any{"sample": true}})
		cancelled <- err
	}()
	testproc.Eventually(t, "logcancel's message during the call delivered", func() bool { return len(pa.notified(NotifyLog)) == 2 })
	if n := pa.notified(NotifyLog)[1]; n.Related == nil || n.Related.Value(relatedMark{}) != "a-cancel" {
		t.Fatalf("logcancel's message during the call %+v", n)
	}
	cancel()
	if err := <-cancelled; !errors.Is(err, ErrCallFailed) {
		t.Fatalf("cancelled call: %v", err)
	}
	testproc.Eventually(t, "the message after the cancellation dropped", func() bool { return l.logsDropped() == 1 })
	if na, nb := len(pa.notified(NotifyLog)), len(pb.notified(NotifyLog)); na != 2 || nb != 1 {
		t.Fatalf("after the drop A has %d and B %d log messages, want 2 and 1", na, nb)
	}
	testproc.Eventually(t, "the sampling request after the cancellation refused", func() bool { return len(relayEvents()) == 5 })
	if x := relayEvents()[4]; x.Payload.(*events.RelayCompleted).Outcome != events.RelayRefused || x.Payload.(*events.RelayCompleted).Related != "" {
		t.Fatalf("the sampling request with no request in flight: %+v", x.Payload)
	}
	if n, m := pa.requestCount(), pb.requestCount(); n != 3 || m != 0 {
		t.Fatalf("peers got %d (A) and %d (B) requests, want 3 and 0", n, m)
	}

	// (d) A list change on the shared lease reaches both sessions.
	if got := call(ca, "a-change", "change", nil); got != "changed" {
		t.Fatalf("change: %q", got)
	}
	for _, p := range []*testPeer{pa, pb} {
		testproc.Eventually(t, "prompts list change delivered", func() bool { return len(p.notified(NotifyPromptsChanged)) == 1 })
		testproc.Eventually(t, "tools list change delivered", func() bool { return len(p.notified(NotifyToolsChanged)) == 1 })
	}
	if n := count(e.events(), events.KindLeaseListChanged, func(x ev) bool {
		return x.Activation == l.activation && x.Payload.(*events.LeaseListChanged).List == events.ListPrompts
	}); n != 1 {
		t.Fatalf("%d lease.list_changed{prompts}", n)
	}
	// (e) A session that only listed the shared server's tools hears of
	// their change too: it holds a listing that changed.
	pc := &testPeer{caps: fullCaps()}
	cc, _ := openPeer(t, e, ctx, "sc", pc)
	if _, err := cc.Tools(ctx, "sh"); err != nil {
		t.Fatal(err)
	}
	if got := call(ca, "a-change2", "change", nil); got != "changed" {
		t.Fatalf("second change: %q", got)
	}
	testproc.Eventually(t, "tools list change delivered to the session that only listed", func() bool {
		return len(pc.notified(NotifyToolsChanged)) == 1
	})
	// The level B set was recorded as B's, and only A's reached the lease.
	if n := count(e.events(), events.KindSessionLogLevel, nil); n != 2 {
		t.Fatalf("%d session.log_level", n)
	}
	checkNoSecrets(t, e.l)
}

// TestLogLevelInvalid: a level outside MCP's eight is ErrInvalidRequest
// and nothing is recorded or kept; the session's live lease is not sent
// it (its server still holds its messages back, as before any level).
func TestLogLevelInvalid(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("p", testServer(peerEnv))
	ctx := ctxT(t, 60*time.Second)
	peer := &testPeer{caps: fullCaps()}
	capa, _ := openPeer(t, e, ctx, "s1", peer)
	if _, err := capa.Tools(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	before := len(e.events())
	for _, lvl := range []mcp.LoggingLevel{"bogus", "", "INFO", "warn", "info "} {
		err := capa.SetLogLevel(ctx, lvl)
		var le *LeaseError
		if !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &le) || le.Session != "s1" {
			t.Fatalf("level %q: %v", lvl, err)
		}
	}
	if evs := e.events(); len(evs) != before {
		t.Fatalf("invalid levels recorded %d events: %v", len(evs)-before, e.kinds("")[before:])
	}
	if got := e.m.sessionLogLevel("s1"); got != "" {
		t.Fatalf("session level %q after invalid levels", got)
	}
	// Nothing reached the server: an emergency message is held back (no
	// level set); the one after a valid level arrives alone.
	if got := callTool(t, ctx, capa, "p", "log", map[string]any{"level": "emergency"}); got != "logged" {
		t.Fatalf("log: %q", got)
	}
	if err := capa.SetLogLevel(ctx, "error"); err != nil {
		t.Fatal(err)
	}
	if got := callTool(t, ctx, capa, "p", "log", map[string]any{"level": "error"}); got != "logged" {
		t.Fatalf("log: %q", got)
	}
	testproc.Eventually(t, "log message delivered", func() bool { return len(peer.notified(NotifyLog)) > 0 })
	if got := peer.notified(NotifyLog); len(got) != 1 || got[0].Log.Level != "error" {
		t.Fatalf("log messages %+v", got)
	}
}

// TestLogLevelLiveLease: SetLogLevel on a session whose lease is live
// sends logging/setLevel to it, each time: the server then logs at that
// level (below it held back, at it delivered).
func TestLogLevelLiveLease(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("p", testServer(peerEnv))
	ctx := ctxT(t, 60*time.Second)
	peer := &testPeer{caps: fullCaps()}
	capa, _ := openPeer(t, e, ctx, "s1", peer)
	if _, err := capa.Tools(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "p")
	logAt := func(lvl string) {
		t.Helper()
		if got := callTool(t, ctx, capa, "p", "log", map[string]any{"level": lvl}); got != "logged" {
			t.Fatalf("log %s: %q", lvl, got)
		}
	}
	var want []mcp.LoggingLevel
	for _, step := range []struct {
		set       mcp.LoggingLevel
		held, arr string
	}{{"error", "warning", "error"}, {"debug", "", "debug"}, {"critical", "error", "alert"}} {
		if err := capa.SetLogLevel(ctx, step.set); err != nil {
			t.Fatal(err)
		}
		if step.held != "" {
			logAt(step.held)
		}
		logAt(step.arr)
		want = append(want, mcp.LoggingLevel(step.arr))
		testproc.Eventually(t, "log message at "+step.arr+" delivered", func() bool { return len(peer.notified(NotifyLog)) >= len(want) })
		var got []mcp.LoggingLevel
		for _, n := range peer.notified(NotifyLog) {
			got = append(got, n.Log.Level)
		}
		if len(got) != len(want) || got[len(got)-1] != want[len(want)-1] {
			t.Fatalf("after level %s: messages at %v, want %v", step.set, got, want)
		}
	}
	if e.m.leaseOf("s1", "p") != l {
		t.Fatal("the lease was replaced")
	}
	var levels []events.LogLevel
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.SessionLogLevel); ok && x.Session == "s1" {
			levels = append(levels, p.Level)
		}
	}
	if len(levels) != 3 || levels[0] != "error" || levels[1] != "debug" || levels[2] != "critical" {
		t.Fatalf("session.log_level %v", levels)
	}
}
