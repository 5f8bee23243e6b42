//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// reuseServer serves a go-sdk MCP server with an echo tool over
// Streamable HTTP on loopback, counting the TCP connections it accepts.
// While hold is set, a POST answered with an event stream is held open
// after its handler returned (the response sent, the stream not ended)
// until the client ends the request; held receives one value each time.
type reuseServer struct {
	url   string
	conns atomic.Int64
	hold  atomic.Bool
	held  chan struct{}
}

func newReuseServer(t *testing.T) *reuseServer {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "reuse", Version: "0"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	rs := &reuseServer{held: make(chan struct{}, 4)}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.Method == http.MethodPost && rs.hold.Load() && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			rs.held <- struct{}{}
		}
	}))
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rs.conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	rs.url = hs.URL + "/mcp"
	return rs
}

// postOutcomes returns, in registration order, the outcome recorded for
// each POST of act registered after its first skip requests ("" while
// its completion is not recorded yet), and how many requests act has
// registered in all.
func postOutcomes(e *env, act string, skip int) (outs []events.HTTPOutcome, regs int) {
	ps := httpPayloads(e.events(), act)
	done := map[string]events.HTTPOutcome{}
	for _, p := range ps {
		if c, ok := p.(*events.HTTPCompleted); ok {
			done[c.Ref] = c.Outcome
		}
	}
	for _, p := range ps {
		if r, ok := p.(*events.HTTPRegistered); ok {
			if regs++; regs > skip && r.Method == events.HTTPPost {
				outs = append(outs, done[r.Ref])
			}
		}
	}
	return outs, regs
}

// recorded reports whether outs holds n outcomes, all recorded.
func recorded(outs []events.HTTPOutcome, n int) bool {
	if len(outs) != n {
		return false
	}
	for _, o := range outs {
		if o == "" {
			return false
		}
	}
	return true
}

// A call that completed normally never aborts its POST: the response
// stream is read to its end after the call returned and its caller ended
// its context, the request is recorded ok, and its connection serves the
// next call (no new connection once the lease is up), call after call.
func TestHTTPCallsReuseConnections(t *testing.T) {
	e := newEnv(t, nil)
	srv := newReuseServer(t)
	e.cfg.Set("remote", ServerConfig{URL: srv.url})
	ctx := ctxT(t, time.Minute)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	req := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}
	act := e.m.leaseOf("s1", "remote").activation
	ev := e.m.leaseOf("s1", "remote").child.(*httpChild).ev
	settled := func() { testproc.Eventually(t, "the POSTs settled", func() bool { return liveBodies(ev) == 0 }) }
	call := func() {
		// Each call under a context of its own, ended when it returns, as
		// a gateway's request is.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if res, err := s.Capability().Call(cctx, req); err != nil || res.IsError {
			t.Fatalf("call: %v %+v", err, res)
		}
	}
	call()
	settled()
	_, skip := postOutcomes(e, act, 0)
	conns := srv.conns.Load()
	const calls = 40
	for range calls {
		call()
		// The next call starts once this one's POST is settled: its
		// connection is then idle in the pool, or was dropped.
		settled()
	}
	if n := srv.conns.Load() - conns; n != 0 {
		t.Errorf("%d new connections for %d calls, want every call on the pooled one", n, calls)
	}
	var outs []events.HTTPOutcome
	testproc.Eventually(t, "the calls' POSTs recorded", func() bool {
		outs, _ = postOutcomes(e, act, skip)
		return recorded(outs, calls)
	})
	for i, o := range outs {
		if o != events.HTTPOK {
			t.Fatalf("call %d's POST recorded %s, want ok", i, o)
		}
	}
}

// A server that keeps a call's response stream open after the response is
// not waited for without bound: the call returns with its result, and once
// httpDrainGrace has passed since the call's end its POST is cancelled (the
// server sees its request end) and recorded aborted.
func TestHTTPHeldStreamCancelledAfterGrace(t *testing.T) {
	e := newEnv(t, nil)
	srv := newReuseServer(t)
	e.cfg.Set("remote", ServerConfig{URL: srv.url})
	ctx := ctxT(t, time.Minute)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	act := e.m.leaseOf("s1", "remote").activation
	_, skip := postOutcomes(e, act, 0)
	srv.hold.Store(true)
	cctx, cancel := context.WithCancel(ctx)
	res, err := s.Capability().Call(cctx, CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "held"}})
	cancel()
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	select {
	case <-srv.held:
	case <-time.After(testproc.HangBound):
		t.Fatal("the held stream was never cancelled")
	}
	srv.hold.Store(false)
	var outs []events.HTTPOutcome
	testproc.Eventually(t, "the held POST recorded", func() bool {
		outs, _ = postOutcomes(e, act, skip)
		return recorded(outs, 1)
	})
	if outs[0] != events.HTTPAborted {
		t.Fatalf("the held POST recorded %s, want aborted", outs[0])
	}
}

// The boundary keeps as many idle connections per host as the manager may
// have live leases (at least httpMaxIdlePerHost): a call in flight on each
// of them finds its connection pooled for the next one.
func TestHTTPIdleBoundFollowsLeaseBound(t *testing.T) {
	for _, c := range []struct{ leases, want int }{{8, httpMaxIdlePerHost}, {64, 64}, {200, 200}} {
		e := newEnv(t, func(o *Options) { o.MaxLiveLeases = c.leases })
		if got := e.m.httpBoundary().transport.MaxIdleConnsPerHost; got != c.want {
			t.Errorf("MaxLiveLeases %d: %d idle connections per host kept, want %d", c.leases, got, c.want)
		}
	}
}
