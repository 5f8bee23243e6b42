//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// TestHTTPAllowRedirectOriginsConfig: allowRedirectOrigins parses, is
// fingerprinted (normalised: order, case and a default port do not
// matter), and a malformed entry is refused at load with an error
// matching ErrConfigInvalid (and at lookup when installed another way).
func TestHTTPAllowRedirectOriginsConfig(t *testing.T) {
	doc := `{"mcpServers":{"r":{"url":"https://a.example/mcp","allowRedirectOrigins":["https://Other.example:8443","http://b.example"]}}}`
	all, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := all["r"]
	if len(r.AllowRedirectOrigins) != 2 {
		t.Fatalf("parsed %+v", r)
	}
	plain := r
	plain.AllowRedirectOrigins = nil
	if plain.Fingerprint(testFPKey) == r.Fingerprint(testFPKey) {
		t.Fatal("allowRedirectOrigins not fingerprinted")
	}
	if c := string(plain.canonical()); strings.Contains(c, "allow") {
		t.Fatalf("an entry without allowances changed its canonical form: %s", c)
	}
	same := r
	same.AllowRedirectOrigins = []string{"http://B.example:80/", "https://other.example:8443", "http://b.example"}
	if same.Fingerprint(testFPKey) != r.Fingerprint(testFPKey) {
		t.Fatal("equal origin sets fingerprinted differently")
	}
	other := r
	other.AllowRedirectOrigins = []string{"https://other.example:8444", "http://b.example"}
	if other.Fingerprint(testFPKey) == r.Fingerprint(testFPKey) {
		t.Fatal("another port fingerprinted the same")
	}
	tooMany := make([]string, MaxAllowRedirectOrigins+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf(`"https://h%d.example"`, i)
	}
	for _, bad := range []string{
		`["ftp://x.example"]`, `["https://x.example/path"]`, `["https://u@x.example"]`, `["https://x.example?q=1"]`,
		`["https://x.example#f"]`, `["x.example"]`, `["https://:443"]`, `["https://x.example:99999"]`, `["https://x.example:0"]`,
		`[""]`, `["mailto:a@x.example"]`, `[` + strings.Join(tooMany, ",") + `]`,
	} {
		doc := `{"mcpServers":{"x":{"url":"https://a.example/mcp","allowRedirectOrigins":` + bad + `}}}`
		if _, err := ParseConfig([]byte(doc)); !errors.Is(err, ErrConfigInvalid) {
			t.Errorf("allowRedirectOrigins %s: %v", bad, err)
		}
	}
	if _, err := ParseConfig([]byte(`{"mcpServers":{"x":{"command":"node","allowRedirectOrigins":["https://b.example"]}}}`)); !errors.Is(err, ErrConfigInvalid) {
		t.Errorf("allowRedirectOrigins on a command entry: %v", err)
	}
	e := newEnv(t, nil)
	e.cfg.Set("bad", ServerConfig{URL: "https://a.example/mcp", AllowRedirectOrigins: []string{"https://x.example/p"}})
	ctx := ctxT(t, 10*time.Second)
	s, err := e.m.OpenSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	if _, err := s.Capability().Tools(ctx, "bad"); !errors.Is(err, ErrConfigInvalid) {
		t.Fatalf("bad allowance at lookup: %v", err)
	}
}

// crossServer answers every request with a 307 to other+path(r), and
// records the headers it sees.
type crossServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newCrossServer(t *testing.T, to func(*http.Request) string) *crossServer {
	c := &crossServer{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.seen = append(c.seen, r.Header.Clone())
		c.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", to(r))
		w.WriteHeader(http.StatusTemporaryRedirect)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *crossServer) headers() []http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]http.Header(nil), c.seen...)
}

