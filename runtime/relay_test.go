//go:build linux

package runtime

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime/internal/peertools"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpStandaloneStream: HTTP leases read the server's standalone SSE
// stream, where list changes arrive (httpstream.go).
const httpStandaloneStream = true

// peerEnv makes the test server serve the peertools tools.
var peerEnv = map[string]string{"TESTSERVER_PEER": "1"}

// testPeer is a ClientPeer that answers every relay and records what it
// was given.
type testPeer struct {
	caps *mcp.ClientCapabilities

	mu sync.Mutex
	// hold, when set, runs in CreateMessage before it answers.
	hold     func(ctx context.Context)
	requests []peerSeen
	notes    []PeerNotification
}

// peerSeen is one relayed request as the peer saw it.
type peerSeen struct {
	method  string
	req     PeerRequest
	related any // the related ctx's relatedMark value
	ctxMark any // the relay ctx's relatedMark value (flows from Related)
	hasDL   bool
}

type relatedMark struct{}

func fullCaps() *mcp.ClientCapabilities {
	return &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{},
		Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}, RootsV2: &mcp.RootCapabilities{}}
}

func (p *testPeer) Capabilities() *mcp.ClientCapabilities { return p.caps }

func (p *testPeer) seen(ctx context.Context, method string, r PeerRequest) {
	s := peerSeen{method: method, req: r, ctxMark: ctx.Value(relatedMark{})}
	_, s.hasDL = ctx.Deadline()
	if r.Related != nil {
		s.related = r.Related.Value(relatedMark{})
	}
	p.mu.Lock()
	p.requests = append(p.requests, s)
	p.mu.Unlock()
}

func (p *testPeer) CreateMessage(ctx context.Context, r PeerRequest, _ *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
	p.seen(ctx, "sampling", r)
	p.mu.Lock()
	hold := p.hold
	p.mu.Unlock()
	if hold != nil {
		hold(ctx)
	}
	return &mcp.CreateMessageWithToolsResult{Model: "m", Role: "assistant", Content: []mcp.Content{&mcp.TextContent{Text: "peer says hi"}}}, nil
}

func (p *testPeer) Elicit(ctx context.Context, r PeerRequest, _ *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	p.seen(ctx, "elicit", r)
	return &mcp.ElicitResult{Action: "decline"}, nil
}

func (p *testPeer) ListRoots(ctx context.Context, r PeerRequest, _ *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	p.seen(ctx, "roots", r)
	return &mcp.ListRootsResult{Roots: []*mcp.Root{{URI: "file:///work"}}}, nil
}

func (p *testPeer) Notify(_ context.Context, n PeerNotification) {
	p.mu.Lock()
	p.notes = append(p.notes, n)
	p.mu.Unlock()
}

func (p *testPeer) notified(kind NotificationKind) []PeerNotification {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PeerNotification
	for _, n := range p.notes {
		if n.Kind == kind {
			out = append(out, n)
		}
	}
	return out
}

func (p *testPeer) lastRequest() peerSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[len(p.requests)-1]
}

// peerHTTP serves peertools (and an echo tool) over Streamable HTTP.
func peerHTTP(t *testing.T) string {
	t.Helper()
	// Subscriptions are accepted for any uri (as by the test server), so
	// touch reaches the server sessions subscribed.
	srv := mcp.NewServer(&mcp.Implementation{Name: "peer-http", Version: "0"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	peertools.Add(srv)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL + "/mcp"
}

// textOf returns a call result's first text.
func textOf(t *testing.T, res *mcp.CallToolResult, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) == 0 {
		t.Fatal("empty result")
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// relays returns the relay.completed events.
func relays(e *env) []*events.RelayCompleted {
	var out []*events.RelayCompleted
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.RelayCompleted); ok {
			out = append(out, p)
		}
	}
	return out
}

// checkNoSecrets fails when any of the test's provider or client text
// reached the ledger.
func checkNoSecrets(t *testing.T, l *ledger.Ledger) {
	t.Helper()
	for env, err := range l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"SECRET", "peer says hi", "file:///work"} {
			if strings.Contains(string(env.Data), s) {
				t.Fatalf("seq %d %s records %q: %s", env.Seq, env.Kind, s, env.Data)
			}
		}
	}
}

func TestRelayStdio(t *testing.T) { relaySuite(t, testServer(peerEnv), true) }

