//go:build linux

package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A prompt through a caller-owned handle: registered durably before it is
// sent, with the caller's _meta beside the handle's progress token;
// request.registered keeps the prompt name's digest, never the name or
// the arguments. A subscription is the session's until it unsubscribes
// or ends.
func ExampleLeaseCapability_GetPrompt() {
	helper, server := runtime.BuiltBinaries()
	dir, err := os.MkdirTemp("", "runtime-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: filepath.Join(dir, "ledger")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	src := &runtime.MapConfigSource{}
	src.Set("tools", runtime.ServerConfig{Command: server})
	m, err := runtime.NewManager(runtime.Options{Config: src, Ledger: l, HelperPath: helper})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(context.Background())
	ctx := context.Background()
	scope, err := m.OpenSession(ctx, "s-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	capa := scope.Capability()
	owner, err := capa.NewOwner(ctx) // one agent turn
	if err != nil {
		fmt.Println(err)
		return
	}
	opts := runtime.DefaultRequestOptions()
	opts.Meta = map[string]any{"trace": "turn-7"} // e.g. the gateway's client's _meta
	h, err := capa.GetPrompt(ctx, owner, "tools", &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "ada"}}, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Await(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Prompt.Messages[0].Content.(*mcp.TextContent).Text)

	h, err = capa.Subscribe(ctx, owner, "tools", "test://item/1", runtime.DefaultRequestOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	if res, err = h.Await(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("subscribed:", res.Subscribed)
	if _, err := owner.End(ctx); err != nil {
		fmt.Println(err)
	}
	if err := scope.Release(ctx); err != nil { // the session's end ends its subscription
		fmt.Println(err)
	}
	for env, err := range l.Events(ctx, ledger.Query{}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		switch env.Kind {
		case "request.registered", "subscription.started", "subscription.ended":
			p, _ := events.DecodePayload(env.Kind, env.Data)
			switch p := p.(type) {
			case *events.RequestRegistered:
				fmt.Println(env.Kind, p.Method, "name digest:", p.NameSHA256 != "", "uri digest:", p.URISHA256 != "")
			case *events.SubscriptionEnded:
				fmt.Println(env.Kind, p.Reason)
			default:
				fmt.Println(env.Kind)
			}
		}
	}
	// Output:
	// hello ada
	// subscribed: true
	// request.registered prompts/get name digest: true uri digest: false
	// request.registered resources/subscribe name digest: false uri digest: true
	// subscription.started
	// subscription.ended session_ended
}
