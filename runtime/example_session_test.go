//go:build linux

package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime"
)

// A gateway opens each client's session under the name of the access
// token that opened it; session.opened is durable before the scope is
// returned. A principal must be an identifier (never the token itself).
func ExampleManager_OpenSessionWith() {
	helper, _ := runtime.BuiltBinaries()
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
	m, err := runtime.NewManager(runtime.Options{Config: &runtime.MapConfigSource{}, Ledger: l, HelperPath: helper})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(context.Background())
	ctx := context.Background()

	_, err = m.OpenSessionWith(ctx, "mcp-1", runtime.SessionOptions{Principal: "Bearer abc", Transport: events.SessionMCPHTTP})
	fmt.Println("token as principal refused:", errors.Is(err, runtime.ErrInvalidRequest))

	scope, err := m.OpenSessionWith(ctx, "mcp-1", runtime.SessionOptions{Principal: "team-a", Transport: events.SessionMCPHTTP})
	if err != nil {
		fmt.Println(err)
		return
	}
	for env, err := range l.Events(ctx, ledger.Query{}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(env.Kind, env.Session, string(env.Data))
	}
	if err := scope.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// token as principal refused: true
	// session.opened mcp-1 {"principal":"team-a","transport":"mcp_http"}
}

// A call that asks for progress: the server's notifications reach the
// callback in order, before Call returns.
func ExampleCallRequest_progress() {
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
	defer scope.Release(ctx)
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "tools")
	if err != nil {
		fmt.Println(err)
		return
	}
	var digest string
	for _, t := range tools {
		if t.Name == "progress" {
			digest = t.Digest
		}
	}
	_, err = capa.Call(ctx, runtime.CallRequest{Server: "tools", Tool: "progress", Digest: digest,
		Arguments: map[string]any{"n": 3},
		Progress: func(p runtime.Progress) {
			// Called one at a time from a goroutine of the call; forward it
			// (a gateway notifies its own client) and return promptly.
			fmt.Printf("progress %v/%v (dropped %d)\n", p.Progress, p.Total, p.Dropped)
		}})
	fmt.Println("call returned:", err)
	// Output:
	// progress 1/3 (dropped 0)
	// progress 2/3 (dropped 0)
	// progress 3/3 (dropped 0)
	// call returned: <nil>
}
