//go:build linux

package runtime

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// droppingFront serves a go-sdk server (echo) through a reverse proxy that
// drops, without any answer, every POST whose body holds "DROP": it closes
// the request's connection and, when dead is set, first its own listener
// and its idle connections (the server is gone: a new request must dial,
// and the dial is refused). The session's standalone stream, already open
// and busy, stays open.
func droppingFront(t *testing.T, dead bool) (endpoint string) {
	t.Helper()
	upstream, _, srv := goSDKHTTPServer(t)
	target, _ := url.Parse(upstream)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var mu sync.Mutex
	idle := map[net.Conn]bool{}
	var front *httptest.Server
	front = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte("DROP")) {
				if dead {
					_ = front.Listener.Close()
					mu.Lock()
					for c := range idle {
						_ = c.Close()
					}
					mu.Unlock()
				}
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					_ = conn.Close()
				}
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	front.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if s == http.StateIdle {
			idle[c] = true
		} else {
			delete(idle, c)
		}
	}
	front.Start()
	t.Cleanup(func() {
		// The leases' remote sessions may stay on the healthy upstream:
		// end them so their goroutines exit.
		closeServerSessions(srv)
		front.CloseClientConnections()
		front.Close()
	})
	return front.URL + "/mcp"
}

// dropCall opens session s1 on endpoint and makes one call whose POST is
// dropped; it returns the session, the lease the call ran on and the
// request (its arguments to be replaced).
func dropCall(t *testing.T, e *env, endpoint string) (*SessionScope, *lease, CallRequest) {
	t.Helper()
	e.cfg.Set("remote", ServerConfig{URL: endpoint})
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Release(ctxT(t, 60*time.Second)) })
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "remote")
	req := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "DROP"}}
	if _, err := s.Capability().Call(ctx, req); err == nil {
		t.Fatal("a call whose request was dropped succeeded")
	}
	return s, l, req
}

// TestHTTPUnansweredPost: a call's POST left without any answer while the
// session's standalone stream stays open. go-sdk keeps its connection for
// a request its transport could not complete, so the boundary probes the
// session (a ping): a server that no longer listens refuses it, and the
// lease ends with the call (connection_refused), its connection closed;
// one that dropped that request only answers it, and the lease serves the
// next call. Before, the lease was kept either way, and a dead server's
// lease stayed serving until its standalone stream failed, which could
// come after the call's end (TestHTTPServerKilledMidCall failed about once
// in thirty runs).
func TestHTTPUnansweredPost(t *testing.T) {
	t.Run("server gone", func(t *testing.T) {
		e := newEnv(t, nil)
		_, old, _ := dropCall(t, e, droppingFront(t, true))
		if why := old.child.(*httpChild).lost(); why != lostConnectionRefused {
			t.Fatalf("lease lost as %q, want %q", why, lostConnectionRefused)
		}
		testproc.Eventually(t, "the lost lease's connection closed", func() bool {
			r, ok := e.m.ConnectionStatus(old.activation)
			return ok && r.Phase == ConnectionClosed
		})
		if cur := e.m.leaseOf("s1", "remote"); cur == old {
			t.Fatal("the lost lease is still in the table")
		}
		var reason events.TerminationReason
		for _, x := range e.events() {
			if r, ok := x.Payload.(*events.LeaseTerminated); ok && x.Activation == old.activation {
				reason = r.Reason
			}
		}
		if reason != events.TerminatedChildExited {
			t.Fatalf("lease.terminated reason %q, want %q", reason, events.TerminatedChildExited)
		}
	})
	t.Run("request dropped", func(t *testing.T) {
		e := newEnv(t, nil)
		s, old, req := dropCall(t, e, droppingFront(t, false))
		if why := old.child.(*httpChild).lost(); why != "" || old.childGone() {
			t.Fatalf("a live session was lost (%q) for one dropped request", why)
		}
		req.Arguments = map[string]any{"text": "ok"}
		if res, err := s.Capability().Call(ctxT(t, 60*time.Second), req); err != nil || res.IsError {
			t.Fatalf("call after the dropped request: %v", err)
		}
		if cur := e.m.leaseOf("s1", "remote"); cur != old {
			t.Fatal("the live lease was replaced")
		}
	})
}
