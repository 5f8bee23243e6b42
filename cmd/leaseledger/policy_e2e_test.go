//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// e2ePolicy gives the admin token everything and the reader token only
// the read-only tools of server ro.
const e2ePolicy = `@id("admin-all")
permit (principal == Leaseledger::Principal::"admin", action, resource);

@id("reader-start-ro")
permit (principal in Leaseledger::Group::"readers", action == Leaseledger::Action::"start_server", resource == Leaseledger::Server::"ro");

@id("reader-read-only")
permit (principal in Leaseledger::Group::"readers", action == Leaseledger::Action::"call_tool", resource in Leaseledger::Server::"ro")
when { context.read_only };
`

// e2eEntities puts the reader token's principal in the readers group.
const e2eEntities = `[
  {"uid": {"type": "Leaseledger::Principal", "id": "reader"}, "parents": [{"type": "Leaseledger::Group", "id": "readers"}], "attrs": {}},
  {"uid": {"type": "Leaseledger::Group", "id": "readers"}, "parents": [], "attrs": {}}
]`

// TestServePolicy is the access policy checked from outside: serve with
// two tokens and a policy that gives one of them only the read-only tools
// of one server. Its client lists and calls only those; a denied call is
// an access-denied error that never reaches the server (the server's own
// call log); the policy in force is recorded at start and each decision
// names its policies and the set's digest; a reload whose policy does not
// validate is refused naming the line, and the old policy keeps deciding;
// a valid reload decides at once; audit --all passes.
func TestServePolicy(t *testing.T) {
	bin := cliBinary(t)
	tsBin := filepath.Join(t.TempDir(), "testserver")
	if err := testproc.Build(testproc.Binary{Out: tsBin, Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"}); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	calls := filepath.Join(work, "calls")
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"ro":    map[string]any{"command": tsBin, "env": map[string]string{"TESTSERVER_CALLS": calls}},
		"other": map[string]any{"command": tsBin, "env": map[string]string{"TESTSERVER_CALLS": calls}},
	}})
	config := filepath.Join(work, "mcp.json")
	tokens := filepath.Join(work, "tokens")
	pol := filepath.Join(work, "policy.cedar")
	ents := filepath.Join(work, "entities.json")
	for path, text := range map[string]string{config: string(cfg), pol: e2ePolicy, ents: e2eEntities} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tok := map[string]string{}
	for _, name := range []string{"reader", "admin"} {
		r := runCLI(t, context.Background(), "", "token", "add", name, "--file", tokens)
		if r.code != 0 {
			t.Fatalf("token add: %+v", r)
		}
		tok[name] = strings.TrimSpace(r.stdout)
	}

	// A policy that does not validate refuses to start, naming its line.
	bad := filepath.Join(work, "bad.cedar")
	if err := os.WriteFile(bad, []byte(e2ePolicy+"\npermit (principal, action == Leaseledger::Action::\"start_server\", resource)\nwhen { context.read_only };\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, context.Background(), "", "--data-dir", t.TempDir(), "serve", "--port", "-1", "--config", config,
		"--mcp-addr", "127.0.0.1:0", "--tokens", tokens, "--policy", bad)
	line := strconv.Itoa(strings.Count(e2ePolicy, "\n") + 2) // the appended policy's
	if r.code == 0 || !strings.Contains(r.stderr, "bad.cedar:"+line+":") || !strings.Contains(r.stderr, "read_only") {
		t.Fatalf("serve with a policy that does not validate: %+v", r)
	}

	dir := t.TempDir()
	srv := startServe(t, bin, dir, config, "--tokens", tokens, "--policy", pol, "--policy-entities", ents)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eWait)
	defer cancel()
	connect := func(token string) (*mcp.ClientSession, func()) {
		tr := &http.Transport{}
		c := mcp.NewClient(&mcp.Implementation{Name: "policy-e2e", Version: "1.0.0"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.mcpURL,
			HTTPClient: &http.Client{Transport: bearer{token, tr}}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		return cs, func() { _ = cs.Close(); tr.CloseIdleConnections() }
	}
	listed := func(cs *mcp.ClientSession) []string {
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range lt.Tools {
			names = append(names, tool.Name)
		}
		return names
	}
	denied := func(err error) bool {
		var je *jsonrpc.Error
		return errors.As(err, &je) && je.Code == -32018
	}
	call := func(cs *mcp.ClientSession, tool string) error {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
		return err
	}

	reader, closeReader := connect(tok["reader"])
	defer closeReader()
	if got := listed(reader); !slices.Equal(got, []string{"ro__echo", "ro__slow"}) {
		t.Fatalf("the reader is shown %v", got)
	}
	if err := call(reader, "ro__echo"); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"ro__fail", "ro__crash", "other__echo"} {
		if err := call(reader, tool); !denied(err) {
			t.Fatalf("reader %s: %v, want access denied", tool, err)
		}
	}
	admin, closeAdmin := connect(tok["admin"])
	defer closeAdmin()
	if n := len(listed(admin)); n < 12 {
		t.Fatalf("the admin is shown %d tools", n)
	}
	if err := call(admin, "other__echo"); err != nil {
		t.Fatal(err)
	}

	// A reload that breaks the schema is refused, naming the line; the
	// old policy keeps deciding.
	if err := os.WriteFile(pol, []byte(e2ePolicy+"\n@id(\"broken\")\npermit (principal, action == Leaseledger::Action::\"nonsense\", resource);\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "serve refused the policy", func() bool {
		return strings.Contains(srv.out.String(), "nor the policy: --policy: "+pol+":"+line+":")
	})
	if err := call(reader, "ro__echo"); err != nil {
		t.Fatalf("after a refused reload: %v", err)
	}
	if err := call(reader, "ro__fail"); !denied(err) {
		t.Fatalf("after a refused reload: %v", err)
	}
	// A valid reload decides at once: echo is forbidden to the readers.
	if err := os.WriteFile(pol, []byte(e2ePolicy+"\n@id(\"readers-no-echo\")\nforbid (principal in Leaseledger::Group::\"readers\", action, resource == Leaseledger::Tool::\"ro/echo\");\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "serve reloaded the policy", func() bool {
		return strings.Contains(srv.out.String(), "policy reloaded: 4 policies")
	})
	if err := call(reader, "ro__echo"); !denied(err) {
		t.Fatalf("echo after the reload: %v", err)
	}
	if got := listed(reader); !slices.Equal(got, []string{"ro__slow"}) {
		t.Fatalf("the reader is shown %v after the reload", got)
	}

	// The servers saw only the allowed calls.
	b, _ := os.ReadFile(calls)
	if got := strings.Fields(string(b)); !slices.Equal(got, []string{"echo", "echo", "echo"}) {
		t.Fatalf("the servers saw %v, want the reader's two allowed echoes and the admin's", got)
	}
	loaded := srv.busEvents("policy.loaded")
	if len(loaded) != 2 || !strings.Contains(string(loaded[0].Data), `"trigger":"start","mode":"enforced"`) ||
		!strings.Contains(string(loaded[1].Data), `"trigger":"reload"`) {
		t.Fatalf("policy.loaded: %+v", loaded)
	}
	var refusals []string
	var deniedIn string // the activation of the denial after the reload
	for _, e := range srv.busEvents("call.refused") {
		refusals = append(refusals, string(e.Data))
		deniedIn = e.Activation
	}
	if len(refusals) != 4 || !strings.Contains(refusals[3], `"policies":["readers-no-echo"]`) {
		t.Fatalf("call.refused: %v", refusals)
	}
	for _, e := range srv.busEvents("call.admitted") {
		if !strings.Contains(string(e.Data), `"policy_digest"`) {
			t.Fatalf("call.admitted without its policy: %s", e.Data)
		}
	}
	closeReader()
	closeAdmin()
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, srv.out.String())
	}
	// The audit shows the policy in force and each decision with the
	// policy that decided it.
	if r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all"); r.code != 0 || !strings.Contains(r.stdout, "policy: enforced") {
		t.Fatalf("audit --all: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", deniedIn)
	if !strings.Contains(r.stdout, "access denied") || !strings.Contains(r.stdout, "readers-no-echo") ||
		!strings.Contains(r.stdout, "policy reader-read-only: 2 allowed") {
		t.Fatalf("audit %s:\n%s", deniedIn, r.stdout)
	}
}
