//go:build linux

package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A whole host: a ledger, a manager reading mcp.json, one session that
// lists a server's tools and calls one, then release and close. The MCP
// server is the go-sdk test server the test suite builds; in a real host
// the helper sits beside the executable and mcp.json names real servers.
func Example() {
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
	config := filepath.Join(dir, "mcp.json")
	doc := fmt.Sprintf(`{"mcpServers": {"tools": {"command": %q}}}`, server)
	if err := os.WriteFile(config, []byte(doc), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	m, err := runtime.NewManager(runtime.Options{
		Config:     runtime.FileConfigSource{Path: config},
		Ledger:     l,
		HelperPath: helper,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx := context.Background()
	scope, err := m.OpenSession(ctx, "s-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "tools") // starts the child, pins its listing
	if err != nil {
		fmt.Println(err)
		return
	}
	var names []string
	var echo *mcp.Tool
	for _, t := range tools {
		names = append(names, t.Name)
		if t.Name == "echo" {
			echo = t.Tool
		}
	}
	fmt.Println("tools:", strings.Join(names, " "))

	// The host authorizes the exact tool by its schema digest.
	digest, err := runtime.ToolDigest(echo)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := capa.Call(ctx, runtime.CallRequest{Server: "tools", Tool: "echo", Digest: digest,
		Arguments: map[string]any{"text": "hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("echo:", res.Content[0].(*mcp.TextContent).Text)

	// The last owner's release ends the session's leases; Close ends the
	// rest. Both report what failed to record.
	if err := scope.Release(ctx); err != nil {
		fmt.Println(err)
	}
	if err := m.Close(ctx); err != nil {
		fmt.Println(err)
	}

	seen := map[string]bool{}
	for env, err := range l.Events(ctx, ledger.Query{}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		seen[string(env.Kind)] = true
	}
	var recorded []string
	for _, k := range []string{"lease.acquired", "call.admitted", "call.finished", "session.ended", "lease.terminated", "guardian.receipt", "connection.closed"} {
		if seen[k] {
			recorded = append(recorded, k)
		}
	}
	fmt.Println("recorded:", strings.Join(recorded, " "))
	// Output:
	// tools: crash echo fail progress refuse slow
	// echo: hello
	// recorded: lease.acquired call.admitted call.finished session.ended lease.terminated guardian.receipt connection.closed
}

// The digest a host computes for the tool it authorizes: key order and
// number spelling in the schema do not change it.
func ExampleToolDigest() {
	a := &mcp.Tool{Name: "search", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}
	b := &mcp.Tool{Name: "search", InputSchema: json.RawMessage(`{"properties":{"q":{"type":"string"}},"type":"object"}`)}
	da, _ := runtime.ToolDigest(a)
	db, _ := runtime.ToolDigest(b)
	fmt.Println(len(da), da == db)
	// Output: 64 true
}

// ParseConfig reads the usual mcp.json; unknown keys are left to other
// tools.
func ExampleParseConfig() {
	servers, err := runtime.ParseConfig([]byte(`{"mcpServers": {
		"github": {"command": "github-mcp", "args": ["stdio"], "env": {"TOKEN_FILE": "/run/token"}},
		"search": {"command": "search-mcp", "shared": true}
	}, "editor": {}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(servers["github"].Command, servers["github"].Args, servers["search"].Shared)
	// Output: github-mcp [stdio] true
}

// A config change is a new fingerprint: a lease pinned to the old one is
// replaced before the next call. Env order does not matter.
func ExampleServerConfig_Fingerprint() {
	// A Manager keys its fingerprints with a random key it never records;
	// here a fixed one.
	key := []byte("example key")
	a := runtime.ServerConfig{Command: "github-mcp", Env: map[string]string{"A": "1", "B": "2"}}
	b := runtime.ServerConfig{Command: "github-mcp", Env: map[string]string{"B": "2", "A": "1"}}
	c := runtime.ServerConfig{Command: "github-mcp", Env: map[string]string{"A": "1", "B": "3"}}
	fmt.Println(a.Fingerprint(key) == b.Fingerprint(key), a.Fingerprint(key) == c.Fingerprint(key))
	fmt.Println(a.Fingerprint(key) == a.Fingerprint([]byte("another key")))
	// Output:
	// true false
	// false
}

// Errors are *LeaseError values: branch on the sentinel with errors.Is,
// read the identities with errors.As.
func ExampleLeaseError() {
	src := &runtime.MapConfigSource{}
	_, err := src.Lookup(context.Background(), "github")
	var le *runtime.LeaseError
	if errors.Is(err, runtime.ErrConfigMissing) && errors.As(err, &le) {
		fmt.Println(le.Op, le.Server)
		fmt.Println(err)
	}
	// Output:
	// config github
	// runtime: server not configured (config server=github)
}

// Resource requests are caller-owned handles: an owner per agent turn,
// a start that returns once request.registered is durable, an Await that
// returns the result once, a Cancel that reports what it could observe,
// and the owner's end settling whatever it still holds.
func ExampleLeaseCapability_ReadResource() {
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
	src.Set("docs", runtime.ServerConfig{Command: server})
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
	defer scope.Release(ctx)
	capa := scope.Capability()

	turn, endTurn := context.WithCancel(ctx)
	defer endTurn()
	owner, err := capa.NewOwner(turn) // ends with the turn, or owner.End
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := capa.ReadResource(ctx, owner, "docs", "test://text", runtime.DefaultRequestOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := h.Await(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("contents:", len(res.Read.Contents), res.Read.Contents[0].Text)
	_, err = h.Await(ctx)
	fmt.Println("again:", errors.Is(err, runtime.ErrHandleSettled))

	slow, err := capa.ReadResource(ctx, owner, "docs", "test://slow", runtime.RequestOptions{Budget: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	for len(slow.WireIDs()) == 0 { // wait until it is on the wire
		time.Sleep(time.Millisecond)
	}
	rep, err := slow.Cancel(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("cancel:", rep.Settlement, rep.TransportAccepted, rep.NotificationDelivered, rep.Remote)
	end, err := owner.End(ctx)
	fmt.Println("owner end settled:", len(end.Settled), err)
	// Output:
	// contents: 3 first
	// again: true
	// cancel: settled yes yes unknown
	// owner end settled: 0 <nil>
}
