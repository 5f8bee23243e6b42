//go:build linux

package gateway

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/policy"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// readerPolicy gives admin everything and reader only the read-only tools
// of ts (and its resources); tools annotated destructive are forbidden to
// the readers group whatever else permits them.
const readerPolicy = `
@id("admin-all")
permit (principal == Leaseledger::Principal::"admin", action, resource);

@id("reader-start-ts")
permit (principal == Leaseledger::Principal::"reader", action == Leaseledger::Action::"start_server", resource == Leaseledger::Server::"ts");

@id("reader-read-only")
permit (principal == Leaseledger::Principal::"reader", action == Leaseledger::Action::"call_tool", resource in Leaseledger::Server::"ts")
when { context.read_only };

@id("reader-resources")
permit (principal == Leaseledger::Principal::"reader", action == Leaseledger::Action::"read_resource", resource in Leaseledger::Server::"ts")
when { resource.uri like "test://item*" };
`

// Through the gateway with two tokens and a policy: the reader lists and
// calls only ts's read-only tools and sees only the resources it may
// read; a call it was not shown is refused with CodeAccessDenied, never
// reaches the server (its call log), and is recorded with the deciding
// policies; the admin uses everything. A swapped set decides at once.
func TestPolicyThroughGateway(t *testing.T) {
	calls := filepath.Join(t.TempDir(), "calls")
	set, err := policy.Parse("policy.cedar", []byte(readerPolicy), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	engine := policy.NewEngine(set)
	e := newEnv(t, []server{{"ts", testServer(map[string]string{"TESTSERVER_CALLS": calls})}, {"ts2", testServer(nil)}},
		[]string{"reader", "admin"}, func(o *Options, _ *runtime.Options) { o.Policy = engine })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var changed atomic.Int32
	rc := mcp.NewClient(&mcp.Implementation{Name: "reader", Version: "0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed.Add(1) }})
	reader, err := rc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.srv.URL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &headers{token: e.plain["reader"], base: e.srv.Client().Transport}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	lt, err := reader.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
	}
	if want := []string{"ts__echo", "ts__slow"}; !slices.Equal(names, want) {
		t.Fatalf("the reader is shown %v, want %v", names, want)
	}
	if res, err := reader.CallTool(ctx, &mcp.CallToolParams{Name: "ts__echo", Arguments: map[string]any{"text": "hi"}}); err != nil || res.IsError {
		t.Fatalf("allowed call: %v %+v", err, res)
	}
	_, err = reader.CallTool(ctx, &mcp.CallToolParams{Name: "ts__fail", Arguments: map[string]any{}})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != CodeAccessDenied || je.Message != msgAccessDenied {
		t.Fatalf("denied call: %v", err)
	}
	_, err = reader.CallTool(ctx, &mcp.CallToolParams{Name: "ts2__echo", Arguments: map[string]any{"text": "hi"}})
	if !errors.As(err, &je) || je.Code != CodeAccessDenied {
		t.Fatalf("call on a server the reader may not use: %v", err)
	}
	rl, err := reader.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rl.Resources {
		if !slices.Contains([]string{"leaseledger://ts/test://item"}, r.URI[:min(len(r.URI), 28)]) {
			t.Fatalf("the reader is shown resource %s", r.URI)
		}
	}
	if len(rl.Resources) == 0 {
		t.Fatal("the reader is shown no resource")
	}
	_, err = reader.ReadResource(ctx, &mcp.ReadResourceParams{URI: "leaseledger://ts/test://text"})
	if !errors.As(err, &je) || je.Code != CodeAccessDenied {
		t.Fatalf("denied read: %v", err)
	}

	admin := e.mustConnect(ctx, e.plain["admin"], nil)
	defer admin.Close()
	lt, err = admin.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) < 12 {
		t.Fatalf("the admin is shown %d tools", len(lt.Tools))
	}
	if res, err := admin.CallTool(ctx, &mcp.CallToolParams{Name: "ts__fail", Arguments: map[string]any{}}); err != nil || !res.IsError {
		t.Fatalf("admin call: %v %+v", err, res)
	}

	// A new set: the reader loses echo at once (its cached decision was
	// the old set's).
	set2, err := policy.Parse("policy.cedar", []byte(readerPolicy+`
@id("no-echo")
forbid (principal, action == Leaseledger::Action::"call_tool", resource == Leaseledger::Tool::"ts/echo");
`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	engine.Swap(set2)
	e.g.PolicyChanged()
	testproc.Eventually(t, "the reader was told its tools changed", func() bool { return changed.Load() > 0 })
	_, err = reader.CallTool(ctx, &mcp.CallToolParams{Name: "ts__echo", Arguments: map[string]any{"text": "again"}})
	if !errors.As(err, &je) || je.Code != CodeAccessDenied {
		t.Fatalf("call after the swap: %v", err)
	}

	if got := readLines(t, calls); !slices.Equal(got, []string{"echo", "fail"}) {
		t.Fatalf("the server saw %v, want the reader's allowed echo and the admin's fail", got)
	}
	var refused [][]string
	var digests []string
	for env, err := range e.l.Events(ctx, ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		if env.Kind != "call.refused" {
			continue
		}
		p, err := events.DecodePayload(env.Kind, env.Data)
		if err != nil {
			t.Fatal(err)
		}
		r := p.(*events.CallRefused)
		if r.Reason != events.RefusedPolicy {
			t.Fatalf("refusal %+v", r)
		}
		refused = append(refused, r.Policies)
		digests = append(digests, r.PolicyDigest)
	}
	// ts__fail: no permit applied (no ids); ts2__echo was refused before
	// any lease (access.decided, not a call); echo after the swap: the
	// forbid no-echo.
	if len(refused) != 2 || len(refused[0]) != 0 || !slices.Equal(refused[1], []string{"no-echo"}) ||
		digests[0] != set.Digest() || digests[1] != set2.Digest() {
		t.Fatalf("refusals %v under %v", refused, digests)
	}
}

// readLines returns the lines of the file at path (none when it does not
// exist).
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}
