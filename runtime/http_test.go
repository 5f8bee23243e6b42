//go:build linux

package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// everythingHTTP starts server-everything in its Streamable HTTP mode on a
// free loopback port and returns its MCP endpoint; the process is killed
// and reaped when the test ends.
func everythingHTTP(t testing.TB) string {
	t.Helper()
	endpoint, _ := everythingHTTPProc(t)
	return endpoint
}

// everythingHTTPProc is everythingHTTP that also returns the process.
func everythingHTTPProc(t testing.TB) (string, *exec.Cmd) {
	t.Helper()
	entry := everything(t) // fails when node or the package is missing
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(entry.Command, entry.Args[0], "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything (streamableHttp) not listening on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr + "/mcp", cmd
}

func TestHTTPConfig(t *testing.T) {
	doc := `{"mcpServers":{"remote":{"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer x"}},"local":{"command":"node"}}}`
	all, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := all["remote"]
	if !r.isHTTP() || r.Headers["Authorization"] != "Bearer x" || all["local"].isHTTP() {
		t.Fatalf("parsed %+v", all)
	}
	// Headers and url are fingerprinted; a stdio entry's fingerprint does
	// not mention them (unchanged from before HTTP entries existed).
	other := r
	other.Headers = map[string]string{"Authorization": "Bearer y"}
	if other.Fingerprint(testFPKey) == r.Fingerprint(testFPKey) {
		t.Fatal("headers not fingerprinted")
	}
	other = r
	other.URL = "https://mcp.example.com/other"
	if other.Fingerprint(testFPKey) == r.Fingerprint(testFPKey) {
		t.Fatal("url not fingerprinted")
	}
	// The legacy SSE transport is another launch of the same url; "http"
	// and its spellings are one.
	other = r
	other.Type = "sse"
	if other.Fingerprint(testFPKey) == r.Fingerprint(testFPKey) {
		t.Fatal("type sse not fingerprinted")
	}
	other.Type = "streamable-http"
	if other.Fingerprint(testFPKey) != r.Fingerprint(testFPKey) {
		t.Fatal("a spelling of http changed the fingerprint")
	}
	if c := string(r.canonical()); strings.Contains(c, "sse") {
		t.Fatalf("http canonical form changed: %s", c)
	}
	if c := string(all["local"].canonical()); strings.Contains(c, "url") || strings.Contains(c, "headers") {
		t.Fatalf("stdio canonical form changed: %s", c)
	}
	for _, bad := range []string{
		`{"mcpServers":{"x":{"url":"ftp://h/mcp"}}}`,
		`{"mcpServers":{"x":{"url":"/relative"}}}`,
		`{"mcpServers":{"x":{"url":"http://%zz"}}}`,
		`{"mcpServers":{"x":{"url":"http://user:pw@h/mcp"}}}`,
		`{"mcpServers":{"x":{"url":"http://h/mcp","command":"node"}}}`,
		`{"mcpServers":{"x":{"url":"http://h/mcp","type":"websocket"}}}`,
		`{"mcpServers":{"x":{"command":"node","type":"sse"}}}`,
		`{"mcpServers":{"x":{"url":"http://h/mcp","headers":{"Bad Name":"v"}}}}`,
		`{"mcpServers":{"x":{"url":"http://h/mcp","headers":{"A":"v\r\nB: w"}}}}`,
		`{"mcpServers":{"x":{}}}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	// A bad entry installed another way is refused at lookup.
	e := newEnv(t, nil)
	e.cfg.Set("bad", ServerConfig{URL: "gopher://h/"})
	ctx := ctxT(t, 10*time.Second)
	s, err := e.m.OpenSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	if _, err := s.Capability().Tools(ctx, "bad"); !errors.Is(err, ErrConfigInvalid) {
		t.Fatalf("bad url: %v", err)
	}
}

// TestHTTPEverything runs server-everything over Streamable HTTP through a
// lease: listing, calls through the gate and digest check, a poisoned
// digest, and a confirmed close with the HTTP facts.
func TestHTTPEverything(t *testing.T) {
	e := newEnv(t, nil)
	endpoint := everythingHTTP(t) // after newEnv: killed and reaped before its leak check
	e.cfg.Set("remote", ServerConfig{Type: "http", URL: endpoint, Headers: map[string]string{"X-Lease-Test": "1"}})
	ctx := ctxT(t, 60*time.Second)
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
	digest := digestOf(t, tools, "echo")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := capa.Call(ctx, CallRequest{Server: "remote", Tool: "echo", Digest: digest, Arguments: map[string]any{"message": "hi"}})
			if err == nil && res.IsError {
				err = errors.New("tool error")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l := e.m.leaseOf("s1", "remote")
	if l == nil || l.wire.toolsCalls.Load() != 16 {
		t.Fatalf("lease %v", l)
	}
	act := l.activation
	rep, err := e.m.CloseConnection(ctx, ConnectionRef{Activation: act}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Confirmed() {
		t.Fatalf("close report %+v", rep)
	}
	if rep.Obligations[2].Detail != "no_local_process" {
		t.Fatalf("supervisor %+v", rep.Obligations[2])
	}
	evs := e.events()
	if n := count(evs, "connection.opened", func(x ev) bool {
		return x.Activation == act && x.Payload.(*events.ConnectionOpened).Transport == events.TransportHTTP
	}); n != 1 {
		t.Fatalf("connection.opened{http}: %d", n)
	}
	if n := count(evs, "guardian.started", nil) + count(evs, "lease.child_started", nil); n != 0 {
		t.Fatalf("guardian facts for an HTTP lease: %d", n)
	}
	// A wrong digest poisons the HTTP lease like a stdio one, nothing sent.
	bad := strings.Repeat("0", 64)
	if _, err := capa.Call(ctx, CallRequest{Server: "remote", Tool: "echo", Digest: bad, Arguments: map[string]any{"message": "x"}}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("digest mismatch: %v", err)
	}
}

// hopServer is the redirecting proxy of the redirect tests: /r/<n>/<rest>
// answers 307 to /r/<n-1>/<rest> (relative Location when rel, absolute
// otherwise), /r/0/<rest> is proxied to target (when set) or answered with
// the method and body it got; /s/<code> answers that status with a
// Location to /r/0/. It records every request's path and headers.
type hopServer struct {
	srv    *httptest.Server
	target *url.URL
	rel    bool
	mu     sync.Mutex
	seen   []seenReq
}

type seenReq struct {
	method string
	path   string
	header http.Header
}

func newHopServer(t *testing.T, target string) *hopServer {
	h := &hopServer{}
	var proxy *httputil.ReverseProxy
	if target != "" {
		h.target, _ = url.Parse(target)
		proxy = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.URL.Path = h.target.Scheme, h.target.Host, h.target.Path
			r.Out.Host = h.target.Host
		}, FlushInterval: -1}
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, seenReq{r.Method, r.URL.Path, r.Header.Clone()})
		h.mu.Unlock()
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
		switch {
		case len(parts) >= 2 && parts[0] == "s":
			code, _ := strconv.Atoi(parts[1])
			w.Header().Set("Location", "/r/0/x")
			w.WriteHeader(code)
		case len(parts) >= 2 && parts[0] == "r" && parts[1] != "0":
			n, _ := strconv.Atoi(parts[1])
			rest := ""
			if len(parts) == 3 {
				rest = parts[2]
			}
			loc := "/r/" + strconv.Itoa(n-1) + "/" + rest
			if h.rel {
				loc = "../" + strconv.Itoa(n-1) + "/" + rest
			} else {
				loc = h.srv.URL + loc
			}
			w.Header().Set("Location", loc)
			w.WriteHeader(http.StatusTemporaryRedirect)
		case proxy != nil:
			proxy.ServeHTTP(w, r)
		default:
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, r.Method+" "+string(b))
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hopServer) requests() []seenReq {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]seenReq(nil), h.seen...)
}

// leaseClient is the client an HTTP lease for endpoint would use.
func leaseClient(t *testing.T, b *httpBoundary, endpoint string, headers map[string]string) *http.Client {
	u, err := checkEndpoint(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return b.clientFor(newLeaseRoundTripper(b, u, headers, nil))
}

func TestHTTPRedirects(t *testing.T) {
	b := newHTTPBoundary(httpTimeouts{time.Second, 5 * time.Second, 10 * time.Second})
	defer b.close()
	hdr := map[string]string{"Authorization": "Bearer secret"}
	post := func(c *http.Client, u string) (string, error) {
		resp, err := c.Post(u, "text/plain", strings.NewReader("payload"))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body), nil
	}
	for _, rel := range []bool{false, true} {
		for _, hops := range []int{1, 3} {
			h := newHopServer(t, "")
			h.rel = rel
			u := h.srv.URL + "/r/" + strconv.Itoa(hops) + "/end"
			got, err := post(leaseClient(t, b, u, hdr), u)
			if err != nil || got != "POST payload" {
				t.Fatalf("rel=%v hops=%d: %q %v", rel, hops, got, err)
			}
			seen := h.requests()
			if len(seen) != hops+1 {
				t.Fatalf("rel=%v hops=%d: %d requests", rel, hops, len(seen))
			}
			for _, s := range seen {
				if s.header.Get("Authorization") != "Bearer secret" {
					t.Fatalf("same-origin hop %s without the configured header", s.path)
				}
			}
		}
	}
	// A fourth hop fails before the fourth redirect's target is asked.
	h := newHopServer(t, "")
	u := h.srv.URL + "/r/4/end"
	if _, err := post(leaseClient(t, b, u, hdr), u); !errors.Is(err, ErrHTTPTooManyRedirects) {
		t.Fatalf("4 hops: %v", err)
	}
	if n := len(h.requests()); n != 4 {
		t.Fatalf("4 hops: %d requests reached the server, want 4 (the fourth hop's target never)", n)
	}
	// Any redirect status but 307 fails before its target is asked.
	for _, code := range []int{301, 302, 303, 308} {
		h := newHopServer(t, "")
		u := h.srv.URL + "/s/" + strconv.Itoa(code)
		if _, err := post(leaseClient(t, b, u, hdr), u); !errors.Is(err, ErrHTTPRedirect) {
			t.Fatalf("%d: %v", code, err)
		}
		if n := len(h.requests()); n != 1 {
			t.Fatalf("%d: %d requests", code, n)
		}
	}
	// A cross-origin hop is refused: the other origin never sees a request,
	// let alone the configured header.
	other := newHopServer(t, "")
	h = newHopServer(t, "")
	cross := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", other.srv.URL+"/r/0/x")
		w.WriteHeader(http.StatusTemporaryRedirect)
	}))
	defer cross.Close()
	if _, err := post(leaseClient(t, b, cross.URL+"/mcp", hdr), cross.URL+"/mcp"); !errors.Is(err, ErrHTTPCrossOrigin) {
		t.Fatalf("cross-origin: %v", err)
	}
	if n := len(other.requests()); n != 0 {
		t.Fatalf("cross-origin target got %d requests", n)
	}
	// Configured headers never go to another origin even when the request
	// itself is sent there (a client of one endpoint used for another URL).
	_, err := post(leaseClient(t, b, cross.URL+"/mcp", hdr), h.srv.URL+"/r/0/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range h.requests() {
		if s.header.Get("Authorization") != "" {
			t.Fatal("configured header sent to another origin")
		}
	}
	// A bad Location is a typed error.
	badLoc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "gopher://x/")
		w.WriteHeader(http.StatusTemporaryRedirect)
	}))
	defer badLoc.Close()
	if _, err := post(leaseClient(t, b, badLoc.URL, hdr), badLoc.URL); !errors.Is(err, ErrHTTPBadLocation) {
		t.Fatalf("bad location: %v", err)
	}
}

// TestHTTPEverythingBehindRedirects runs an MCP lease whose endpoint
// answers with 3 hops (every request: the POSTs, the standalone GET
// stream and the session DELETE) before the proxied server; the proxy sees the
// configured header on every hop, the DELETE's included (checked after
// the release that sends it). An endpoint that redirects 4 times fails
// the acquisition.
func TestHTTPEverythingBehindRedirects(t *testing.T) {
	e := newEnv(t, nil)
	endpoint := everythingHTTP(t) // after newEnv: killed and reaped before its leak check
	h := newHopServer(t, endpoint)
	e.cfg.Set("hop3", ServerConfig{URL: h.srv.URL + "/r/3/mcp", Headers: map[string]string{"Authorization": "Bearer t"}})
	e.cfg.Set("hop4", ServerConfig{URL: h.srv.URL + "/r/4/mcp"})
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "hop3")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Capability().Call(ctx, CallRequest{Server: "hop3", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"message": "hi"}})
	if err != nil || res.IsError {
		t.Fatalf("call behind 3 hops: %v", err)
	}
	n := len(h.requests())
	if _, err := s.Capability().Tools(ctx, "hop4"); !errors.Is(err, ErrInitialize) {
		t.Fatalf("4 hops: %v", err)
	}
	if got := len(h.requests()) - n; got != 4 {
		t.Fatalf("4 hops: %d requests, want 4", got)
	}
	act := e.m.leaseOf("s1", "hop3").activation
	s.Release(ctx) // the hop3 lease closes (its session DELETE sent): its evidence is complete
	methods := map[string]int{}
	all := h.requests()
	for _, r := range append(all[:n:n], all[n+4:]...) { // without hop4's 4
		methods[r.method]++
		if r.header.Get("Authorization") != "Bearer t" {
			t.Fatalf("%s hop %s without the configured header", r.method, r.path)
		}
	}
	t.Logf("requests seen through the hops: %v", methods)
	if methods[http.MethodDelete] != 4 {
		t.Fatalf("the session DELETE was not seen on each of its 4 hops: %v", methods)
	}
	completed, hops := checkHTTPEvidence(t, httpPayloads(e.events(), act))
	if hops != 3*len(completed) {
		t.Fatalf("%d hops for %d requests, want 3 each", hops, len(completed))
	}
}

// recorder is an in-memory emitter for boundary tests with evidence.
type recorder struct {
	mu sync.Mutex
	ps []events.Payload
}

func (r *recorder) emit(_ context.Context, ds ...events.Draft) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range ds {
		if err := d.Payload.Validate(); err != nil {
			return err
		}
		r.ps = append(r.ps, d.Payload)
	}
	return nil
}

func (r *recorder) payloads() []events.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]events.Payload(nil), r.ps...)
}

func draftOf(p events.Payload) events.Draft {
	return events.Draft{Activation: "act-test", Session: "s", Server: "x", Payload: p}
}

// checkHTTPEvidence checks one activation's http.* facts: every ref is
// registered before any other fact about it, and ends with exactly one
// completion, one ok barrier and one worker end; every hop has its own
// ok barrier after its redirect.
func checkHTTPEvidence(t *testing.T, ps []events.Payload) (completed map[string]*events.HTTPCompleted, hops int) {
	t.Helper()
	reg := map[string]bool{}
	hopSeen := map[string]bool{}
	barriers := map[string]int{}
	down := map[string]int{}
	completed = map[string]*events.HTTPCompleted{}
	for _, p := range ps {
		switch p := p.(type) {
		case *events.HTTPRegistered:
			if reg[p.Ref] {
				t.Fatalf("%s registered twice", p.Ref)
			}
			reg[p.Ref] = true
		case *events.HTTPRedirect:
			if !reg[p.Ref] {
				t.Fatalf("hop of unregistered %s", p.Ref)
			}
			hopSeen[p.HopRef] = true
			hops++
		case *events.HTTPCompleted:
			if !reg[p.Ref] || completed[p.Ref] != nil {
				t.Fatalf("completion of %s: registered %v, twice %v", p.Ref, reg[p.Ref], completed[p.Ref] != nil)
			}
			completed[p.Ref] = p
		case *events.HTTPBarrier:
			if !reg[p.Ref] && !hopSeen[p.Ref] {
				t.Fatalf("barrier of untracked %s", p.Ref)
			}
			if p.Outcome != events.HTTPBarrierOK {
				t.Fatalf("barrier %s: %s", p.Ref, p.Outcome)
			}
			barriers[p.Ref]++
		case *events.HTTPWorkerDown:
			down[p.Ref]++
		}
	}
	for ref := range reg {
		if completed[ref] == nil || barriers[ref] != 1 || down[ref] != 1 {
			t.Fatalf("%s: completed %v, %d barriers, %d worker ends", ref, completed[ref] != nil, barriers[ref], down[ref])
		}
	}
	for ref := range hopSeen {
		if barriers[ref] != 1 {
			t.Fatalf("hop %s: %d barriers", ref, barriers[ref])
		}
	}
	return completed, hops
}

func httpPayloads(evs []ev, act string) []events.Payload {
	var out []events.Payload
	for _, x := range evs {
		if x.Activation == act && strings.HasPrefix(string(x.Kind), "http.") {
			out = append(out, x.Payload)
		}
	}
	return out
}

// TestHTTPTimeouts: each of the three timeouts fires in its own case, as
// its typed error and a recorded http.completed{timeout, detail}, with
// its barrier.
func TestHTTPTimeouts(t *testing.T) {
	quit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // lets the server notice the client's close
		switch r.URL.Path {
		case "/silent": // never answers
			select {
			case <-r.Context().Done():
			case <-quit:
			}
		case "/stall": // answers, sends a byte, then nothing
			w.WriteHeader(200)
			io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-quit:
			}
		case "/trickle": // a byte every 20ms, forever
			w.WriteHeader(200)
			for {
				if _, err := io.WriteString(w, "x"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-quit:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}))
	defer srv.Close()
	defer close(quit)
	for _, c := range []struct {
		path   string
		want   error
		detail string
	}{
		{"/connect", ErrHTTPConnectTimeout, "connect_timeout"},
		{"/silent", ErrHTTPReceiveTimeout, "receive_timeout"},
		{"/stall", ErrHTTPReceiveTimeout, "receive_timeout"},
		{"/trickle", ErrHTTPRequestTimeout, "request_timeout"},
	} {
		t.Run(c.path[1:], func(t *testing.T) {
			b := newHTTPBoundary(httpTimeouts{connect: 100 * time.Millisecond, receive: 200 * time.Millisecond, request: 500 * time.Millisecond})
			defer b.close()
			if c.path == "/connect" {
				// A dial that never completes (a peer that never answers
				// the SYN), on loopback.
				b.dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
					<-ctx.Done()
					return nil, ctx.Err()
				}
			}
			rec := &recorder{}
			ev := newHTTPEvidence(rec.emit, draftOf)
			u, _ := checkEndpoint(srv.URL + "/")
			client := b.clientFor(newLeaseRoundTripper(b, u, nil, ev))
			// The typed error names the bound that ended the request;
			// without it the server would hold the request until quit.
			resp, err := client.Post(srv.URL+c.path, "text/plain", strings.NewReader("{}"))
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if out, detail, _ := ev.finish(time.Now().Add(5 * time.Second)); out != events.BarrierOK {
				t.Fatalf("finish %s %s", out, detail)
			}
			completed, _ := checkHTTPEvidence(t, rec.payloads())
			if len(completed) != 1 {
				t.Fatalf("%d completions", len(completed))
			}
			for _, p := range completed {
				if p.Outcome != events.HTTPTimeout || p.Detail != c.detail {
					t.Fatalf("completed %+v", p)
				}
			}
		})
	}
}

// TestHTTPServerKilledMidCall: the server dies while a call's response
// stream is open. The call fails (a transport error, the lease ends), every
// request the lease made is settled and recorded, and the close report and
// the audit agree (newEnv's cleanup audits the projector's verdict).
func TestHTTPServerKilledMidCall(t *testing.T) {
	e := newEnv(t, nil)
	endpoint, cmd := everythingHTTPProc(t)
	e.cfg.Set("remote", ServerConfig{URL: endpoint})
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "remote")
	act := l.activation
	callErr := make(chan error, 1)
	go func() {
		_, err := s.Capability().Call(ctx, CallRequest{Server: "remote", Tool: "trigger-long-running-operation",
			Digest: digestOf(t, tools, "trigger-long-running-operation"), Arguments: map[string]any{"duration": 30, "steps": 30}})
		callErr <- err
	}()
	ev := l.child.(*httpChild).ev
	testproc.Eventually(t, "the call's response stream open", func() bool { return liveBodies(ev) >= 1 })
	_ = cmd.Process.Kill()
	select {
	case err := <-callErr:
		if !errors.Is(err, ErrCallFailed) {
			t.Fatalf("call after the kill: %v", err)
		}
	case <-time.After(testproc.HangBound):
		t.Fatal("call did not fail after the server died")
	}
	testproc.Eventually(t, "the connection closed", func() bool {
		r, ok := e.m.ConnectionStatus(act)
		return ok && r.Phase == ConnectionClosed
	})
	rep, _ := e.m.ConnectionStatus(act)
	if rep.Obligations[3].Outcome != events.BarrierOK {
		t.Fatalf("http_requests %+v", rep.Obligations[3])
	}
	completed, _ := checkHTTPEvidence(t, httpPayloads(e.events(), act))
	failed := 0
	for _, p := range completed {
		if p.Outcome != events.HTTPOK {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no request recorded as failed after the kill")
	}
}

// TestHTTPOversizeResponse: a response body beyond MaxHTTPResponseBytes is
// aborted as ErrHTTPResponseTooLarge and recorded (response_too_large).
func TestHTTPOversizeResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		chunk := make([]byte, 1<<20)
		for range MaxHTTPResponseBytes>>20 + 2 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	b := newHTTPBoundary(httpTimeouts{time.Second, 5 * time.Second, 10 * time.Second})
	defer b.close()
	rec := &recorder{}
	ev := newHTTPEvidence(rec.emit, draftOf)
	u, _ := checkEndpoint(srv.URL + "/")
	client := b.clientFor(newLeaseRoundTripper(b, u, nil, ev))
	resp, err := client.Post(srv.URL+"/big", "text/plain", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !errors.Is(err, ErrHTTPResponseTooLarge) || n > MaxHTTPResponseBytes {
		t.Fatalf("read %d bytes, err %v", n, err)
	}
	if out, detail, _ := ev.finish(time.Now().Add(5 * time.Second)); out != events.BarrierOK {
		t.Fatalf("finish %s %s", out, detail)
	}
	completed, _ := checkHTTPEvidence(t, rec.payloads())
	for _, p := range completed {
		if p.Outcome != events.HTTPError || p.Detail != "response_too_large" {
			t.Fatalf("completed %+v", p)
		}
	}
}
