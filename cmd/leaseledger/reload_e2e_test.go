//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeReload: SIGHUP puts an edited mcp.json in force without a
// restart — a server added is listed and callable from a session opened
// before, a server removed has its lease ended through the normal close
// (lease.terminated{removed}, confirmed by audit --all) — and each
// configuration in force is recorded (config.loaded at start and at the
// reload); a file that fails to load changes nothing and serve says why.
func TestServeReload(t *testing.T) {
	bin := cliBinary(t)
	config, write := reloadableConfig(t)
	write("one")
	dir := t.TempDir()
	srv := startServe(t, bin, dir, config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eWait)
	defer cancel()
	cs, closeGo := connectGo(t, ctx, srv.mcpURL, nil)
	defer closeGo()
	call := toolCaller(t, ctx, cs)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("one__echo"); err != nil {
		t.Fatal(err)
	}
	reloads := func() int { return strings.Count(srv.out.String(), "leaseledger: config reloaded") }

	write("two")
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "serve reloaded", func() bool { return reloads() == 1 })
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "two__echo") || slices.Contains(names, "one__echo") {
		t.Fatalf("tools after the reload: %v", names)
	}
	if err := call("two__echo"); err != nil {
		t.Fatalf("call on the added server: %v", err)
	}
	if err := call("one__echo"); err == nil {
		t.Fatal("the removed server still answers")
	}

	// A file that does not load keeps the configuration in force.
	if err := os.WriteFile(config, []byte(`{"mcpServers": {`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "serve refused the broken file", func() bool {
		return strings.Contains(srv.out.String(), "config not reloaded (the previous one stays in force)")
	})
	if err := call("two__echo"); err != nil {
		t.Fatalf("call after a refused reload: %v", err)
	}

	loaded := srv.busEvents("config.loaded")
	if len(loaded) != 2 || !strings.Contains(string(loaded[0].Data), `"trigger":"start"`) ||
		!strings.Contains(string(loaded[1].Data), `"added":1`) || !strings.Contains(string(loaded[1].Data), `"removed":1`) {
		t.Fatalf("config.loaded events: %+v", loaded)
	}
	removed := 0
	for _, e := range srv.busEvents("lease.terminated") {
		if strings.Contains(string(e.Data), `"reason":"removed"`) && e.Server == "one" {
			removed++
		}
	}
	if removed != 1 {
		t.Fatalf("%d lease.terminated{removed} of server one, want 1", removed)
	}
	closeGo()
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, srv.out.String())
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all"); r.code != 0 {
		t.Fatalf("audit --all: %+v", r)
	}
}

// reloadableConfig builds the go-sdk test server and returns an mcp.json
// path and a function that rewrites it to name the given servers, each
// running the test server.
func reloadableConfig(t *testing.T) (string, func(servers ...string)) {
	t.Helper()
	tsBin := filepath.Join(t.TempDir(), "testserver")
	if err := testproc.Build(testproc.Binary{Out: tsBin, Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"}); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "mcp.json")
	return config, func(servers ...string) {
		t.Helper()
		m := map[string]any{}
		for _, s := range servers {
			m[s] = map[string]any{"command": tsBin}
		}
		b, _ := json.Marshal(map[string]any{"mcpServers": m})
		if err := os.WriteFile(config, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// toolCaller returns a function that calls a test server tool through cs
// with {"text": "hi"}; a tool error fails the test, any other error is
// returned.
func toolCaller(t *testing.T, ctx context.Context, cs *mcp.ClientSession) func(tool string) error {
	return func(tool string) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
		if err == nil && res.IsError {
			t.Fatalf("%s: tool error", tool)
		}
		return err
	}
}
