//go:build linux

package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rawPost sends a raw MCP POST and returns the status, headers and body.
func (e *env) rawPost(body string, hdr map[string]string) (int, http.Header, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(body))
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
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// rawSession opens an MCP session with raw POSTs and returns its id.
func (e *env) rawSession() string {
	e.t.Helper()
	code, h, body := e.rawPost(initBody, nil)
	id := h.Get(headerSessionID)
	if code != http.StatusOK || id == "" {
		e.t.Fatalf("initialize: %d %q", code, body)
	}
	if code, _, body := e.rawPost(`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		map[string]string{headerSessionID: id, "MCP-Protocol-Version": "2025-11-25"}); code != http.StatusAccepted {
		e.t.Fatalf("initialized: %d %q", code, body)
	}
	return id
}

// rpcReply is the JSON-RPC message in a reply body: a JSON body, or the
// first data line of an event stream.
func rpcReply(t *testing.T, body string) (id json.RawMessage, code int64, msg string) {
	t.Helper()
	data := body
	if i := strings.Index(body, "data: "); i >= 0 {
		data, _, _ = strings.Cut(body[i+len("data: "):], "\n")
	}
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("reply %q is no JSON-RPC message: %v", body, err)
	}
	if m.Error == nil {
		return m.ID, 0, ""
	}
	return m.ID, m.Error.Code, m.Error.Message
}

// TestStalledBodiesHoldNoSlot: twice the session cap of clients that sent
// an initialize's headers and one byte of its body, then stalled, hold no
// slot — a normal client opens a session beside them — and each is
// answered 408 once the body read timeout passes.
func TestStalledBodiesHoldNoSlot(t *testing.T) {
	const maxSessions = 2
	e := newEnv(t, []server{{"tools", testServer(nil)}}, nil, func(o *Options, _ *runtime.Options) {
		o.MaxSessions, o.BodyReadTimeout = maxSessions, 2*time.Second
	})
	u, err := url.Parse(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var stalled []net.Conn
	for range 2 * maxSessions {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n{", u.Host, len(initBody))
		stalled = append(stalled, c)
	}
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, "", nil)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	for i, c := range stalled {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("stalled client %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || strings.TrimSpace(string(b)) != msgBodyTimeout {
			t.Fatalf("stalled client %d: %d %q, want 408", i, resp.StatusCode, b)
		}
	}
}

// TestUnauthorizedSaysBearer: a request without a token is answered 401
// with WWW-Authenticate: Bearer, as docs/gateway.md says.
func TestUnauthorizedSaysBearer(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, nil)
	code, h, _ := e.rawPost(initBody, nil)
	if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("status %d, WWW-Authenticate %q", code, h.Get("WWW-Authenticate"))
	}
}

// TestErrorsQuoteNobody: whatever a client puts in a method, params,
// header or id, no error answer carries it back, and none has code 0;
// ids come back byte for byte or the request is refused as invalid.
func TestErrorsQuoteNobody(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, nil, nil)
	const mark = "<script>"
	if code, _, body := e.rawPost(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, nil); code != http.StatusBadRequest || strings.Contains(body, mark) {
		t.Fatalf("a request without a session: %d %q", code, body)
	} else if id, rc, msg := rpcReply(t, body); string(id) != "7" || rc != -32600 || msg != msgNoSession {
		t.Fatalf("a request without a session: id %s code %d %q", id, rc, msg)
	}
	sid := e.rawSession()
	hdr := map[string]string{headerSessionID: sid, "MCP-Protocol-Version": "2025-11-25"}
	for name, c := range map[string]struct {
		body string
		code int64
	}{
		"unknown method":      {`{"jsonrpc":"2.0","id":2,"method":"foo` + mark + `"}`, -32601},
		"params of bad type":  {`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":{"x":"` + mark + `"}}}`, -32602},
		"unknown tool":        {`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"` + mark + `"}}`, CodeInvalidParams},
		"unknown resource":    {`{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"` + mark + `"}}`, CodeUnknownResource},
		"cursor not ours":     {`{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"cursor":"` + mark + `"}}`, CodeInvalidParams},
		"notification as req": {`{"jsonrpc":"2.0","id":9,"method":"notifications/initialized","params":{"x":"` + mark + `"}}`, -32600},
		"request without id":  {`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"` + mark + `"}}`, -32600},
	} {
		status, _, body := e.rawPost(c.body, hdr)
		if strings.Contains(body, mark) {
			t.Errorf("%s: the answer quotes the client: %d %q", name, status, body)
			continue
		}
		_, code, msg := rpcReply(t, body)
		if code == 0 || !ownMessages[msg] || c.code != 0 && code != c.code {
			t.Errorf("%s: code %d %q, want code %d and the gateway's own text", name, code, msg, c.code)
		}
	}
	// Headers the go-sdk would quote.
	for name, h := range map[string]map[string]string{
		"protocol version": {headerSessionID: sid, "MCP-Protocol-Version": mark},
		"session id":       {headerSessionID: mark, "MCP-Protocol-Version": "2025-11-25"},
	} {
		if status, _, body := e.rawPost(`{"jsonrpc":"2.0","id":10,"method":"ping"}`, h); strings.Contains(body, mark) || status < 400 {
			t.Errorf("%s header: %d %q", name, status, body)
		}
	}
	// Ids: carried back byte for byte, or refused.
	for _, id := range []string{`"a-1"`, `-42`, `9007199254740992`, `-9007199254740992`, `"` + strings.Repeat("z", 300) + `"`} {
		status, _, body := e.rawPost(`{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`, hdr)
		if got, code, _ := rpcReply(t, body); status != http.StatusOK || string(got) != id || code != 0 {
			t.Errorf("id %s: %d, came back as %s (code %d)", id, status, got, code)
		}
	}
	for _, id := range []string{`9007199254740993`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775809`, `1.5`, `1e3`, `{}`, `[1]`, `true`} {
		status, _, body := e.rawPost(`{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`, hdr)
		if got, code, msg := rpcReply(t, body); status != http.StatusBadRequest || string(got) != "null" || code != -32600 || msg != msgInvalidID {
			t.Errorf("id %s: %d id %s code %d %q, want 400 invalid request id", id, status, got, code, msg)
		}
	}
	// Bodies that are no single JSON-RPC message.
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"`:    msgParse,
		strings.Repeat("[", 100000):                  msgParse,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`: msgBatch,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`:   msgInvalidReq,
		`{"jsonrpc":"2.0"}`:                          msgInvalidReq,
	} {
		status, _, got := e.rawPost(body, hdr)
		if _, code, msg := rpcReply(t, got); status != http.StatusBadRequest || code == 0 || msg != want {
			t.Errorf("body %.40q: %d code %d %q, want %q", body, status, code, msg, want)
		}
	}
	// The session is still healthy.
	if status, _, body := e.rawPost(`{"jsonrpc":"2.0","id":11,"method":"tools/list"}`, hdr); status != http.StatusOK {
		t.Fatalf("tools/list after the hostile requests: %d %q", status, body)
	} else if _, code, _ := rpcReply(t, body); code != 0 {
		t.Fatalf("tools/list after the hostile requests: code %d", code)
	}
}

// TestCallTimeoutAnswered: a call that runs past its budget is answered
// CodeRequestTimeout with the gateway's static text, and the session goes
// on.
func TestCallTimeoutAnswered(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, nil, func(_ *Options, r *runtime.Options) {
		r.CallTimeout = 500 * time.Millisecond
	})
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, "", nil)
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__slow", Arguments: map[string]any{"ms": 5000}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != CodeRequestTimeout || we.Message != msgTimeout {
		t.Fatalf("a call past its budget: %v, want code %d", err, CodeRequestTimeout)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"text": "after"}}); err != nil || res.IsError {
		t.Fatalf("call after the timeout: %v", err)
	}
}

