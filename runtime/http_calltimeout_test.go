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
	"testing"
	"time"
)

// TestHTTPReceiveTimeoutKeepsLease: a healthy server's tool takes longer
// than the receive timeout (the response's headers sent, its stream
// silent). The call fails once the timeout fires, with the typed cause
// (errors.Is ErrHTTPReceiveTimeout), and only that call: the lease is not
// lost and the next call runs on it.
func TestHTTPReceiveTimeoutKeepsLease(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.HTTPReceiveTimeout = time.Second })
	endpoint := everythingHTTP(t)
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
	old := e.m.leaseOf("s1", "remote")
	cctx, cancel := context.WithTimeout(ctx, 12*time.Second)
	defer cancel()
	// The tool would answer after 4 s of silence and the call succeed: its
	// typed failure is the receive timeout's.
	_, err = s.Capability().Call(cctx, CallRequest{Server: "remote", Tool: "trigger-long-running-operation",
		Digest: digestOf(t, tools, "trigger-long-running-operation"), Arguments: map[string]any{"duration": 4, "steps": 1}})
	if !errors.Is(err, ErrHTTPReceiveTimeout) || !errors.Is(err, ErrCallFailed) {
		t.Fatalf("call: %v (receive timeout 1s)", err)
	}
	if why := old.child.(*httpChild).lost(); why != "" || old.childGone() {
		t.Fatalf("a receive timeout ended the lease (%q)", why)
	}
	req := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"message": "hi"}}
	if res, err := s.Capability().Call(ctx, req); err != nil || res.IsError {
		t.Fatalf("call after the timeout: %v", err)
	}
	if cur := e.m.leaseOf("s1", "remote"); cur == nil || cur.activation != old.activation {
		t.Fatal("the lease was replaced after one request's receive timeout")
	}
}

// TestHTTPReceiveTimeoutJSONBody: a proxy answers one tools/call with
// application/json headers and then a silent body. go-sdk fails its whole
// connection when a JSON response's body cannot be read, so the lease
// ends (lost, session_failed) — but the call still fails with the typed
// cause, and the next call runs on a new lease.
func TestHTTPReceiveTimeoutJSONBody(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.HTTPReceiveTimeout = 500 * time.Millisecond })
	endpoint, _, srv := goSDKHTTPServer(t)
	// The lost lease's remote session stays on this healthy server (only
	// the client's connection failed): end it so its goroutines exit.
	defer func() {
		closeServerSessions(srv)
	}()
	target, _ := url.Parse(endpoint)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	quit := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte("STALL")) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-quit:
				}
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	defer close(quit)
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
	req := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "STALL"}}
	if _, err := s.Capability().Call(ctx, req); !errors.Is(err, ErrHTTPReceiveTimeout) {
		t.Fatalf("stalled call: %v", err)
	}
	if why := old.child.(*httpChild).lost(); why != lostSessionFailed {
		t.Fatalf("lease lost as %q, want %q", why, lostSessionFailed)
	}
	req.Arguments = map[string]any{"text": "ok"}
	if res, err := s.Capability().Call(ctx, req); err != nil || res.IsError {
		t.Fatalf("call after the failed connection: %v", err)
	}
	if cur := e.m.leaseOf("s1", "remote"); cur == nil || cur.activation == old.activation {
		t.Fatal("the failed lease was not replaced")
	}
}
