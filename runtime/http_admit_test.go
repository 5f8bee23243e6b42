//go:build linux

package runtime

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// admitServer serves a tool "look" over Streamable HTTP that reports, when
// called, whether the ledger already holds the call.admitted of a call of
// it (each call counted).
func admitServer(t *testing.T, l *ledger.Ledger) (url string, calls *atomic.Int32, unadmitted *atomic.Int32) {
	t.Helper()
	calls, unadmitted = &atomic.Int32{}, &atomic.Int32{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "admit", Version: "0"}, nil)
	var mu sync.Mutex
	seen := 0
	mcp.AddTool(srv, &mcp.Tool{Name: "look"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		admitted := 0
		for env, err := range l.Events(ctx, ledger.Query{}) {
			if err != nil {
				return nil, nil, err
			}
			if env.Kind == "call.admitted" {
				admitted++
			}
		}
		// Calls are sequential: this one's admission is the newest.
		seen++
		if admitted < seen {
			unadmitted.Add(1)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		// A lease whose ledger failed cannot close its session: the
		// server's sessions are ended here.
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL + "/mcp", calls, unadmitted
}

// admitSession opens session s1 of e on admitServer's tool "look" (server
// "remote") and returns it with a request calling it, and the server's
// counters.
func admitSession(t *testing.T, e *env) (ctx context.Context, s *SessionScope, req CallRequest, calls, unadmitted *atomic.Int32) {
	t.Helper()
	url, calls, unadmitted := admitServer(t, e.l)
	e.cfg.Set("remote", ServerConfig{Type: "http", URL: url})
	ctx = ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	return ctx, s, CallRequest{Server: "remote", Tool: "look", Digest: digestOf(t, tools, "look")}, calls, unadmitted
}

// An HTTP lease's call.admitted is deferred, not awaited, before the
// call's request, whose registration (http.registered, carrying it in
// front) is awaited: ack means durable for both, so the server never
// receives a call whose admission is not in the ledger.
func TestHTTPAdmissionDurableBeforeRequest(t *testing.T) {
	e := newEnv(t, nil)
	ctx, s, req, calls, unadmitted := admitSession(t, e)
	defer s.Release(ctx)
	for range 20 {
		if _, err := s.Capability().Call(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != 20 || unadmitted.Load() != 0 {
		t.Fatalf("%d calls reached the server, %d before their admission was durable", calls.Load(), unadmitted.Load())
	}
}

// failingLedger fails the append that carries a call.admitted and, like
// the ledger (a failed append fails every later one), every append after
// it.
type failingLedger struct {
	*ledger.Ledger
	failed atomic.Bool
}

var errLedgerBroke = errors.New("test: the ledger failed")

func (f *failingLedger) AppendPreparedAsync(ctx context.Context, prepared ...events.Prepared) (func(context.Context) ([]events.Seq, error), error) {
	for _, p := range prepared {
		if p.Kind == "call.admitted" {
			f.failed.Store(true)
		}
	}
	if f.failed.Load() {
		return func(context.Context) ([]events.Seq, error) { return nil, errLedgerBroke }, nil
	}
	return f.Ledger.AppendPreparedAsync(ctx, prepared...)
}

// An HTTP call whose deferred admission failed is never sent (its
// registration fails after it) and fails with ErrLedger.
func TestHTTPAdmissionFailedNothingSent(t *testing.T) {
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingLedger{Ledger: l}
	cfg := &MapConfigSource{}
	m, err := NewManager(Options{Config: cfg, Ledger: fl, HelperPath: helperBin.Out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.Close(ctx) // its records fail: the ledger failed
		_ = l.Close()
	})
	e := &env{t: t, m: m, l: l, cfg: cfg}
	ctx, s, req, calls, _ := admitSession(t, e)
	_, err = s.Capability().Call(ctx, req)
	if !errors.Is(err, ErrLedger) {
		t.Fatalf("call on a failed ledger: %v", err)
	}
	if !fl.failed.Load() || calls.Load() != 0 {
		t.Fatalf("failed %v; %d calls reached the server", fl.failed.Load(), calls.Load())
	}
	_ = s.Release(ctx)
}

// settleKinds are the facts the cleanup worker appends for a request.
var settleKinds = map[string]bool{"http.completed": true, "http.barrier": true, "http.worker_down": true}

// A call's admission rides its request's registration, and a request's
// settle facts the manager's next append (a sequential caller's next
// registration), instead of commits of their own; and a
// close neither waits for the linger nor loses them: with the linger at an
// hour, no append before the close holds settle facts alone, every request
// is settled in the log, and the close's http_requests barrier is OK.
func TestHTTPFactsRideRegistrations(t *testing.T) {
	var rl *recordingLedger
	e := newEnv(t, func(o *Options) {
		rl = &recordingLedger{Ledger: o.Ledger.(*ledger.Ledger)}
		o.Ledger = rl
	})
	e.m.deferred.linger = time.Hour // only a later append, or the close, carries them
	ctx, s, req, _, _ := admitSession(t, e)
	const calls = 10
	for range calls {
		if _, err := s.Capability().Call(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	act := e.m.leaseOf("s1", "remote").activation
	rl.mu.Lock()
	beforeClose := len(rl.appends)
	rl.mu.Unlock()
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Activation: act}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed() || rep.Obligations[3].Outcome != events.BarrierOK {
		t.Fatalf("report %+v", rep)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rl.mu.Lock()
	carried, admissions := 0, 0
	for _, a := range rl.appends {
		if slices.Contains(a, "call.admitted") {
			admissions++
			if !slices.Contains(a, "http.registered") {
				t.Errorf("an admission not carried by a registration: %v", a)
			}
		}
	}
	if admissions != calls {
		t.Errorf("%d appends carried an admission, want one per call (%d)", admissions, calls)
	}
	// The close flushes what is still deferred (the last call's facts)
	// and appends the session DELETE's at once: only the appends before
	// it must carry settle facts with other events.
	for _, a := range rl.appends[:beforeClose] {
		alone := true
		settles := 0
		for _, k := range a {
			if settleKinds[k] {
				settles++
			} else {
				alone = false
			}
		}
		if settles > 0 && alone {
			t.Errorf("an append of settle facts alone: %v", a)
		}
		if settles > 0 {
			carried++
		}
	}
	rl.mu.Unlock()
	if carried == 0 {
		t.Fatal("no append carried settle facts")
	}
	completed, _ := checkHTTPEvidence(t, httpPayloads(e.events(), act))
	if len(completed) < calls {
		t.Fatalf("%d requests completed in the log, want at least the %d calls", len(completed), calls)
	}
}
