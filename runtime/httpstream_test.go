//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseledger/leaseledger/events"
)

// streamServer is a go-sdk Streamable HTTP server that records, for every
// request, its method and the MCP-Protocol-Version it carried.
type streamServer struct {
	srv *mcp.Server
	hs  *httptest.Server
	mu  sync.Mutex
	got []seenReq
}

func newStreamServer(t *testing.T) *streamServer {
	s := &streamServer{srv: mcp.NewServer(&mcp.Implementation{Name: "stream", Version: "0"}, nil)}
	s.srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv }, nil)
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

func (s *streamServer) requests() []seenReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenReq(nil), s.got...)
}

// session returns the server's one session.
func (s *streamServer) session(t *testing.T) *mcp.ServerSession {
	t.Helper()
	for ss := range s.srv.Sessions() {
		return ss
	}
	t.Fatal("no server session")
	return nil
}

// checkStandaloneGET: exactly one GET (the standalone stream, no
// Last-Event-ID, in the session) was made, and no request carried
// MCP-Protocol-Version (httpstream.go: left out on purpose).
func checkStandaloneGET(t *testing.T, reqs []seenReq) {
	t.Helper()
	gets := 0
	for _, r := range reqs {
		switch r.method {
		case http.MethodGet:
			gets++
			if r.header.Get(lastEventIDHeader) != "" || r.header.Get(sessionIDHeader) == "" {
				t.Errorf("GET with Last-Event-ID %q, session id %q", r.header.Get(lastEventIDHeader), r.header.Get(sessionIDHeader))
			}
		}
		if v := r.header.Get(protocolHeader); v != "" {
			t.Errorf("%s carried MCP-Protocol-Version %q", r.method, v)
		}
	}
	if gets != 1 {
		t.Errorf("%d GET requests, want the one standalone stream", gets)
	}
}

// TestHTTPStandaloneStream: over a lease's observed HTTP connection (the
// wrapper a lease gives go-sdk's ClientSession), the standalone GET
// stream is opened after the initialize, and a log message and a tool
// list change the server sends outside any request reach the client.
func TestHTTPStandaloneStream(t *testing.T) {
	s := newStreamServer(t)
	b := newHTTPBoundary(httpTimeouts{connect: 5 * time.Second, receive: 10 * time.Second, request: 10 * time.Second})
	defer b.close()
	u, err := url.Parse(s.hs.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	rt := newLeaseRoundTripper(b, u, nil, nil)
	h := &httpChild{rt: rt, client: b.clientFor(rt), url: u.String(), doneCh: make(chan struct{})}
	h.readStop, h.stopReads = context.WithCancel(context.Background())
	defer h.breakReads()
	var wire wireStats
	var reqs reqTable
	logs := make(chan *mcp.LoggingMessageParams, 1)
	changed := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, &mcp.ClientOptions{
		LoggingMessageHandler:  func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- r.Params },
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := ctxT(t, 20*time.Second)
	cs, err := client.Connect(ctx, h.observed(&wire, &reqs), &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	ss := s.session(t)
	// No request is in flight: the server has only the standalone stream.
	if err := ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "t", Data: "outside any request"}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-logs:
		if p.Data != "outside any request" {
			t.Fatalf("log %+v", p)
		}
	case <-ctx.Done():
		t.Fatal("the log message sent outside any request never arrived")
	}
	s.srv.AddTool(&mcp.Tool{Name: "later", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("tools/list_changed never arrived")
	}
	if wire.toolsCalls.Load() != 0 || wire.toolsLists.Load() != 0 {
		t.Errorf("the stream counted as tool requests: %d calls, %d lists", wire.toolsCalls.Load(), wire.toolsLists.Load())
	}
	checkStandaloneGET(t, s.requests())
}

// TestHTTPStandaloneStreamLease: a lease over Streamable HTTP opens the
// standalone stream once acquired; the GET is registered as the lease's
// stream (http.registered{scope sse}), not counted as a tool request; a
// notification the server sends outside any request is read on it; and
// the lease still closes confirmed, the stream's request settled.
func TestHTTPStandaloneStreamLease(t *testing.T) {
	e := newEnv(t, nil)
	s := newStreamServer(t)
	e.cfg.Set("remote", ServerConfig{Type: "http", URL: s.hs.URL + "/mcp"})
	ctx := ctxT(t, 30*time.Second)
	sess, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Release(ctx)
	if _, err := sess.Capability().Tools(ctx, "remote"); err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "remote")
	if l == nil {
		t.Fatal("no lease")
	}
	// The GET is made by go-sdk's goroutine once the session is
	// initialized; wait for it to reach the server.
	testproc.Eventually(t, "the standalone GET at the server", func() bool { return hasGET(s.requests()) })
	before := l.wire.received.Load()
	calls := l.wire.toolsCalls.Load()
	s.srv.AddTool(&mcp.Tool{Name: "later", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	testproc.Eventually(t, "the notification sent outside any request read", func() bool { return l.wire.received.Load() != before })
	// (A list change may make the lease list its tools again: that is a
	// request of its own, not the stream's.)
	if l.wire.toolsCalls.Load() != calls {
		t.Errorf("the stream counted as a tool call")
	}
	checkStandaloneGET(t, s.requests())

	act := l.activation
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Activation: act}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed() {
		t.Fatalf("close report %+v", rep)
	}
	var streams int
	for _, p := range httpPayloads(e.events(), act) {
		if r, ok := p.(*events.HTTPRegistered); ok && r.Scope == scopeStream {
			streams++
			if r.Method != events.HTTPGet {
				t.Errorf("stream registered as %s", r.Method)
			}
		}
	}
	if streams != 1 {
		t.Errorf("%d stream registrations, want 1", streams)
	}
	checkHTTPEvidence(t, httpPayloads(e.events(), act))
}

func hasGET(reqs []seenReq) bool {
	for _, r := range reqs {
		if r.method == http.MethodGet {
			return true
		}
	}
	return false
}
