//go:build unix

package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Helpers of the hostile-client suite (hostile_e2e_test.go): one serve
// under attack, raw HTTP and TCP clients that check every answer, and a
// go-sdk client for the normal calls beside and after the attacks.

// hostileEnv is the serve under attack and the means to reach it.
type hostileEnv struct {
	srv        *e2eServe
	dir        string // serve's data directory
	host       string // host:port of the MCP endpoint
	alice, bob string // tokens
	client     *http.Client
}

// startHostile builds the test server and runs serve over it, with two
// tokens (alice, bob) and extra flags.
func startHostile(t *testing.T, extra ...string) *hostileEnv {
	t.Helper()
	bin := cliBinary(t)
	tsBin := filepath.Join(t.TempDir(), "testserver")
	if err := testproc.Build(testproc.Binary{Out: tsBin, Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"}); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{hostileServer: map[string]any{"command": tsBin}}})
	config := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	h := &hostileEnv{dir: t.TempDir()}
	for name, tok := range map[string]*string{"alice": &h.alice, "bob": &h.bob} {
		r := runCLI(t, context.Background(), "", "token", "add", name, "--file", tokens)
		if r.code != 0 {
			t.Fatalf("token add: %+v", r)
		}
		*tok = strings.TrimSpace(r.stdout)
	}
	h.srv = startServe(t, bin, h.dir, config, append([]string{"--tokens", tokens}, extra...)...)
	u, err := url.Parse(h.srv.mcpURL)
	if err != nil {
		t.Fatal(err)
	}
	h.host = u.Host
	tr := &http.Transport{}
	h.client = &http.Client{Transport: tr, Timeout: e2eWait} // an answer that never comes fails the test
	t.Cleanup(tr.CloseIdleConnections)
	return h
}

// answer is one HTTP answer of serve.
type answer struct {
	status int
	header http.Header
	body   string
}

// rpc returns the JSON-RPC message in a body (JSON, or the first data
// line of an event stream): its id and its error's code and message.
func (a answer) rpc() (id json.RawMessage, code int64, msg string, ok bool) {
	data := a.body
	if i := strings.Index(data, "data: "); i >= 0 {
		data, _, _ = strings.Cut(data[i+len("data: "):], "\n")
	}
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(data), &m) != nil {
		return nil, 0, "", false
	}
	if m.Error == nil {
		return m.ID, 0, "", true
	}
	return m.ID, m.Error.Code, m.Error.Message, true
}

// check fails t when an answer does what none may: quote the hostile
// text, be a 5xx other than the global cap's 503, or carry a JSON-RPC
// error without a code.
func (a answer) check(t *testing.T, what string) answer {
	t.Helper()
	if strings.Contains(a.body, hostileMark) || a.status >= 500 && a.status != http.StatusServiceUnavailable {
		t.Errorf("%s: %d %q", what, a.status, a.body)
	}
	if _, code, _, ok := a.rpc(); ok && code == 0 && strings.Contains(a.body, `"error"`) {
		t.Errorf("%s: a JSON-RPC error without a code: %q", what, a.body)
	}
	return a
}

// post sends one POST to the MCP endpoint with token ("" for none) and
// headers (a "Host" entry sets the Host header).
func (h *hostileEnv) post(t *testing.T, token, body string, hdr map[string]string) answer {
	t.Helper()
	return h.do(t, http.MethodPost, token, body, hdr)
}

// do is post with another method.
func (h *hostileEnv) do(t *testing.T, method, token, body string, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+h.host+mcpPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.Host = cmp.Or(hdr["Host"], req.Host)
	what := fmt.Sprintf("%s %.60q", method, body)
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", what, err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}.check(t, what)
}

// session opens an MCP session with raw POSTs under token and returns its
// id and the headers its requests carry.
func (h *hostileEnv) session(t *testing.T, token string) (string, map[string]string) {
	t.Helper()
	a := h.post(t, token, initRequest, nil)
	id := a.header.Get("Mcp-Session-Id")
	if a.status != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %q", a.status, a.body)
	}
	hdr := map[string]string{"Mcp-Session-Id": id, "MCP-Protocol-Version": "2025-11-25"}
	if a := h.post(t, token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); a.status != http.StatusAccepted {
		t.Fatalf("initialized: %d %q", a.status, a.body)
	}
	return id, hdr
}

