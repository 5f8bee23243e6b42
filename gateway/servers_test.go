//go:build linux

package gateway

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSetServers: a reload's new server is offered in the session's next
// listing and is callable; a removed server's tools (pinned before) and
// resources are refused as unknown, and TerminateServer ends its lease
// (lease.terminated{removed}); a list cursor issued before is refused; an
// invalid list is refused and the servers in force are kept.
func TestSetServers(t *testing.T) {
	e := newEnv(t, []server{{"a", testServer(nil)}}, nil, nil)
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, "", nil)
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil || !slices.Contains(toolNames(lt), "a__echo") {
		t.Fatalf("first listing: %v %v", toolNames(lt), err)
	}
	page, err := cs.ListResources(ctx, nil)
	if err != nil || page.NextCursor == "" {
		t.Fatalf("first resources page: %v (cursor %q)", err, page.NextCursor)
	}

	if err := e.cfg.Set("b", testServer(nil)); err != nil {
		t.Fatal(err)
	}
	if err := e.g.SetServers([]string{"b"}, nil); err != nil {
		t.Fatal(err)
	}
	if lt, err = cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	names := toolNames(lt)
	if !slices.Contains(names, "b__echo") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "a__") }) {
		t.Fatalf("listing after the reload: %v", names)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "b__echo", Arguments: map[string]any{"text": "hi"}}); err != nil || res.IsError {
		t.Fatalf("call on the added server: %v", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "hi"}}); rpcCode(t, err) != CodeInvalidParams {
		t.Fatalf("call on the removed server: %v", err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: URIScheme + "a/test://text"}); rpcCode(t, err) != CodeUnknownResource {
		t.Fatalf("read on the removed server: %v", err)
	}
	if _, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: page.NextCursor}); rpcCode(t, err) != CodeInvalidParams {
		t.Fatalf("a cursor of the previous list: %v", err)
	}

	n, err := e.m.TerminateServer(ctx, "a")
	if err != nil || n != 1 {
		t.Fatalf("TerminateServer: %d, %v", n, err)
	}
	removed := e.count("lease.terminated", func(_ events.Envelope, p events.Payload) bool {
		return p.(*events.LeaseTerminated).Reason == events.TerminatedRemoved
	})
	if removed != 1 {
		t.Fatalf("%d lease.terminated{removed}, want 1", removed)
	}

	for _, bad := range [][]string{{"b", "b"}, {"bad__name"}, {""}} {
		if err := e.g.SetServers(bad, nil); !errors.Is(err, ErrServerName) {
			t.Errorf("SetServers(%q): %v, want ErrServerName", bad, err)
		}
	}
	if got := e.g.Servers(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("servers after refused lists: %v", got)
	}
}
