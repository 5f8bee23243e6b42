//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// The standing hostile-client suite: one real `serve` with small
// caps, attacked from outside over HTTP and TCP, then checked for health,
// memory, leftover processes and a clean ledger.

const (
	// hostileServer is the config name of the go-sdk test server
	// (runtime/internal/testserver: echo, slow, crash, …) over stdio.
	hostileServer = "ts"
	// hostileMark is the hostile text no answer may carry back.
	hostileMark = "<script>"
	// Caps serve runs with: small, so the flood and the stalls reach them.
	hostileMaxSessions, hostileMaxPerToken = 4, 2
	// hostileBodyRead is serve's --body-read-timeout: short, so the stalled
	// clients' 408 is read, long enough that they are still stalled while
	// the normal client opens its session.
	hostileBodyRead = "3s"
	// hostileRSSBound bounds serve's resident memory after every attack.
	// Serve runs this suite at about 40 MiB (the NATS server, Pebble, the
	// go-sdk). What the attacks may make it allocate is bounded by the
	// caps: a body is read up to gateway.MaxRequestBodyBytes (4 MiB), at
	// most --max-sessions sessions live, a stalled body holds its first
	// byte. 128 MiB leaves room for that and for freed pages the Go
	// runtime has not returned yet; reading the 50 MiB body whole (its
	// buffer grows by doubling to 64 MiB) or keeping what the stalled or
	// flooding clients sent would pass it.
	hostileRSSBound = 128 << 20
	// initRequest opens an MCP session.
	initRequest = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hostile","version":"0"}}}`
	// invalidIDText is the gateway's refusal of an id it cannot carry back.
	invalidIDText = "gateway: invalid request id"
)

