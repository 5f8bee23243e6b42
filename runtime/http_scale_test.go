//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// goSDKHTTP serves a go-sdk MCP server over Streamable HTTP on loopback:
// echo {text}, and hang (answers only when the request ends). started
// receives one value per hang call.
func goSDKHTTP(t testing.TB) (endpoint string, started chan struct{}) {
	t.Helper()
	endpoint, started, _ = goSDKHTTPServer(t)
	return endpoint, started
}

// goSDKHTTPServer is goSDKHTTP that also returns the MCP server (its
// sessions can be ended from the server side).
func goSDKHTTPServer(t testing.TB) (endpoint string, started chan struct{}, srv *mcp.Server) {
	t.Helper()
	started = make(chan struct{}, 16)
	quit := make(chan struct{})
	srv = mcp.NewServer(&mcp.Implementation{Name: "gosdk-http", Version: "0"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "hang", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
			case <-quit:
			}
			return &mcp.CallToolResult{}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		close(quit)
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL + "/mcp", started, srv
}

// closeServerSessions ends srv's sessions from the server's side: those a
// lease left behind (its DELETE cut off or never sent) keep their
// goroutines until then.
func closeServerSessions(srv *mcp.Server) {
	var ss []*mcp.ServerSession
	for s := range srv.Sessions() {
		ss = append(ss, s)
	}
	for _, s := range ss {
		_ = s.Close()
	}
}

// TestHTTPBodyNeverEndsAbortedOnClose: a tool call whose response stream
// never ends is aborted by the connection's close within its budget; its
// request is recorded aborted with its barrier, and the close is
// confirmed.
func TestHTTPBodyNeverEndsAbortedOnClose(t *testing.T) {
	e := newEnv(t, nil)
	endpoint, started := goSDKHTTP(t)
	e.cfg.Set("remote", ServerConfig{URL: endpoint})
	ctx := ctxT(t, 30*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	callErr := make(chan error, 1)
	go func() {
		_, err := s.Capability().Call(ctx, CallRequest{Server: "remote", Tool: "hang", Digest: digestOf(t, tools, "hang")})
		callErr <- err
	}()
	<-started
	act := e.m.leaseOf("s1", "remote").activation
	const budget = 3 * time.Second
	// Within its budget without a clock: the hanging body, had the close
	// not aborted it, would keep the http_requests barrier from OK.
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Activation: act}, budget)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-callErr; err == nil {
		t.Fatal("the hanging call succeeded")
	}
	if !rep.Confirmed() || rep.Obligations[3].Outcome != events.BarrierOK {
		t.Fatalf("report %+v", rep)
	}
	completed, _ := checkHTTPEvidence(t, httpPayloads(e.events(), act))
	aborted := 0
	for _, p := range completed {
		if p.Outcome == events.HTTPAborted {
			aborted++
		}
	}
	if aborted == 0 {
		t.Fatalf("no aborted request among %d", len(completed))
	}
}

// TestHTTP10000Calls: 10,000 calls on one HTTP lease; the projector keeps
// exactly 64 recent receipts and exact confirmed_history aggregates for
// the rest, and the evidence state stays under 1 MiB.
func TestHTTP10000Calls(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 calls")
	}
	e := newEnv(t, nil)
	endpoint, _ := goSDKHTTP(t)
	e.cfg.Set("remote", ServerConfig{URL: endpoint})
	ctx := ctxT(t, 5*time.Minute)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	req := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}
	const calls, workers = 10000, 16
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= calls {
				if res, err := capa.Call(ctx, req); err != nil || res.IsError {
					failed.Store(errors.Join(err, errors.New("call failed")))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	act := e.m.leaseOf("s1", "remote").activation
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Activation: act}, 0)
	if err != nil || !rep.Confirmed() {
		t.Fatalf("close %+v %v", rep, err)
	}
	st := projector.New()
	registered := 0
	for env, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		if env.Activation == act && env.Kind == "http.registered" {
			registered++
		}
		if err := st.Apply(&env); err != nil {
			t.Fatal(err)
		}
	}
	if registered < calls {
		t.Fatalf("%d requests registered for %d calls", registered, calls)
	}
	a, _ := st.Activation(act)
	c := a.Evidence.Counts()
	if c.Recent != projector.RecentReceipts || c.Confirmed != uint64(registered) || c.Resources != c.Confirmed {
		t.Fatalf("counts %+v for %d registered", c, registered)
	}
	var agg uint64
	for _, r := range a.Evidence.Aggregates(act) {
		agg += r.Evidence.ConfirmedCount
	}
	if agg != uint64(registered)-projector.RecentReceipts || a.Evidence.ConfirmedCount(scopeRequest) < calls {
		t.Fatalf("aggregates %d, request scope %d, registered %d", agg, a.Evidence.ConfirmedCount(scopeRequest), registered)
	}
	if v, reasons, _ := st.Verdict(act); v != projector.ResultConfirmed {
		t.Fatalf("verdict %s %v", v, reasons)
	}
	snap, err := projector.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) >= 1<<20 {
		t.Fatalf("snapshot %d bytes", len(snap))
	}
	t.Logf("%d calls, %d requests registered, snapshot %d bytes", calls, registered, len(snap))
}
