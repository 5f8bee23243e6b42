package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Prompts, completions and a subscribable resource (go-sdk server):
//
//	prompts p0..p2 (listed two per page with the rest), greet (argument
//	"name": one user message "hello <name>"), meta (one message: the
//	request's _meta as JSON), slow (held until cancelled).
//	completion/complete: ref/prompt greet, argument name → the names
//	starting with the value among alice, albert, bob; ref/prompt many →
//	101 values (more than MCP allows); ref/resource test://watched → "1".
//	resources/subscribe and resources/unsubscribe are answered for any
//	uri (listed or not, so the listings stay as they were); each is appended to TESTSERVER_SUBS as "sub <uri>" or
//	"unsub <uri>" before it is answered.

// promptOptions sets the server options of completions and
// subscriptions.
func promptOptions(o *mcp.ServerOptions) {
	subs := os.Getenv("TESTSERVER_SUBS")
	note := func(line string) error {
		if subs == "" {
			return nil
		}
		return appendLine(subs, line)
	}
	o.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error {
		return note("sub " + req.Params.URI)
	}
	o.UnsubscribeHandler = func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
		return note("unsub " + req.Params.URI)
	}
	o.CompletionHandler = func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
		var vals []string
		switch ref := req.Params.Ref; {
		case ref.Type == "ref/prompt" && ref.Name == "greet":
			for _, n := range []string{"alice", "albert", "bob"} {
				if strings.HasPrefix(n, req.Params.Argument.Value) {
					vals = append(vals, n)
				}
			}
		case ref.Type == "ref/prompt" && ref.Name == "many":
			for i := range 101 {
				vals = append(vals, strconv.Itoa(i))
			}
		case ref.Type == "ref/resource" && ref.URI == "test://watched":
			vals = []string{"1"}
		}
		if vals == nil {
			vals = []string{}
		}
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: vals, Total: len(vals)}}, nil
	}
}

// addPrompts adds the prompts.
func addPrompts(s *mcp.Server) {
	msg := func(t string) *mcp.GetPromptResult {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: t}}}}
	}
	for i := range 3 {
		s.AddPrompt(&mcp.Prompt{Name: "p" + strconv.Itoa(i)}, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return msg("prompt " + strconv.Itoa(i)), nil
		})
	}
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "name", Required: true}}},
		func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return msg("hello " + req.Params.Arguments["name"]), nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "meta"}, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		b, _ := json.Marshal(req.Params.Meta)
		return msg(string(b)), nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "slow"}, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		<-ctx.Done() // held until the client cancels (or the session ends)
		return nil, ctx.Err()
	})
}