// TestHostileClients attacks one real serve (--tokens with two tokens,
// --max-sessions 4, --max-sessions-per-token 2, --call-timeout 1s,
// --body-read-timeout 3s) with the go-sdk test server configured over
// stdio. Each subtest states the outcome its attack gets and ends with a
// normal client listing the tools and calling echo. Afterwards serve's RSS
// is below hostileRSSBound; SIGTERM stops it with exit 0; no process it
// ran (guardian or server) and no child of the test is left; `verify` and
// `audit --all` on its data directory exit 0.
func TestHostileClients(t *testing.T) {
	h := startHostile(t, "--max-sessions", strconv.Itoa(hostileMaxSessions), "--max-sessions-per-token", strconv.Itoa(hostileMaxPerToken),
		"--call-timeout", "1s", "--body-read-timeout", hostileBodyRead)
	h.healthy(t)

	// 401 without or with a wrong token, saying Bearer; 403 for a session
	// used (or ended) with a token other than the one that opened it.
	t.Run("Auth", func(t *testing.T) {
		for name, tok := range map[string]string{"no token": "", "wrong token": h.alice + "x"} {
			if a := h.post(t, tok, initRequest, nil); a.status != http.StatusUnauthorized || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: %d, WWW-Authenticate %q", name, a.status, a.header.Get("WWW-Authenticate"))
			}
		}
		id, hdr := h.session(t, h.alice)
		if a := h.post(t, h.bob, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, hdr); a.status != http.StatusForbidden {
			t.Errorf("alice's session with bob's token: %d %q", a.status, a.body)
		}
		if a := h.do(t, http.MethodDelete, h.bob, "", hdr); a.status != http.StatusForbidden {
			t.Errorf("alice's session ended with bob's token: %d %q", a.status, a.body)
		}
		h.end(t, h.alice, id)
		h.healthy(t)
	})

	// A foreign Origin and a non-loopback Host on the loopback listener
	// are refused 403 (DNS rebinding), and open nothing.
	t.Run("OriginHost", func(t *testing.T) {
		if a := h.post(t, h.alice, initRequest, map[string]string{"Origin": "https://evil.example"}); a.status != http.StatusForbidden {
			t.Errorf("foreign Origin: %d %q", a.status, a.body)
		}
		if a := h.post(t, h.alice, initRequest, map[string]string{"Host": "evil.example"}); a.status != http.StatusForbidden || a.header.Get("Mcp-Session-Id") != "" {
			t.Errorf("non-loopback Host: %d %q", a.status, a.body)
		}
		h.healthy(t)
	})

	// Bodies: 50 MiB streamed → 413; 100 000-deep nesting and malformed
	// JSON → 400 parse error; a batch → 400 invalid request; invalid UTF-8
	// in a string is answered (a JSON-RPC answer, never a 5xx, never a
	// hang).
	t.Run("Bodies", func(t *testing.T) {
		const huge = 50 << 20
		c := h.rawPost(t, h.alice, huge, "")
		wrote := make(chan struct{})
		go func() { // fails once serve closes the connection
			defer close(wrote)
			_, _ = io.Copy(c, io.LimitReader(zeros{}, huge))
		}()
		a := readAnswer(t, c)
		c.Close()
		<-wrote
		if a.status != http.StatusRequestEntityTooLarge {
			t.Errorf("50 MiB body: %d %q", a.status, a.body)
		}
		id, hdr := h.session(t, h.alice)
		for body, code := range map[string]int64{
			strings.Repeat("[", 100000):                                    -32700,
			strings.Repeat("[", 100000) + strings.Repeat("]", 100000):      -32700,
			`{"jsonrpc":"2.0","id":1,"method":"ping"`:                      -32700,
			`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`:                   -32600,
			`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0"}]`: -32600,
		} {
			if a := h.post(t, h.alice, body, hdr); a.status != http.StatusBadRequest {
				t.Errorf("body %.40q: %d %q", body, a.status, a.body)
			} else if _, got, _, _ := a.rpc(); got != code {
				t.Errorf("body %.40q: code %d, want %d", body, got, code)
			}
		}
		for _, body := range []string{
			"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/\xff\xfe\"}",
			"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"ts__\xc3\x28\"}}",
			"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"_meta\":{\"x\":\"\xed\xa0\x80\"}}}",
		} {
			a := h.post(t, h.alice, body, hdr)
			if id, code, _, ok := a.rpc(); a.status >= 500 || !ok || string(id) != "3" && code == 0 {
				t.Errorf("invalid UTF-8 %q: %d %q", body, a.status, a.body)
			}
		}
		h.end(t, h.alice, id)
		h.healthy(t)
	})

	// Hostile text in a method, params and headers is never quoted back
	// and no error has code 0 (answer.check); a request without a session
	// is 400 invalid request; ids come back byte for byte, or the request
	// is refused 400 invalid request id.
	t.Run("HostileText", func(t *testing.T) {
		if a := h.post(t, h.alice, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, nil); a.status != http.StatusBadRequest {
			t.Errorf("no session: %d %q", a.status, a.body)
		} else if id, code, _, _ := a.rpc(); string(id) != "7" || code != -32600 {
			t.Errorf("no session: id %s code %d", id, code)
		}
		id, hdr := h.session(t, h.alice)
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":2,"method":"foo` + hostileMark + `"}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"` + hostileMark + `"}}`,
			`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":{"x":"` + hostileMark + `"}}}`,
			`{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"` + hostileMark + `"}}`,
		} {
			if _, code, _, ok := h.post(t, h.alice, body, hdr).rpc(); !ok || code == 0 {
				t.Errorf("%s: answered code %d", body, code)
			}
		}
		for name, bad := range map[string]map[string]string{
			"MCP-Protocol-Version": {"Mcp-Session-Id": id, "MCP-Protocol-Version": hostileMark},
			"Mcp-Session-Id":       {"Mcp-Session-Id": hostileMark, "MCP-Protocol-Version": "2025-11-25"},
		} {
			if a := h.post(t, h.alice, `{"jsonrpc":"2.0","id":6,"method":"ping"}`, bad); a.status < 400 {
				t.Errorf("hostile %s header: %d %q", name, a.status, a.body)
			}
		}
		for _, rid := range []string{`"a-1"`, `-42`, `9007199254740992`} {
			a := h.post(t, h.alice, `{"jsonrpc":"2.0","id":`+rid+`,"method":"ping"}`, hdr)
			if got, code, _, _ := a.rpc(); a.status != http.StatusOK || string(got) != rid || code != 0 {
				t.Errorf("id %s: %d, came back as %s (code %d)", rid, a.status, got, code)
			}
		}
		for _, rid := range []string{`9223372036854775807`, `1.5`} {
			a := h.post(t, h.alice, `{"jsonrpc":"2.0","id":`+rid+`,"method":"ping"}`, hdr)
			if _, code, msg, _ := a.rpc(); a.status != http.StatusBadRequest || code != -32600 || msg != invalidIDText {
				t.Errorf("id %s: %d code %d %q", rid, a.status, code, msg)
			}
		}
		h.end(t, h.alice, id)
		h.healthy(t)
	})

	// Sessions up to the per-token cap, then one more → 429; up to the
	// global cap, then one more → 503; both with Retry-After. Once they
	// are ended, a new session opens.
	t.Run("SessionFlood", func(t *testing.T) {
		type opened struct{ token, id string }
		var all []opened
		open := func(token string) {
			t.Helper()
			a := h.post(t, token, initRequest, nil)
			if a.status != http.StatusOK || a.header.Get("Mcp-Session-Id") == "" {
				t.Fatalf("session %d: %d %q", len(all)+1, a.status, a.body)
			}
			all = append(all, opened{token, a.header.Get("Mcp-Session-Id")})
		}
		refused := func(token string, want int) {
			t.Helper()
			if a := h.post(t, token, initRequest, nil); a.status != want || a.header.Get("Retry-After") == "" || a.header.Get("Mcp-Session-Id") != "" {
				t.Errorf("beyond the cap: %d (Retry-After %q) %q, want %d", a.status, a.header.Get("Retry-After"), a.body, want)
			}
		}
		for range hostileMaxPerToken {
			open(h.alice)
		}
		refused(h.alice, http.StatusTooManyRequests)
		for range hostileMaxSessions - hostileMaxPerToken {
			open(h.bob)
		}
		refused(h.bob, http.StatusServiceUnavailable)
		for _, s := range all {
			h.end(t, s.token, s.id)
		}
		id, _ := h.session(t, h.alice)
		h.end(t, h.alice, id)
		h.healthy(t)
	})

	// Slowloris: twice --max-sessions connections send an initialize's
	// headers and 1 byte of its body, then stall. Beside them a normal
	// client (the same token) opens a session and calls a tool; each
	// stalled connection is then answered 408.
	t.Run("Slowloris", func(t *testing.T) {
		var stalled []net.Conn
		for range 2 * hostileMaxSessions {
			stalled = append(stalled, h.rawPost(t, h.alice, 200, "{"))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, done := h.connect(t, ctx, h.alice)
		if err := echo(ctx, cs, "beside the stalled"); err != nil {
			t.Fatalf("a normal session beside the stalled clients: %v", err)
		}
		done()
		for i, c := range stalled {
			if a := readAnswer(t, c); a.status != http.StatusRequestTimeout {
				t.Errorf("stalled client %d: %d %q, want 408", i, a.status, a.body)
			}
		}
		h.healthy(t)
	})

	// A server that does not answer — busy past --call-timeout, or stopped
	// (SIGSTOP) — gets its caller CodeRequestTimeout; once it runs again
	// the session's next call is answered.
	t.Run("HungServer", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, done := h.connect(t, ctx, h.alice)
		defer done()
		var we *jsonrpc.Error
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: hostileServer + "__slow", Arguments: map[string]any{"ms": 30000}})
		if !errors.As(err, &we) || we.Code != gateway.CodeRequestTimeout {
			t.Fatalf("slow call past --call-timeout: %v, want code %d", err, gateway.CodeRequestTimeout)
		}
		pid := h.childOf(t, cs.ID())
		defer syscall.Kill(pid, syscall.SIGCONT)
		testproc.Stop(t, pid)
		if err := echo(ctx, cs, "stopped"); !errors.As(err, &we) || we.Code != gateway.CodeRequestTimeout {
			t.Fatalf("call to a stopped server: %v, want code %d", err, gateway.CodeRequestTimeout)
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if err := echo(ctx, cs, "resumed"); err != nil {
			t.Fatalf("call once the server runs again: %v", err)
		}
		done()
		h.healthy(t)
	})

	// kill -9 of a session's server: the session's next call is answered
	// (a fresh lease, or a typed JSON-RPC error) and the one after it gets
	// a fresh server.
	t.Run("ServerKilled", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, done := h.connect(t, ctx, h.alice)
		defer done()
		if err := echo(ctx, cs, "before"); err != nil {
			t.Fatal(err)
		}
		pid := h.childOf(t, cs.ID())
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testproc.Eventually(t, "the killed server gone", func() bool { return !testproc.Running(pid) })
		var we *jsonrpc.Error
		err := echo(ctx, cs, "after")
		if err != nil && (!errors.As(err, &we) || we.Code == 0) {
			t.Fatalf("first call after the kill: %v, want an answer or a typed JSON-RPC error", err)
		}
		t.Logf("first call after the kill: %v", err)
		if err := echo(ctx, cs, "again"); err != nil {
			t.Fatalf("second call after the kill: %v", err)
		}
		if fresh := h.childOf(t, cs.ID()); fresh == pid {
			t.Fatalf("the session still names the killed server %d", pid)
		}
		done()
		h.healthy(t)
	})

	if t.Failed() {
		return
	}
	h.healthy(t)
	rss := h.rssBytes(t)
	t.Logf("serve's RSS after the attacks: %d MiB", rss>>20)
	if rss > hostileRSSBound {
		t.Errorf("serve's RSS after the attacks: %d MiB, bound %d MiB", rss>>20, hostileRSSBound>>20)
	}
	pids := h.servedPIDs()
	if len(pids) == 0 {
		t.Fatal("no guardian or server process recorded: nothing to prove gone")
	}
	if code := h.srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, h.srv.out.String())
	}
	for _, p := range pids {
		if testproc.Running(p) {
			t.Errorf("process %d serve ran is still running after serve stopped", p)
		}
	}
	if kids := testproc.ChildrenOf(os.Getpid()); len(kids) > 0 {
		t.Errorf("child processes of the test left: %v", kids)
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", h.dir, "verify", "--quiet"); r.code != 0 {
		t.Errorf("verify after the attacks: %+v", r)
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", h.dir, "audit", "--all"); r.code != 0 {
		t.Errorf("audit --all after the attacks: %+v", r)
	}
}
