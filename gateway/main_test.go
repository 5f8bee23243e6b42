//go:build linux

package gateway

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Binaries built once by TestMain: the guardian helper and the runtime's
// go-sdk test server.
var (
	helperBin     = &testproc.Binary{Out: guardian.HelperName, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger-guardian"}
	testserverBin = &testproc.Binary{Out: "testserver", Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"}
)

// everythingPath is where `npm ci` installs @modelcontextprotocol/server-everything.
var everythingPath string

func TestMain(m *testing.M) {
	if wd, err := os.Getwd(); err == nil {
		everythingPath = filepath.Join(filepath.Dir(wd), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	}
	testproc.Main(m, helperBin, testserverBin)
}

// BuiltBinaries returns the guardian helper and test server TestMain
// built, for the examples.
func BuiltBinaries() (helper, testserver string) { return helperBin.Out, testserverBin.Out }

// everything is server-everything over stdio; it fails (never skips) when
// the npm package is missing.
func everything(t testing.TB) runtime.ServerConfig {
	t.Helper()
	if _, err := os.Stat(everythingPath); err != nil {
		t.Fatalf("server-everything not installed at %s (run `npm ci`): %v", everythingPath, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not on PATH: %v", err)
	}
	return runtime.ServerConfig{Command: node, Args: []string{everythingPath, "stdio"}}
}

func testServer(env map[string]string) runtime.ServerConfig {
	return runtime.ServerConfig{Command: testserverBin.Out, Env: env}
}

// env is one test's ledger, manager, gateway and HTTP server.
type env struct {
	t      *testing.T
	l      *ledger.Ledger
	m      *runtime.Manager
	g      *Gateway
	srv    *httptest.Server
	tokens *Tokens
	file   string            // the token file
	plain  map[string]string // token name → plain token
	cfg    *runtime.MapConfigSource
}

// server is one configured server of a test.
type server struct {
	name string
	cfg  runtime.ServerConfig
}

// newEnv starts a gateway over servers with the tokens named (none: no
// tokens), under a fresh ledger and manager; tweak adjusts the options.
func newEnv(t *testing.T, servers []server, tokenNames []string, tweak func(*Options, *runtime.Options)) *env {
	t.Helper()
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: filepath.Join(dir, "ledger")})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, l: l, plain: map[string]string{}}
	cfg := &runtime.MapConfigSource{}
	e.cfg = cfg
	var names []string
	for _, s := range servers {
		if err := cfg.Set(s.name, s.cfg); err != nil {
			t.Fatal(err)
		}
		names = append(names, s.name)
	}
	ropts := runtime.Options{Config: cfg, Ledger: l, HelperPath: helperBin.Out,
		EOFGrace: time.Second, TermGrace: 500 * time.Millisecond, KillGrace: time.Second, PipeGrace: 200 * time.Millisecond}
	gopts := Options{Servers: names}
	if len(tokenNames) > 0 {
		e.file = filepath.Join(dir, "tokens")
		var b strings.Builder
		for _, n := range tokenNames {
			p, err := NewToken()
			if err != nil {
				t.Fatal(err)
			}
			e.plain[n] = p
			b.WriteString(TokenLine(n, HashToken(p)) + "\n")
		}
		if err := os.WriteFile(e.file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		if e.tokens, err = LoadTokens(e.file); err != nil {
			t.Fatal(err)
		}
		gopts.Tokens = e.tokens
	}
	if tweak != nil {
		tweak(&gopts, &ropts)
	}
	if e.m, err = runtime.NewManager(ropts); err != nil {
		t.Fatal(err)
	}
	gopts.Manager = e.m
	if e.g, err = New(gopts); err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.g.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The gateway first: ending its sessions ends their streams, so
		// the HTTP server's Close does not wait for open clients.
		if err := e.g.Close(ctx); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
		e.srv.Close()
		if err := e.m.Close(ctx); err != nil {
			t.Errorf("manager Close: %v", err)
		}
		if kids := testproc.ChildrenOf(os.Getpid()); len(kids) > 0 {
			t.Errorf("child processes remain after Close: %v", kids)
		}
		e.audit()
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// headers adds a bearer token and an Origin to every request.
type headers struct {
	token, origin string
	base          http.RoundTripper
}

func (h *headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	if h.origin != "" {
		r.Header.Set("Origin", h.origin)
	}
	return h.base.RoundTrip(r)
}

// progressLog collects a client's progress notifications.
type progressLog struct {
	mu  sync.Mutex
	got []*mcp.ProgressNotificationParams
	n   atomic.Int32
}

func (p *progressLog) add(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.got = append(p.got, r.Params)
	p.mu.Unlock()
	p.n.Add(1)
}

func (p *progressLog) reset() {
	p.mu.Lock()
	p.got = nil
	p.n.Store(0)
	p.mu.Unlock()
}

// connect opens an MCP session with go-sdk's client as token's holder
// ("" without a token).
func (e *env) connect(ctx context.Context, token string, prog *progressLog) (*mcp.ClientSession, error) {
	opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}
	if prog != nil {
		opts.ProgressNotificationHandler = prog.add
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "0"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: e.srv.URL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &headers{token: token, base: e.srv.Client().Transport}}}
	return c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

func (e *env) mustConnect(ctx context.Context, token string, prog *progressLog) *mcp.ClientSession {
	e.t.Helper()
	cs, err := e.connect(ctx, token, prog)
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	return cs
}

// initBody is a raw initialize request.
const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// post sends a raw MCP POST with the given headers and returns the status.
func (e *env) post(body string, hdr map[string]string) (int, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, bytes.NewReader([]byte(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sink bytes.Buffer
	_, _ = sink.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header
}

// postBody sends a raw MCP POST with the given headers and returns its
// body (a JSON answer or the whole event stream).
func (e *env) postBody(body string, hdr map[string]string) string {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, bytes.NewReader([]byte(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}

// envelopes reads the whole ledger.
func (e *env) envelopes() []events.Envelope {
	e.t.Helper()
	var out []events.Envelope
	for x, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}

// count counts the ledger's events of kind matching pred (nil: all).
func (e *env) count(kind events.Kind, pred func(events.Envelope, events.Payload) bool) int {
	e.t.Helper()
	n := 0
	for _, x := range e.envelopes() {
		if x.Kind != kind {
			continue
		}
		p, err := x.Payload()
		if err != nil {
			e.t.Fatal(err)
		}
		if pred == nil || pred(x, p) {
			n++
		}
	}
	return n
}

// audit replays the ledger through the projector: every activation that
// started a guardian is confirmed, every other never started, no lease
// left live, every opened session ended.
func (e *env) audit() {
	t := e.t
	t.Helper()
	st := projector.New()
	started := map[string]bool{}
	opened, ended := map[string]bool{}, map[string]bool{}
	envs := e.envelopes()
	for i := range envs {
		x := &envs[i]
		switch x.Kind {
		case "guardian.started":
			started[x.Activation] = true
		case "session.opened":
			opened[x.Session] = true
		case "session.ended":
			ended[x.Session] = true
		}
		if err := st.Apply(x); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range st.ActivationIDs() {
		v, reasons, _ := st.Verdict(a)
		if started[a] && v != projector.ResultConfirmed || !started[a] && v != projector.ResultNeverStarted && v != projector.ResultConfirmed {
			t.Errorf("activation %s: audit verdict %s: %v", a, v, reasons)
		}
	}
	for _, l := range st.Leases() {
		if l.Live() {
			t.Errorf("lease %s still %s after Close", l.Key(), l.State)
		}
	}
	for s := range opened {
		if !ended[s] {
			t.Errorf("session %s opened, never ended", s)
		}
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