// TestStaticJSON: an error whose text is not the gateway's becomes the
// static text of its code, without data; code 0 becomes internal error;
// the gateway's own errors and results pass unchanged.
func TestStaticJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"method not found: \"x<y\""}}`:                `{"error":{"code":-32601,"message":"gateway: method not found"},"id":1,"jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":"q","error":{"code":0,"message":"boom x<y"}}`:                                    `{"error":{"code":-32603,"message":"gateway: internal error"},"id":"q","jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"gateway: invalid params","data":"x"}}`:       `{"error":{"code":-32602,"message":"gateway: invalid params"},"id":2,"jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32013,"message":"gateway: server refused for this session"}}`: `{"jsonrpc":"2.0","id":3,"error":{"code":-32013,"message":"gateway: server refused for this session"}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"error":"fine"}}`:                                                    `{"jsonrpc":"2.0","id":4,"result":{"error":"fine"}}`,
	} {
		if got := string(staticJSON([]byte(in))); got != want {
			t.Errorf("staticJSON(%s)\n got %s\nwant %s", in, got, want)
		}
	}
	event := "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"bad x<y\"}}\n\n"
	if got := string(staticEvent([]byte(event))); strings.Contains(got, "x<y") || !strings.HasPrefix(got, "event: message\nid: 1\ndata: {") || !strings.HasSuffix(got, "}\n\n") {
		t.Errorf("staticEvent: %q", got)
	}
}

// TestOwnMessagesComplete: every msg… constant of the package is one of
// the gateway's own texts, so that answerWriter never rewrites the
// gateway's own answers.
func TestOwnMessagesComplete(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(node ast.Node) bool {
				vs, ok := node.(*ast.ValueSpec)
				if !ok {
					return true
				}
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "msg") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					n++
					if !ownMessages[v] {
						t.Errorf("%s (%q) is not in ownMessages", name.Name, v)
					}
				}
				return true
			})
		}
	}
	if n < 20 {
		t.Fatalf("found only %d msg constants", n)
	}
}
