//go:build linux

package gateway

import (
	"slices"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestPrefixes: a server exposed with the prefix "" keeps its own tool
// names and resource URIs, one with a prefix of its own gets it, one
// without keeps <server>__; a name two servers expose is left out of the
// listing and refused with CodeNameCollision, and never reaches either
// server, while the names that do not collide route to their server.
func TestPrefixes(t *testing.T) {
	e := newEnv(t, []server{{"a", testServer(nil)}, {"b", testServer(nil)}, {"c", testServer(nil)}, {"d", testServer(nil)}}, nil,
		func(o *Options, _ *runtime.Options) { o.Prefixes = map[string]string{"a": "", "b": "", "c": "c."} })
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, "", nil)
	defer cs.Close()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(lt)
	if slices.Contains(names, "echo") {
		t.Fatalf("a name both a and b expose is listed: %v", names)
	}
	if !slices.Contains(names, "c.echo") || !slices.Contains(names, "d__echo") {
		t.Fatalf("prefixed names missing: %v", names)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); rpcCode(t, err) != CodeNameCollision {
		t.Fatalf("call of a colliding name: %v, want CodeNameCollision", err)
	}
	for _, name := range []string{"c.echo", "d__echo"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "hi"}})
		if err != nil || res.IsError {
			t.Fatalf("call of %s: %v", name, err)
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "hi"}}); rpcCode(t, err) != CodeInvalidParams {
		t.Fatalf("a server's default name under a prefix of its own: %v, want unknown tool", err)
	}

	// Resources: the two own-URI servers list the same URIs, so those are
	// left out and refused; namespaced ones stay.
	rl, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for {
		for _, r := range rl.Resources {
			uris = append(uris, r.URI)
		}
		if rl.NextCursor == "" {
			break
		}
		if rl, err = cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: rl.NextCursor}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Contains(uris, URIScheme+"c/test://text") || !slices.Contains(uris, URIScheme+"d/test://text") {
		t.Fatalf("namespaced resources missing: %v", uris)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://text"}); rpcCode(t, err) != CodeNameCollision {
		t.Fatalf("read of a colliding URI: %v, want CodeNameCollision", err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: URIScheme + "c/test://text"}); err != nil {
		t.Fatalf("read of a namespaced URI: %v", err)
	}
}

// TestPrefixOwnNames: with one server exposed with the prefix "", a
// client that never listed uses its tool names and resource URIs as the
// server offers them.
func TestPrefixOwnNames(t *testing.T) {
	e := newEnv(t, []server{{"a", testServer(nil)}, {"b", testServer(nil)}}, nil,
		func(o *Options, _ *runtime.Options) { o.Prefixes = map[string]string{"a": ""} })
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, "", nil)
	defer cs.Close()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); err != nil || res.IsError {
		t.Fatalf("call by the server's own name: %v", err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://text"}); err != nil {
		t.Fatalf("read by the server's own URI: %v", err)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "b__echo", Arguments: map[string]any{"text": "hi"}}); err != nil || res.IsError {
		t.Fatalf("call by the default name: %v", err)
	}
}