// end ends session id with a DELETE under token.
func (h *hostileEnv) end(t *testing.T, token, id string) {
	t.Helper()
	if a := h.do(t, http.MethodDelete, token, "", map[string]string{"Mcp-Session-Id": id}); a.status != http.StatusNoContent {
		t.Fatalf("DELETE %s: %d %q", id, a.status, a.body)
	}
}

// bearer adds a bearer token to every request of a go-sdk client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect opens a go-sdk client session under token; the function
// returned closes it (DELETE: its session ends, its slot is free).
func (h *hostileEnv) connect(t *testing.T, ctx context.Context, token string) (*mcp.ClientSession, func()) {
	t.Helper()
	tr := &http.Transport{}
	c := mcp.NewClient(&mcp.Implementation{Name: "leaseledger-hostile", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.srv.mcpURL,
		HTTPClient: &http.Client{Transport: bearer{token, tr}}, MaxRetries: -1}, nil)
	if err != nil {
		tr.CloseIdleConnections()
		t.Fatalf("connect: %v", err)
	}
	return cs, func() {
		_ = cs.Close()
		tr.CloseIdleConnections()
	}
}

// echo calls the test server's echo tool; a tool error or another text
// than text is an error too.
func echo(ctx context.Context, cs *mcp.ClientSession, text string) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: hostileServer + "__echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return err
	}
	if len(res.Content) == 1 && !res.IsError {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok && tc.Text == text {
			return nil
		}
	}
	return fmt.Errorf("echo %q: answered %+v", text, res)
}

// healthy proves serve still serves: a normal client lists the tools and
// calls echo.
func (h *hostileEnv) healthy(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, done := h.connect(t, ctx, h.bob)
	defer done()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list after the attack: %v", err)
		}
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, hostileServer+"__echo") {
		t.Fatalf("tools/list after the attack: %v", names)
	}
	if err := echo(ctx, cs, "still here"); err != nil {
		t.Fatalf("call after the attack: %v", err)
	}
}

// childOf returns the pid of the server the session's latest lease runs
// (lease.child_started, read from the running serve).
func (h *hostileEnv) childOf(t *testing.T, session string) int {
	t.Helper()
	pid := 0
	for _, e := range h.srv.busEvents("lease.child_started") {
		var c struct {
			PID int `json:"pid"`
		}
		if e.Session == session && json.Unmarshal(e.Data, &c) == nil {
			pid = c.PID
		}
	}
	if pid == 0 || !testproc.Running(pid) {
		t.Fatalf("no running server recorded for session %s (pid %d)", session, pid)
	}
	return pid
}

// servedPIDs lists every process serve runs now (its descendants) or has
// run (the guardians and servers its ledger names).
func (h *hostileEnv) servedPIDs() []int {
	var pids []int
	var walk func(int)
	walk = func(p int) {
		for _, k := range testproc.ChildrenOf(p) {
			pids = append(pids, k)
			walk(k)
		}
	}
	walk(h.srv.cmd.Process.Pid)
	for _, kind := range []string{"guardian.started", "lease.child_started"} {
		for _, e := range h.srv.busEvents(kind) {
			var p struct {
				PID         int `json:"pid"`
				GuardianPID int `json:"guardian_pid"`
				TargetPID   int `json:"target_pid"`
			}
			_ = json.Unmarshal(e.Data, &p)
			pids = append(pids, p.PID, p.GuardianPID, p.TargetPID)
		}
	}
	return slices.DeleteFunc(pids, func(p int) bool { return p == 0 })
}

// rssBytes reads serve's resident set size (VmRSS) from /proc.
func (h *hostileEnv) rssBytes(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(h.srv.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(v, "kB"))); err == nil && kib > 0 {
				return kib << 10
			}
		}
	}
	t.Fatalf("no VmRSS in %q", status)
	return 0
}

// rawPost opens a TCP connection to the endpoint and writes the head of
// a POST with token and a body of length bytes, then the body's first
// bytes.
func (h *hostileEnv) rawPost(t *testing.T, token string, length int, first string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", mcpPath, h.host, token, length, first); err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads one HTTP answer from a raw connection.
func readAnswer(t *testing.T, c net.Conn) answer {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}.check(t, "raw request")
}

// zeros is an endless reader of '0' bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}