// TestRelayHTTP: the relays over Streamable HTTP. A list change is sent on
// the server's standalone SSE stream (not tied to a request), which the
// HTTP lease reads only when it opens that stream (httpStandaloneStream).
func TestRelayHTTP(t *testing.T) {
	relaySuite(t, ServerConfig{URL: peerHTTP(t)}, httpStandaloneStream)
}

// relaySuite: sampling, elicitation and roots reach the session's peer
// with the related call's context and their answers reach the server;
// each is recorded (outcome, related call, never content); a log message
// reaches the peer once the session set a level; a tool list change pins
// the new listing, and a call against the replaced one is refused with
// ErrListingChanged without reaching the server or poisoning the lease.
func relaySuite(t *testing.T, cfg ServerConfig, listChanges bool) {
	e := newEnv(t, nil)
	e.cfg.Set("p", cfg)
	ctx := ctxT(t, 60*time.Second)
	peer := &testPeer{caps: fullCaps()}
	s, err := e.m.OpenSessionWith(ctx, "s1", SessionOptions{Client: peer})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string, args any) string {
		cctx := context.WithValue(ctx, relatedMark{}, tool)
		res, err := capa.Call(cctx, CallRequest{Server: "p", Tool: tool, Digest: digestOf(t, tools, tool), Arguments: args})
		return textOf(t, res, err)
	}
	if got := call("sample", nil); got != "peer says hi" {
		t.Fatalf("sample: %q", got)
	}
	r := peer.lastRequest()
	if r.method != "sampling" || r.related != "sample" || r.ctxMark != "sample" || r.req.Server != "p" || r.req.Activation == "" || !r.hasDL {
		t.Fatalf("sampling relay seen as %+v", r)
	}
	if got := call("elicit", nil); got != "decline " {
		t.Fatalf("elicit: %q", got)
	}
	if got := call("roots", nil); got != "file:///work" {
		t.Fatalf("roots: %q", got)
	}
	rs := relays(e)
	if len(rs) != 3 {
		t.Fatalf("%d relay.completed", len(rs))
	}
	want := []events.RelayCompleted{{Method: events.RelaySampling, Outcome: events.RelayAccepted},
		{Method: events.RelayElicit, Outcome: events.RelayDeclined, Mode: events.ElicitForm},
		{Method: events.RelayListRoots, Outcome: events.RelayAccepted}}
	for i, w := range want {
		g := rs[i]
		if g.Method != w.Method || g.Outcome != w.Outcome || g.Mode != w.Mode || !strings.Contains(g.Related, "-c") {
			t.Fatalf("relay %d: %+v, want %+v with a call id", i, g, w)
		}
	}

	// Logging: nothing is sent before a level is set (go-sdk servers
	// hold their log until then); once set, the message reaches the peer.
	if err := capa.SetLogLevel(ctx, "info"); err != nil {
		t.Fatal(err)
	}
	if got := call("log", nil); got != "logged" {
		t.Fatalf("log: %q", got)
	}
	testproc.Eventually(t, "log message delivered", func() bool { return len(peer.notified(NotifyLog)) == 1 })
	if n := peer.notified(NotifyLog)[0]; n.Log == nil || n.Log.Data != "SECRET log" || n.Server != "p" {
		t.Fatalf("log notification %+v", n)
	}

	if !listChanges {
		checkNoSecrets(t, e.l)
		return
	}
	// A tool list change: the new listing is pinned and shown; the old
	// digest of the changed tool is refused without reaching the server.
	oldMutable := digestOf(t, tools, "mutable")
	if got := call("change", nil); got != "changed" {
		t.Fatalf("change: %q", got)
	}
	testproc.Eventually(t, "tools list change delivered", func() bool { return len(peer.notified(NotifyToolsChanged)) > 0 })
	testproc.Eventually(t, "prompts list change delivered", func() bool { return len(peer.notified(NotifyPromptsChanged)) > 0 })
	tools2, err := capa.Tools(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	newMutable := digestOf(t, tools2, "mutable")
	if newMutable == oldMutable {
		t.Fatal("mutable's digest did not change")
	}
	l := e.m.leaseOf("s1", "p")
	callsBefore := l.wire.toolsCalls.Load()
	_, err = capa.Call(ctx, CallRequest{Server: "p", Tool: "mutable", Digest: oldMutable})
	if !errors.Is(err, ErrListingChanged) {
		t.Fatalf("old digest: %v", err)
	}
	if n := l.wire.toolsCalls.Load(); n != callsBefore {
		t.Fatalf("a call against the replaced listing reached the server (%d tools/call)", n-callsBefore)
	}
	if e.m.leaseOf("s1", "p") != l {
		t.Fatal("the lease was replaced after ErrListingChanged")
	}
	res, err := capa.Call(ctx, CallRequest{Server: "p", Tool: "mutable", Digest: newMutable})
	if got := textOf(t, res, err); got != "mutable" {
		t.Fatalf("new digest: %q", got)
	}
	evs := e.events()
	if n := count(evs, events.KindLeaseListChanged, func(x ev) bool { return x.Payload.(*events.LeaseListChanged).List == events.ListTools }); n < 1 {
		t.Fatal("no lease.list_changed{tools}")
	}
	if n := count(evs, "lease.listing_pinned", nil); n < 2 {
		t.Fatalf("%d lease.listing_pinned, want the new listing pinned", n)
	}
	if n := count(evs, "call.refused", func(x ev) bool { return x.Payload.(*events.CallRefused).Reason == events.RefusedListingChanged }); n != 1 {
		t.Fatalf("%d call.refused{listing_changed}", n)
	}
	if n := count(evs, events.KindSessionLogLevel, nil); n != 1 {
		t.Fatalf("%d session.log_level", n)
	}
	checkNoSecrets(t, e.l)
}

