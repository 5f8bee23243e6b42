//go:build linux

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func toolNames(res *mcp.ListToolsResult) []string {
	var out []string
	for _, t := range res.Tools {
		out = append(out, t.Name)
	}
	return out
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("content: %d items", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return tc.Text
}

// rpcCode returns the JSON-RPC code of a client call's error.
func rpcCode(t *testing.T, err error) int64 {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a JSON-RPC error", err, err)
	}
	return we.Code
}

// One MCP session over the go-sdk test server: tools listed under
// <server>__<tool>, calls through the runtime (results and tool errors
// pass through, a server's error response keeps its code and loses its
// text), resources and templates listed page by page under
// leaseledger://, reads with progress, and the session's end recorded.
func TestSessionToolsAndResources(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, nil)
	ctx := ctxT(t, time.Minute)
	prog := &progressLog{}
	cs := e.mustConnect(ctx, e.plain["alice"], prog)
	id := cs.ID()
	if !strings.HasPrefix(id, SessionIDPrefix) || !events.ValidID(id) {
		t.Fatalf("session id %q", id)
	}
	if got := e.g.Sessions(); len(got) != 1 || got[0].ID != id || got[0].Principal != "alice" {
		t.Fatalf("Sessions: %+v", got)
	}

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tools__crash", "tools__echo", "tools__fail", "tools__progress", "tools__refuse", "tools__slow"}
	if got := toolNames(lt); !slices.Equal(got, want) {
		t.Fatalf("tools: %v", got)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError || text(t, res) != "hi" {
		t.Fatalf("echo: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__fail", Arguments: map[string]any{}})
	if err != nil || !res.IsError || text(t, res) != "SECRET provider text" {
		t.Fatalf("fail: a tool error passes through as the server produced it: %v %+v", err, res)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__refuse", Arguments: map[string]any{}})
	if err == nil || rpcCode(t, err) != jsonrpc.CodeInvalidParams || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("refuse: want the server's code without its text, got %v", err)
	}
	for _, name := range []string{"tools__nope", "nope__echo", "echo", "tools__"} {
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err == nil || rpcCode(t, err) != CodeInvalidParams || !strings.Contains(err.Error(), msgUnknownTool) {
			t.Fatalf("%s: %v", name, err)
		}
	}

	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	if len(uris) != 9 || !slices.Contains(uris, "leaseledger://tools/test://item/4") || !slices.Contains(uris, "leaseledger://tools/test://progress") {
		t.Fatalf("resources: %v", uris)
	}
	var tpls []string
	for r, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		tpls = append(tpls, r.URITemplate)
	}
	if !slices.Equal(tpls, []string{"leaseledger://tools/test://tpl0/{x}", "leaseledger://tools/test://tpl1/{x}", "leaseledger://tools/test://tpl2/{x}"}) {
		t.Fatalf("templates: %v", tpls)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "leaseledger://tools/test://tpl1/abc"})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "template 1" || rr.Contents[0].URI != "test://tpl1/abc" {
		t.Fatalf("template read: %v %+v", err, rr)
	}
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "leaseledger://tools/test://text"})
	if err != nil || len(rr.Contents) != 3 || rr.Contents[1].Blob == nil || rr.Meta["origin"] != "testserver" {
		t.Fatalf("text read passes through: %v %+v", err, rr)
	}
	rp := &mcp.ReadResourceParams{URI: "leaseledger://tools/test://progress"}
	rp.SetProgressToken("p-1")
	if rr, err = cs.ReadResource(ctx, rp); err != nil || rr.Contents[0].Text != "done" {
		t.Fatalf("progress read: %v %+v", err, rr)
	}
	testproc.Eventually(t, "three progress notifications", func() bool { return prog.n.Load() >= 3 })
	prog.mu.Lock()
	for i, p := range prog.got {
		if p.ProgressToken != "p-1" || p.Progress != float64(i+1) || p.Total != 3 {
			t.Errorf("progress %d: %+v", i, p)
		}
	}
	prog.mu.Unlock()
	prog.reset()
	cp := &mcp.CallToolParams{Name: "tools__progress", Arguments: map[string]any{"n": 3}}
	cp.SetProgressToken("c-1")
	if res, err = cs.CallTool(ctx, cp); err != nil || text(t, res) != "sent 3" {
		t.Fatalf("progress call: %v %+v", err, res)
	}
	testproc.Eventually(t, "three call progress notifications", func() bool { return prog.n.Load() >= 3 })
	prog.mu.Lock()
	for i, p := range prog.got {
		if p.ProgressToken != "c-1" || p.Progress != float64(i+1) || p.Total != 3 {
			t.Errorf("call progress %d: %+v", i, p)
		}
	}
	prog.mu.Unlock()
	for _, uri := range []string{"test://item/0", "leaseledger://nope/test://item/0", "leaseledger://tools/", "leaseledger://tools"} {
		_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err == nil || rpcCode(t, err) != CodeUnknownResource {
			t.Fatalf("%s: %v", uri, err)
		}
	}
	if _, err = cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: "garbage"}); err == nil || rpcCode(t, err) != CodeInvalidParams {
		t.Fatalf("bad cursor: %v", err)
	}

	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "session end", func() bool { return len(e.g.Sessions()) == 0 })
	if n := e.count("session.ended", func(x events.Envelope, _ events.Payload) bool { return x.Session == id }); n != 1 {
		t.Fatalf("session.ended for %s: %d", id, n)
	}
	if n := e.count("session.opened", func(x events.Envelope, p events.Payload) bool {
		o := p.(*events.SessionOpened)
		return x.Session == id && o.Principal == "alice" && o.Transport == events.SessionMCPHTTP
	}); n != 1 {
		t.Fatalf("session.opened{alice, mcp_http} for %s: %d", id, n)
	}
	if n := e.count("lease.terminated", nil); n != 1 {
		t.Fatalf("lease.terminated: %d", n)
	}
}

// mustJSON marshals v.
func mustJSON(v any) json.RawMessage { b, _ := json.Marshal(v); return b }

var _ = context.Background

// rawCall posts one JSON-RPC message in session sid and returns the
// response body (JSON or one SSE event's data).
func (e *env) rawCall(token, sid, body string) (int, string, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Requests without "params" (the official TypeScript client sends
// resources/list so) are served as an empty cursor or refused as invalid
// params, never a crash of the process.
func TestRequestsWithoutParams(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, nil)
	tok := e.plain["alice"]
	code, _, h := e.rawCall(tok, "", initBody)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q", code, sid)
	}
	if code, _, _ := e.rawCall(tok, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d", code)
	}
	for i, c := range []struct{ method, want string }{
		{"tools/list", `"tools__echo"`},
		{"resources/list", `"resources":[`},
		{"resources/templates/list", `"resourceTemplates":[`},
		{"tools/call", ""},
		{"resources/read", ""},
	} {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q}`, i+2, c.method)
		code, out, _ := e.rawCall(tok, sid, body)
		if c.want == "" { // the go-sdk refuses these before the gateway sees them
			if code != http.StatusBadRequest {
				t.Errorf("%s without params: %d %s", c.method, code, out)
			}
			continue
		}
		if code != http.StatusOK || !strings.Contains(out, c.want) {
			t.Errorf("%s without params: %d %s", c.method, code, out)
		}
	}
	// The process and the session are still alive.
	if code, out, _ := e.rawCall(tok, sid, `{"jsonrpc":"2.0","id":99,"method":"tools/list","params":{}}`); code != http.StatusOK || !strings.Contains(out, "tools__echo") {
		t.Fatalf("after: %d %s", code, out)
	}
}
