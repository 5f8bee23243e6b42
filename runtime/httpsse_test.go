//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseledger/leaseledger/events"
)

// sseServer is a go-sdk server behind the legacy HTTP+SSE handler
// (mcp.NewSSEHandler), recording every request.
type sseServer struct {
	srv *mcp.Server
	hs  *httptest.Server
	mu  sync.Mutex
	got []seenReq
}

func newSSEServer(t *testing.T) *sseServer {
	s := &sseServer{srv: mcp.NewServer(&mcp.Implementation{Name: "legacy", Version: "0"}, nil)}
	s.srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Text string }
			_ = json.Unmarshal(r.Params.Arguments, &args)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sse:" + args.Text}}}, nil
		})
	h := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s.srv }, nil)
	s.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.got = append(s.got, seenReq{method: r.Method, path: r.URL.Path, header: r.Header.Clone()})
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		s.hs.CloseClientConnections()
		s.hs.Close()
	})
	return s
}

func (s *sseServer) requests() []seenReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenReq(nil), s.got...)
}

// TestHTTPLegacySSE: a "type": "sse" entry runs over the legacy HTTP+SSE
// transport through the lease's HTTP client: listing and a call through
// the gate, the configured header on the stream and on every message
// POST, a notification the server sends outside any request read on the
// stream, every request registered (the stream as scope sse) and settled,
// a confirmed close; and the stream's end is the remote session's loss,
// after which the next call runs on a new session.
func TestHTTPLegacySSE(t *testing.T) {
	e := newEnv(t, nil)
	s := newSSEServer(t)
	e.cfg.Set("legacy", ServerConfig{Type: "sse", URL: s.hs.URL + "/sse", Headers: map[string]string{"X-Lease-Test": "1"}})
	ctx := ctxT(t, 30*time.Second)
	sess, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Release(ctx)
	capa := sess.Capability()
	call := func() *mcp.CallToolResult {
		t.Helper()
		tools, err := capa.Tools(ctx, "legacy")
		if err != nil {
			t.Fatal(err)
		}
		res, err := capa.Call(ctx, CallRequest{Server: "legacy", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "sse:hi" {
			t.Fatalf("call result %+v", res)
		}
		return res
	}
	call()
	l := e.m.leaseOf("s1", "legacy")
	if l == nil || l.wire.toolsCalls.Load() != 1 {
		t.Fatalf("lease %v", l)
	}
	// A list change, sent outside any request, arrives on the stream.
	before := l.wire.received.Load()
	s.srv.AddTool(&mcp.Tool{Name: "later", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	testproc.Eventually(t, "the notification sent outside any request read", func() bool { return l.wire.received.Load() != before })
	reqs := s.requests()
	gets, posts := 0, 0
	for _, r := range reqs {
		if r.header.Get("X-Lease-Test") != "1" {
			t.Errorf("%s %s without the configured header", r.method, r.path)
		}
		switch r.method {
		case http.MethodGet:
			gets++
		case http.MethodPost:
			posts++
		}
	}
	if gets != 1 || posts < 4 { // initialize, initialized, tools/list, tools/call
		t.Errorf("%d GETs, %d POSTs", gets, posts)
	}

	// The stream's end loses the remote session: the lease's child is
	// done, and the next call acquires a new session.
	act := l.activation
	s.hs.CloseClientConnections()
	select {
	case <-l.child.done():
	case <-time.After(10 * time.Second):
		t.Fatal("the stream ended, the lease's child did not")
	}
	if why := l.child.(*httpChild).lost(); why != lostSessionFailed {
		t.Errorf("lost %q", why)
	}
	call()
	l2 := e.m.leaseOf("s1", "legacy")
	if l2 == nil || l2.activation == act {
		t.Fatalf("no new lease after the loss: %v", l2)
	}
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Activation: l2.activation}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed() {
		t.Fatalf("close report %+v", rep)
	}
	evs := e.events()
	ps := httpPayloads(evs, l2.activation)
	checkHTTPEvidence(t, ps)
	scopes := map[string]int{}
	for _, p := range ps {
		if r, ok := p.(*events.HTTPRegistered); ok {
			scopes[r.Scope]++
		}
	}
	if scopes[scopeStream] != 1 || scopes[scopeRequest] < 4 {
		t.Errorf("registered scopes %v", scopes)
	}
	if n := count(evs, "connection.opened", func(x ev) bool {
		return x.Activation == l2.activation && x.Payload.(*events.ConnectionOpened).Transport == events.TransportHTTP
	}); n != 1 {
		t.Errorf("connection.opened{http}: %d", n)
	}
}

// TestHTTPLegacySSEOtherOrigin: a legacy SSE server that announces a
// message endpoint on another origin gets no request there: the POST is
// refused (ErrHTTPOtherOrigin) and the acquisition fails.
func TestHTTPLegacySSEOtherOrigin(t *testing.T) {
	var hits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer other.Close()
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: endpoint\ndata: %s/message\n\n", other.URL)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer func() {
		stream.CloseClientConnections()
		stream.Close()
	}()
	e := newEnv(t, func(o *Options) { o.AcquireTimeout = 5 * time.Second })
	e.cfg.Set("legacy", ServerConfig{Type: "sse", URL: stream.URL + "/sse"})
	ctx := ctxT(t, 20*time.Second)
	sess, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Release(ctx)
	_, err = sess.Capability().Tools(ctx, "legacy")
	if err == nil || !errors.Is(err, ErrInitialize) {
		t.Fatalf("acquisition: %v", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached the other origin", hits.Load())
	}
	var refused bool
	for _, p := range httpPayloadsAll(e.events()) {
		if c, ok := p.(*events.HTTPCompleted); ok && c.Detail == "cross_origin" {
			refused = true
		}
	}
	if !refused {
		t.Error("no http.completed{cross_origin} recorded for the refused POST")
	}
}

func httpPayloadsAll(evs []ev) []events.Payload {
	var out []events.Payload
	for _, x := range evs {
		if strings.HasPrefix(string(x.Kind), "http.") {
			out = append(out, x.Payload)
		}
	}
	return out
}