// TestHTTPAllowRedirectOrigins: with an origin allowed, a 307 hop to it is
// followed and it receives none of the configured headers (the recording
// redirect proxy sees every header); a hop to an origin not listed is
// still refused before any request reaches it.
func TestHTTPAllowRedirectOrigins(t *testing.T) {
	b := newHTTPBoundary(httpTimeouts{time.Second, 5 * time.Second, 10 * time.Second})
	defer b.close()
	allowed := newHopServer(t, "")
	listedNot := newHopServer(t, "")
	front := newCrossServer(t, func(r *http.Request) string {
		if r.URL.Path == "/other" {
			return listedNot.srv.URL + "/r/0/x"
		}
		return allowed.srv.URL + "/r/1/x" // then one same-origin hop there
	})
	u, _ := checkEndpoint(front.srv.URL + "/mcp")
	rt := newLeaseRoundTripper(b, u, map[string]string{"Authorization": "Bearer secret", "X-Api-Key": "k"}, nil)
	rt.allowed, _ = checkAllowOrigins([]string{allowed.srv.URL})
	client := b.clientFor(rt)
	resp, err := client.Post(front.srv.URL+"/mcp", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "POST payload" {
		t.Fatalf("allowed cross-origin hop: %q", body)
	}
	if hs := front.headers(); len(hs) != 1 || hs[0].Get("Authorization") != "Bearer secret" {
		t.Fatal("the configured origin did not get the configured headers")
	}
	seen := allowed.requests()
	if len(seen) != 2 {
		t.Fatalf("allowed origin got %d requests, want 2", len(seen))
	}
	for _, r := range seen {
		if r.header.Get("Authorization") != "" || r.header.Get("X-Api-Key") != "" {
			t.Fatalf("configured header sent to the allowed origin (%s)", r.path)
		}
	}
	if _, err := client.Post(front.srv.URL+"/other", "text/plain", strings.NewReader("payload")); !errors.Is(err, ErrHTTPCrossOrigin) {
		t.Fatalf("hop to an origin not listed: %v", err)
	}
	if n := len(listedNot.requests()); n != 0 {
		t.Fatalf("the origin not listed got %d requests", n)
	}
}

// TestHTTPEverythingAllowedOrigin runs an MCP lease whose endpoint answers
// every request with a 307 to another origin (a proxy in front of
// server-everything): refused without an allowance (the acquisition fails
// before the other origin is asked), working with it — every hop recorded
// same_origin false, the other origin never seeing the configured header.
func TestHTTPEverythingAllowedOrigin(t *testing.T) {
	e := newEnv(t, nil)
	endpoint := everythingHTTP(t) // after newEnv: killed and reaped before its leak check
	proxy := newHopServer(t, endpoint)
	front := newCrossServer(t, func(*http.Request) string { return proxy.srv.URL + "/r/0/mcp" })
	hdr := map[string]string{"Authorization": "Bearer t"}
	e.cfg.Set("refused", ServerConfig{URL: front.srv.URL + "/mcp", Headers: hdr})
	e.cfg.Set("allowed", ServerConfig{URL: front.srv.URL + "/mcp", Headers: hdr, AllowRedirectOrigins: []string{proxy.srv.URL}})
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	if _, err := s.Capability().Tools(ctx, "refused"); !errors.Is(err, ErrInitialize) {
		t.Fatalf("cross-origin endpoint without allowance: %v", err)
	}
	if n := len(proxy.requests()); n != 0 {
		t.Fatalf("the other origin got %d requests without an allowance", n)
	}
	tools, err := s.Capability().Tools(ctx, "allowed")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Capability().Call(ctx, CallRequest{Server: "allowed", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"message": "hi"}})
	if err != nil || res.IsError {
		t.Fatalf("call through the allowed origin: %v", err)
	}
	act := e.m.leaseOf("s1", "allowed").activation
	s.Release(ctx) // the session DELETE is sent: its headers are checked too
	deletes := 0
	for _, r := range proxy.requests() {
		if r.method == http.MethodDelete {
			deletes++
		}
		if r.header.Get("Authorization") != "" {
			t.Fatalf("configured header sent to the allowed origin (%s %s)", r.method, r.path)
		}
	}
	if deletes != 1 {
		t.Fatalf("the allowed origin saw %d session DELETEs, want 1", deletes)
	}
	for _, h := range front.headers() {
		if h.Get("Authorization") != "Bearer t" {
			t.Fatal("the configured origin did not get the configured header")
		}
	}
	completed, hops := checkHTTPEvidence(t, httpPayloads(e.events(), act))
	if hops != len(completed) {
		t.Fatalf("%d hops for %d requests, want one each", hops, len(completed))
	}
	for _, p := range httpPayloads(e.events(), act) {
		if r, ok := p.(*events.HTTPRedirect); ok && (r.SameOrigin || r.Origin != origin(mustURL(t, proxy.srv.URL))) {
			t.Fatalf("hop %+v", r)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
