//go:build linux

package runtime

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHTTP400OneRequestKeepsLease: a proxy in front of a healthy server
// answers one tools/call 400 with a JSON-RPC error (a validating gateway
// or WAF). The call fails with the remote code, but the 400 is confirmed
// by a probe in the same session, which the server answers: the lease is
// kept (not lost, not replaced), a concurrent call on it keeps running,
// and the next call runs on the same lease.
func TestHTTP400OneRequestKeepsLease(t *testing.T) {
	e := newEnv(t, nil)
	endpoint, started := goSDKHTTP(t)
	target, _ := url.Parse(endpoint)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var probes atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, lostProbeBody) {
				probes.Add(1)
			}
			if bytes.Contains(b, []byte("BADARG")) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params"}}`))
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	e.cfg.Set("remote", ServerConfig{URL: front.URL + "/mcp"})
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
	old := e.m.leaseOf("s1", "remote")
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	hangErr := make(chan error, 1)
	go func() {
		_, err := s.Capability().Call(hctx, CallRequest{Server: "remote", Tool: "hang", Digest: digestOf(t, tools, "hang")})
		hangErr <- err
	}()
	<-started
	bad := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "BADARG"}}
	var ce *LeaseError
	if _, err := s.Capability().Call(ctx, bad); !errors.Is(err, ErrRemote) || !errors.As(err, &ce) || ce.Code != -32602 {
		t.Fatalf("rejected call: %v", err)
	}
	if probes.Load() != 1 {
		t.Fatalf("%d probes sent for the 400, want 1", probes.Load())
	}
	if why := old.child.(*httpChild).lost(); why != "" || old.childGone() {
		t.Fatalf("one rejected request marked the lease lost (%q)", why)
	}
	good := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "ok"}}
	if res, err := s.Capability().Call(ctx, good); err != nil || res.IsError {
		t.Fatalf("call after the rejected one: %v", err)
	}
	if cur := e.m.leaseOf("s1", "remote"); cur == nil || cur.activation != old.activation {
		t.Fatal("the lease was replaced after one rejected request")
	}
	select {
	case err := <-hangErr:
		t.Fatalf("the concurrent call ended: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	hcancel()
	if err := <-hangErr; !errors.Is(err, ErrCallFailed) {
		t.Fatalf("cancelled concurrent call: %v", err)
	}
}

// TestHTTPLossSignalsConfiguredOriginOnly: only answers from the
// configured origin speak for the remote session. A POST carrying the
// session id that a 307 sends to an allowed other origin, answered 404
// there, and a session DELETE whose dial is refused, mark nothing lost; a
// 404 from the configured origin does.
func TestHTTPLossSignalsConfiguredOriginOnly(t *testing.T) {
	b := newHTTPBoundary(httpTimeouts{time.Second, 5 * time.Second, 10 * time.Second})
	defer b.close()
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			w.Header().Set("Location", other.URL+"/mcp")
			w.WriteHeader(http.StatusTemporaryRedirect)
			return
		}
		http.NotFound(w, r)
	}))
	defer front.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	var lost atomic.Value
	lost.Store("")
	newRT := func(endpoint string) *http.Client {
		u, _ := checkEndpoint(endpoint)
		rt := newLeaseRoundTripper(b, u, nil, nil)
		rt.allowed, _ = checkAllowOrigins([]string{other.URL})
		rt.lost = func(reason string) { lost.Store(reason) }
		return b.clientFor(rt)
	}
	send := func(c *http.Client, method, u string) {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader("{}"))
		req.Header.Set(sessionIDHeader, "sid")
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	send(newRT(front.URL+"/away"), http.MethodPost, front.URL+"/away")
	send(newRT(deadURL+"/mcp"), http.MethodDelete, deadURL+"/mcp")
	if got := lost.Load().(string); got != "" {
		t.Fatalf("marked lost (%q) by another origin's answer or the DELETE", got)
	}
	send(newRT(front.URL+"/mcp"), http.MethodPost, front.URL+"/mcp")
	if got := lost.Load().(string); got != lostSessionNotFound {
		t.Fatalf("a 404 from the configured origin: lost %q", got)
	}
}
