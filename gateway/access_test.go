//go:build linux

package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// nothingStarted fails when any session was opened or any lease started.
func (e *env) nothingStarted() {
	e.t.Helper()
	for _, k := range []string{"session.opened", "lease.acquiring", "guardian.started"} {
		if n := e.count(events.Kind(k), nil); n != 0 {
			e.t.Fatalf("%d %s events: something was started", n, k)
		}
	}
	if n := len(e.g.Sessions()); n != 0 {
		e.t.Fatalf("%d sessions", n)
	}
}

// A request without a token, with a wrong or malformed one, or with a
// revoked one gets 401 and starts nothing; a revoked token's live session
// is ended by the reload.
func TestTokens(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice", "bob"}, nil)
	for name, hdr := range map[string]map[string]string{
		"missing":    nil,
		"wrong":      {"Authorization": "Bearer llt_0000"},
		"not bearer": {"Authorization": "Basic " + e.plain["alice"]},
		"oversize":   {"Authorization": "Bearer " + strings.Repeat("x", MaxBearerBytes+1)},
		"hash":       {"Authorization": "Bearer " + HashToken(e.plain["alice"])},
	} {
		if code, _ := e.post(initBody, hdr); code != http.StatusUnauthorized {
			t.Errorf("%s token: status %d, want 401", name, code)
		}
	}
	e.nothingStarted()

	ctx := ctxT(t, time.Minute)
	bob := e.mustConnect(ctx, e.plain["bob"], nil)
	defer bob.Close()
	if _, err := bob.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Revoke bob: rewrite the file without him and reload.
	if err := os.WriteFile(e.file, []byte("# alice only\n"+TokenLine("alice", HashToken(e.plain["alice"]))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.tokens.Reload(); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "revoked token's session ended", func() bool { return len(e.g.Sessions()) == 0 })
	if code, _ := e.post(initBody, map[string]string{"Authorization": "Bearer " + e.plain["bob"]}); code != http.StatusUnauthorized {
		t.Fatalf("revoked token: status %d, want 401", code)
	}
	if _, err := bob.ListTools(ctx, nil); err == nil {
		t.Fatal("the revoked token's session still answers")
	}
	if _, err := e.connect(ctx, e.plain["bob"], nil); err == nil {
		t.Fatal("revoked token opened a session")
	}
	alice := e.mustConnect(ctx, e.plain["alice"], nil)
	defer alice.Close()

	// A file writable by group or others is refused, by LoadTokens and
	// Reload alike; the tokens in force stay.
	for _, mode := range []os.FileMode{0o620, 0o602, 0o666} {
		if err := os.Chmod(e.file, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTokens(e.file); !errors.Is(err, ErrTokenFilePerm) {
			t.Fatalf("LoadTokens of a %o file: %v", mode, err)
		}
		if err := e.tokens.Reload(); !errors.Is(err, ErrTokenFilePerm) {
			t.Fatalf("Reload of a %o file: %v", mode, err)
		}
	}
	if err := os.Chmod(e.file, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(e.file); err != nil {
		t.Fatalf("LoadTokens of a 0640 file: %v", err)
	}
	if _, err := alice.ListTools(ctx, nil); err != nil {
		t.Fatalf("alice after a refused reload: %v", err)
	}

	// A malformed file keeps the tokens in force.
	if err := os.WriteFile(e.file, []byte("alice not-a-hash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.tokens.Reload(); err == nil || !strings.Contains(err.Error(), "line=1") {
		t.Fatalf("Reload of a malformed file: %v", err)
	}
	if _, err := alice.ListTools(ctx, nil); err != nil {
		t.Fatalf("alice after a failed reload: %v", err)
	}
}

// A session may only be used with the token that opened it: another valid
// token gets 403 (for POST, GET and DELETE), none gets 401, and the
// session goes on.
func TestSessionBoundToToken(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice", "bob"}, nil)
	ctx := ctxT(t, time.Minute)
	alice := e.mustConnect(ctx, e.plain["alice"], nil)
	defer alice.Close()
	id := alice.ID()
	list := `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
	hdr := map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": "2025-11-25", "Authorization": "Bearer " + e.plain["bob"]}
	if code, _ := e.post(list, hdr); code != http.StatusForbidden {
		t.Fatalf("POST with another token: %d, want 403", code)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(m, e.srv.URL, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s with another token: %d, want 403", m, resp.StatusCode)
		}
	}
	delete(hdr, "Authorization")
	if code, _ := e.post(list, hdr); code != http.StatusUnauthorized {
		t.Fatalf("POST without a token: %d, want 401", code)
	}
	if _, err := alice.ListTools(ctx, nil); err != nil {
		t.Fatalf("the session after foreign attempts: %v", err)
	}
	if n := len(e.g.Sessions()); n != 1 {
		t.Fatalf("%d sessions", n)
	}
}

// A foreign Origin gets 403 before anything starts; loopback origins (on a
// loopback listener) and listed ones are accepted.
func TestOrigin(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, func(o *Options, _ *runtime.Options) {
		o.AllowedOrigins = []string{"https://App.Example.com"}
	})
	auth := "Bearer " + e.plain["alice"]
	for _, o := range []string{"https://evil.example", "http://app.example.com", "null", "http://127.0.0.1.evil.example", "https://app.example.com/path"} {
		if code, _ := e.post(initBody, map[string]string{"Authorization": auth, "Origin": o}); code != http.StatusForbidden {
			t.Errorf("Origin %s: %d, want 403", o, code)
		}
	}
	e.nothingStarted()
	ctx := ctxT(t, time.Minute)
	for _, o := range []string{"http://localhost:3000", "http://127.0.0.1:9", "https://app.example.com"} {
		c := mcp.NewClient(&mcp.Implementation{Name: "o", Version: "0"}, nil)
		tr := &mcp.StreamableClientTransport{Endpoint: e.srv.URL, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: &headers{token: e.plain["alice"], origin: o, base: e.srv.Client().Transport}}}
		cs, err := c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("Origin %s refused: %v", o, err)
		}
		cs.Close()
	}
	// CORS: an allowed origin's preflight is answered without a token,
	// and its responses allow it and expose the session id; a foreign
	// origin's preflight is refused.
	preflight := func(origin string) *http.Response {
		req, err := http.NewRequest(http.MethodOptions, e.srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, mcp-protocol-version")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := preflight("https://app.example.com")
	if h := resp.Header; resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		h.Get("Access-Control-Allow-Methods") != corsAllowMethods || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Mcp-Session-Id") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || h.Get("Access-Control-Max-Age") == "" {
		t.Errorf("preflight of an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := preflight("https://evil.example"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight of a foreign origin: %d %v", resp.StatusCode, resp.Header)
	}
	code, h := e.post(initBody, map[string]string{"Authorization": auth, "Origin": "https://app.example.com"})
	if code != http.StatusOK || h.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		h.Get("Access-Control-Expose-Headers") != headerSessionID || h.Get(headerSessionID) == "" {
		t.Errorf("initialize from an allowed origin: %d %v", code, h)
	}
	if code, h := e.post(initBody, map[string]string{"Origin": "https://app.example.com"}); code != http.StatusUnauthorized ||
		h.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("no token from an allowed origin: %d %v (the browser must see the 401)", code, h)
	}
	// The go-sdk's DNS-rebinding check stays on: a foreign Host on a
	// loopback listener is refused.
	if code, _ := e.post(initBody, map[string]string{"Authorization": auth, "Host": "evil.example"}); code != http.StatusForbidden {
		t.Errorf("foreign Host: %d, want 403", code)
	}
}

// Per-token and global caps: a session over a cap is refused with a clear
// HTTP error and nothing started; a slot frees when a session ends.
func TestSessionCaps(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice", "bob", "carol"}, func(o *Options, _ *runtime.Options) {
		o.MaxSessionsPerToken, o.MaxSessions = 2, 3
	})
	ctx := ctxT(t, time.Minute)
	a1 := e.mustConnect(ctx, e.plain["alice"], nil)
	a2 := e.mustConnect(ctx, e.plain["alice"], nil)
	defer a2.Close()
	code, h := e.post(initBody, map[string]string{"Authorization": "Bearer " + e.plain["alice"]})
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("third session of alice: %d, want 429 with Retry-After", code)
	}
	b1 := e.mustConnect(ctx, e.plain["bob"], nil)
	defer b1.Close()
	if code, _ := e.post(initBody, map[string]string{"Authorization": "Bearer " + e.plain["carol"]}); code != http.StatusServiceUnavailable {
		t.Fatalf("fourth session: %d, want 503", code)
	}
	if n := e.count("session.opened", nil); n != 3 {
		t.Fatalf("session.opened: %d, want 3", n)
	}
	if err := a1.Close(); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "a slot freed", func() bool { return len(e.g.Sessions()) == 2 })
	c1 := e.mustConnect(ctx, e.plain["carol"], nil)
	defer c1.Close()
	// Refused and failed openings hold no slot.
	e.g.mu.Lock()
	total, slots := e.g.total, len(e.g.slots)
	e.g.mu.Unlock()
	if total != 3 || slots != 3 {
		t.Fatalf("slots: total %d over %d principals, want 3 over 3", total, slots)
	}
}

// Without tokens the endpoint serves loopback clients only and records no
// principal.
func TestNoTokens(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, nil, nil)
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, "", nil)
	defer cs.Close()
	if got := e.g.Sessions(); len(got) != 1 || got[0].Principal != "" {
		t.Fatalf("Sessions: %+v", got)
	}
	// The same request arriving on a non-loopback address is refused.
	for _, local := range []net.Addr{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 8848}, nil} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(initBody))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		if local != nil {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
		}
		w := httptest.NewRecorder()
		e.g.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), msgLoopbackOnly) {
			t.Fatalf("local address %v: %d %q", local, w.Code, w.Body.String())
		}
	}
	if n := len(e.g.Sessions()); n != 1 {
		t.Fatalf("%d sessions", n)
	}
}

// Only protocol versions with sessions are offered: a go-sdk client left
// to its default (which tries the sessionless 2026-07-28 first) ends up
// in a 2025-11-25 session, and the refused attempt holds no slot.
func TestProtocolVersions(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, func(o *Options, _ *runtime.Options) {
		o.MaxSessionsPerToken = 1
	})
	ctx := ctxT(t, time.Minute)
	c := mcp.NewClient(&mcp.Implementation{Name: "default", Version: "0"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: e.srv.URL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &headers{token: e.plain["alice"], base: e.srv.Client().Transport}}}
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("default client: %v", err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("negotiated %q", v)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.g.Sessions(); len(got) != 1 || got[0].ID != cs.ID() {
		t.Fatalf("Sessions: %+v", got)
	}
	if !slicesEqual(sessionVersions(), []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}) {
		t.Fatalf("versions %v", sessionVersions())
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// A token removed while sessions it opens are still initializing ends
// them too: no session of a removed token survives its reload, however the
// reload interleaves with initialize.
func TestReloadRacesInitialize(t *testing.T) {
	const rounds, perRound = 6, 12
	var names []string
	for i := range rounds {
		names = append(names, "bob"+strconv.Itoa(i))
	}
	e := newEnv(t, []server{{"tools", testServer(nil)}}, names, func(o *Options, _ *runtime.Options) {
		o.MaxSessions, o.MaxSessionsPerToken = rounds*perRound, perRound
	})
	for i := range rounds {
		var wg sync.WaitGroup
		for range perRound {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.post(initBody, map[string]string{"Authorization": "Bearer " + e.plain[names[i]]})
			}()
		}
		// Reload while the initializes are opening their scopes.
		time.Sleep(time.Duration(i) * 5 * time.Millisecond)
		var b strings.Builder
		for _, n := range names[i+1:] {
			b.WriteString(TokenLine(n, HashToken(e.plain[n])) + "\n")
		}
		if err := os.WriteFile(e.file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := e.tokens.Reload(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	testproc.Eventually(t, "every removed token's session ended", func() bool { return len(e.g.Sessions()) == 0 })
	// Nothing is left to end later: every session of the removed tokens
	// ended (audited at cleanup) and none is live.
	time.Sleep(200 * time.Millisecond)
	if s := e.g.Sessions(); len(s) != 0 {
		t.Fatalf("sessions of removed tokens survive: %v", s)
	}
}
