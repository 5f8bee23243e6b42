package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// addResources adds the resources and templates of the go-sdk server.
func addResources(s *mcp.Server) {
	text := func(uri, t string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: t}}}
	}
	for i := range 5 {
		uri := "test://item/" + strconv.Itoa(i)
		s.AddResource(&mcp.Resource{URI: uri, Name: "item" + strconv.Itoa(i), MIMEType: "text/plain"},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return text(uri, "item "+strconv.Itoa(i)), nil
			})
	}
	for i := range 3 {
		s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://tpl" + strconv.Itoa(i) + "/{x}", Name: "tpl" + strconv.Itoa(i)},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return text(req.Params.URI, "template "+strconv.Itoa(i)), nil
			})
	}
	s.AddResource(&mcp.Resource{URI: "test://text", Name: "text"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Meta: mcp.Meta{"origin": "testserver"}, Contents: []*mcp.ResourceContents{
				{URI: "test://text", MIMEType: "text/plain", Text: "first"},
				{URI: "test://text#2", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2, 255}},
				{URI: "test://text#3", MIMEType: "text/plain", Text: "third"}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: "test://slow", Name: "slow"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			<-ctx.Done() // held until the client cancels (or the session ends)
			return nil, ctx.Err()
		})
	s.AddResource(&mcp.Resource{URI: "test://delay", Name: "delay"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			select { // answered after a second, so another owner can end meanwhile
			case <-time.After(time.Second):
				return text("test://delay", "delayed"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	s.AddResource(&mcp.Resource{URI: "test://progress", Name: "progress"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= 3; i++ {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
						Progress: float64(i), Total: 3, Message: "step " + strconv.Itoa(i)})
				}
			}
			return text("test://progress", "done"), nil
		})
}

// runMRTR is a raw newline-delimited JSON-RPC MCP server: initialize,
// tools/list (none), ping, and resources/read answered first with an
// input_required result (a roots/list input request and a request state),
// then, on the retry that echoes the state, with the contents. A read of
// test://mrtr-slow is held after the continuation until the client
// cancels it; test://bad answers with contents that break the envelope.
// Every notifications/cancelled's request id is appended to cancels.
func runMRTR(in io.Reader, out io.Writer, cancels string) {
	var wmu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(v any) {
		wmu.Lock()
		defer wmu.Unlock()
		_ = enc.Encode(v)
	}
	reply := func(id json.RawMessage, result any) {
		send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	}
	held := map[string]json.RawMessage{} // wire id text → id, reads held until cancelled
	var mu sync.Mutex
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch m.Method {
		case "initialize":
			var p struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			_ = json.Unmarshal(m.Params, &p)
			reply(m.ID, map[string]any{"protocolVersion": p.ProtocolVersion,
				"capabilities": map[string]any{"tools": map[string]any{}, "resources": map[string]any{}},
				"serverInfo":   map[string]any{"name": "mrtr", "version": "0"}})
		case "tools/list":
			reply(m.ID, map[string]any{"tools": []any{}})
		case "ping":
			reply(m.ID, map[string]any{})
		case "notifications/cancelled":
			var p struct {
				RequestID any `json:"requestId"`
			}
			_ = json.Unmarshal(m.Params, &p)
			if cancels != "" {
				_ = appendLine(cancels, fmt.Sprint(p.RequestID))
			}
		case "resources/read":
			var p struct {
				URI          string `json:"uri"`
				RequestState string `json:"requestState"`
			}
			_ = json.Unmarshal(m.Params, &p)
			switch {
			case p.URI == "test://bad":
				reply(m.ID, map[string]any{"contents": []any{map[string]any{"text": "no uri"}}})
			case p.RequestState == "":
				reply(m.ID, map[string]any{"resultType": "input_required", "requestState": "round1",
					"inputRequests": map[string]any{"r1": map[string]any{"method": "roots/list", "params": map[string]any{}}}})
			case p.URI == "test://mrtr-slow":
				mu.Lock()
				held[string(m.ID)] = m.ID
				mu.Unlock()
			default:
				reply(m.ID, map[string]any{"contents": []any{map[string]any{"uri": p.URI, "text": "after " + p.RequestState}}})
			}
		}
	}
}