// TestRelayRefused: a session whose client declared no sampling or roots
// (or has no peer) gets its servers' requests refused with the protocol's
// error, recorded as refused; nothing reaches the peer.
func TestRelayRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("p", testServer(peerEnv))
	ctx := ctxT(t, 60*time.Second)
	peer := &testPeer{caps: &mcp.ClientCapabilities{}}
	for _, opts := range []SessionOptions{{Client: peer}, {}} {
		sess := "s-peer"
		if opts.Client == nil {
			sess = "s-none"
		}
		s, err := e.m.OpenSessionWith(ctx, sess, opts)
		if err != nil {
			t.Fatal(err)
		}
		capa := s.Capability()
		tools, err := capa.Tools(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		for tool, want := range map[string]string{"sample": "error -31001", "roots": "error -32601"} {
			res, err := capa.Call(ctx, CallRequest{Server: "p", Tool: tool, Digest: digestOf(t, tools, tool)})
			if got := textOf(t, res, err); got != want {
				t.Fatalf("%s %s: %q, want %q", sess, tool, got, want)
			}
		}
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	peer.mu.Lock()
	n := len(peer.requests)
	peer.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d requests reached a peer that declared nothing", n)
	}
	rs := relays(e)
	if len(rs) != 4 {
		t.Fatalf("%d relay.completed, want 4", len(rs))
	}
	for _, r := range rs {
		if r.Outcome != events.RelayRefused {
			t.Fatalf("relay %+v, want refused", r)
		}
	}
}

// TestLogLevelAppliedToLaterLease: a level set before any lease exists is
// sent to the lease acquired later, right after initialize: its log
// messages reach the peer.
func TestLogLevelAppliedToLaterLease(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("p", testServer(peerEnv))
	ctx := ctxT(t, 60*time.Second)
	peer := &testPeer{caps: fullCaps()}
	s, err := e.m.OpenSessionWith(ctx, "s1", SessionOptions{Client: peer})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	capa := s.Capability()
	if err := capa.SetLogLevel(ctx, "bogus"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bogus level: %v", err)
	}
	if err := capa.SetLogLevel(ctx, "warning"); err != nil {
		t.Fatal(err)
	}
	tools, err := capa.Tools(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	// Below the level: held back by the server; at it: delivered. The
	// second call's message is the one that arrives.
	for _, lvl := range []string{"info", "error"} {
		res, err := capa.Call(ctx, CallRequest{Server: "p", Tool: "log", Digest: digestOf(t, tools, "log"), Arguments: map[string]any{"level": lvl}})
		if got := textOf(t, res, err); got != "logged" {
			t.Fatalf("log %s: %q", lvl, got)
		}
	}
	testproc.Eventually(t, "log message delivered", func() bool { return len(peer.notified(NotifyLog)) > 0 })
	if got := peer.notified(NotifyLog); len(got) != 1 || got[0].Log.Level != "error" {
		t.Fatalf("log notifications %+v", got)
	}
}
