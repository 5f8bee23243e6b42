// Package peertools adds the tools of the runtime's server→client tests to
// a go-sdk server: tools that ask the client for sampling, elicitation and
// roots, ones that log (during a call, and after its cancellation), one
// that notifies a resource update, and ones that change the server's tool
// and prompt lists. The test server binary (stdio) and the runtime's
// in-process HTTP tests serve the same tools.
//
// Every tool answers with text: what the client answered, or "error
// <code>" when the client's side refused (the JSON-RPC code). Requests
// carry the text "SECRET", so a test can prove none of it is recorded.
package peertools

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func failed(err error) *mcp.CallToolResult {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return text("error " + strconv.FormatInt(we.Code, 10))
	}
	return text("error " + err.Error())
}

var obj = json.RawMessage(`{"type":"object"}`)

// MutableSchemas are the input schemas of the "mutable" tool before and
// after "change".
var MutableSchemas = [2]string{
	`{"type":"object","properties":{"a":{"type":"string"}}}`,
	`{"type":"object","properties":{"b":{"type":"integer"}}}`,
}

// Add adds the tools to s.
//
//	sample   sampling/createMessage; answers the first text content of the result
//	elicit   elicitation/create (form: {"name": string}); answers "<action> <name>"
//	roots    roots/list; answers the root URIs, space separated
//	log      logs {"level"} (default info) with data "SECRET log"; answers "logged"
//	mutable  answers "mutable"; its schema changes with change
//	change   replaces mutable's schema (tools/list_changed) and adds a prompt
//	         (prompts/list_changed); answers "changed"
//	touch    {"uri"}: notifications/resources/updated of uri to the sessions
//	         subscribed to it (the server's SubscribeHandler records them:
//	         a server without one has none); answers "touched"
//	logcancel logs {"level"} (default info) with data "SECRET log" during the
//	         call, waits until the call is cancelled, then logs data
//	         "SECRET log after cancel" outside any request and, with
//	         {"sample": true}, then asks for sampling outside any request;
//	         answers "cancelled" (after the cancellation: the client never
//	         reads it)
func Add(s *mcp.Server) {
	s.AddTool(&mcp.Tool{Name: "sample", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "SECRET prompt"}}}})
		if err != nil {
			return failed(err), nil
		}
		if t, ok := res.Content.(*mcp.TextContent); ok {
			return text(t.Text), nil
		}
		return text("?"), nil
	})
	s.AddTool(&mcp.Tool{Name: "elicit", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "SECRET question",
			RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
		if err != nil {
			return failed(err), nil
		}
		name, _ := res.Content["name"].(string)
		return text(res.Action + " " + name), nil
	})
	s.AddTool(&mcp.Tool{Name: "roots", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return failed(err), nil
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return text(strings.Join(uris, " ")), nil
	})
	s.AddTool(&mcp.Tool{Name: "log", InputSchema: json.RawMessage(`{"type":"object","properties":{"level":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Level string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			if in.Level == "" {
				in.Level = "info"
			}
			if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: mcp.LoggingLevel(in.Level), Data: "SECRET log"}); err != nil {
				return failed(err), nil
			}
			return text("logged"), nil
		})
	s.AddTool(&mcp.Tool{Name: "touch", InputSchema: json.RawMessage(`{"type":"object","properties":{"uri":{"type":"string"}},"required":["uri"]}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ URI string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			if err := s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: in.URI}); err != nil {
				return failed(err), nil
			}
			return text("touched"), nil
		})
	s.AddTool(&mcp.Tool{Name: "logcancel", InputSchema: json.RawMessage(`{"type":"object","properties":{"level":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Level  string
				Sample bool
			}
			_ = json.Unmarshal(req.Params.Arguments, &in)
			if in.Level == "" {
				in.Level = "info"
			}
			if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: mcp.LoggingLevel(in.Level), Data: "SECRET log"}); err != nil {
				return failed(err), nil
			}
			<-ctx.Done()
			// Tied to no request: the call is over for the client.
			after := context.Background()
			_ = req.Session.Log(after, &mcp.LoggingMessageParams{Level: mcp.LoggingLevel(in.Level), Data: "SECRET log after cancel"})
			if in.Sample {
				_, _ = req.Session.CreateMessage(after, &mcp.CreateMessageParams{MaxTokens: 10,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "SECRET prompt"}}}})
			}
			return text("cancelled"), nil
		})
	var mu sync.Mutex
	variant := 0
	addMutable := func() {
		s.AddTool(&mcp.Tool{Name: "mutable", InputSchema: json.RawMessage(MutableSchemas[variant])},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("mutable"), nil })
	}
	addMutable()
	s.AddTool(&mcp.Tool{Name: "change", InputSchema: obj}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		variant = 1 - variant
		addMutable() // replaces the tool: tools/list_changed
		mu.Unlock()
		s.AddPrompt(&mcp.Prompt{Name: "changed"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
		return text("changed"), nil
	})
}
