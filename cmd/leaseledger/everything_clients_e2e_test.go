package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Acceptance of the transparent gateway with real clients: all
// of MCP — prompts, completions, subscriptions, logging, sampling,
// elicitation, roots, list changes, naming — through one real `serve`, by
// the go-sdk client and by the official TypeScript SDK client.

const (
	// allServer is server-everything (stdio), exposed with "prefix": "".
	allServer = "everything"
	// ownServer is the go-sdk test server (runtime/internal/testserver),
	// also with "prefix": "": its echo collides with server-everything's;
	// its other tools, prompts and resources do not. Its log, mutable and
	// change tools are what server-everything cannot do on demand (it
	// sends tools/list_changed only once, after initialize, when it
	// registers the tools that depend on the client's capabilities).
	ownServer = "tools"
	// clientsWait bounds each client's whole run: far more than the run
	// takes (seconds), room for several waits failing at
	// testproc.HangBound each.
	clientsWait = 6 * time.Minute
	// elicitMessage and samplingSystem are server-everything's own text
	// of its elicitation and sampling requests: relayed, never recorded.
	elicitMessage  = "Please provide inputs for the following fields"
	samplingSystem = "You are a helpful test server"
)

// everythingPrompts are the prompts server-everything offers, ownPrompts the
// test server's; promptArgs a value for each of their arguments.
var (
	everythingPrompts = []string{"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"}
	ownPrompts        = []string{"p0", "p1", "p2", "greet", "meta", "slow"}
	promptArgs        = map[string]string{"city": "Paris", "state": "Texas", "department": "Engineering", "name": "Alice",
		"resourceType": "Text", "resourceId": "1"}
)

// clientSecrets are what only one client knows and hands to a server
// through the gateway: the sampled text, the elicited name, the root URI.
// None of them may reach the ledger.
type clientSecrets struct{ sampled, elicited, root string }

func newSecrets(t *testing.T, who string) clientSecrets {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	x := hex.EncodeToString(b)
	return clientSecrets{sampled: who + "-sampled-" + x, elicited: who + "-elicited-" + x, root: "file:///e2e/" + who + "-root-" + x}
}

// writeBareConfig writes an mcp.json with server-everything and the test
// server at tsBin, both exposing their own names ("prefix": "").
func writeBareConfig(t *testing.T, tsBin string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		allServer: map[string]any{"command": "node", "args": []string{everythingEntry, "stdio"}, "prefix": ""},
		// TESTSERVER_PEER=1: the tools of the server→client tests (log, mutable, change, …).
		ownServer: map[string]any{"command": tsBin, "prefix": "", "env": map[string]string{"TESTSERVER_PEER": "1"}},
	}})
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEverythingClients runs serve with server-everything and the go-sdk
// test server, both with "prefix": "" (their echo tools collide). A go-sdk
// client, then the TypeScript SDK client under node, each: sets the log
// level before the servers start and again while they run (messages below
// it held back, those at it relayed with the server named in the logger);
// lists tools (echo left out, its call refused with CodeNameCollision, the
// others served); lists every prompt and gets each (slow, held until
// cancelled, aside); completes a prompt argument and a template variable
// of server-everything and a prompt argument of the test server;
// subscribes to a resource and receives its update; answers a sampling
// request, accepts one elicitation and declines another, serves roots
// (server-everything's get-roots-list returns them); sees a tool list
// change (the test server's change) and has the call against the listing
// it was shown refused with CodeListingChanged until it lists again. After
// SIGTERM, `audit --all` exits 0 with every activation confirmed; the
// ledger records each client's relays (sampling and roots accepted,
// elicitation accepted and declined) and none of their content: no byte
// of the data directory, and no exported event, holds a secret.
func TestEverythingClients(t *testing.T) {
	requireNode(t)
	bin := cliBinary(t)
	tsBin := filepath.Join(t.TempDir(), "testserver")
	if err := testproc.Build(testproc.Binary{Out: tsBin, Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv := startServe(t, bin, dir, writeBareConfig(t, tsBin))
	goSecrets, tsSecrets := newSecrets(t, "go"), newSecrets(t, "ts")

	// The two clients run side by side, each in its own session (its own
	// leases, so its own server processes).
	var mu sync.Mutex
	sessions := map[string]string{} // client → MCP session id
	t.Run("Clients", func(t *testing.T) {
		t.Run("GoSDK", func(t *testing.T) {
			t.Parallel()
			goEverythingClient(t, srv, goSecrets, func(id string) {
				mu.Lock()
				sessions["go"] = id
				mu.Unlock()
			})
		})
		t.Run("TypeScriptSDK", func(t *testing.T) {
			t.Parallel()
			id := tsEverythingClient(t, srv, tsSecrets)
			mu.Lock()
			sessions["ts"] = id
			mu.Unlock()
		})
	})
	for _, who := range []string{"go", "ts"} {
		if _, ok := sessions[who]; !ok {
			sessions[who] = ""
		}
	}
	for who, id := range sessions {
		if id != "" {
			srv.awaitEvent("session.ended", id)
		} else {
			t.Errorf("%s client: no session", who)
		}
	}

	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, srv.out.String())
	}
	r := runCLI(t, context.Background(), "", "--data-dir", dir, "audit", "--all", "--json")
	var sum struct {
		Activations int            `json:"activations"`
		Verdicts    map[string]int `json:"verdicts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != 0 || sum.Activations == 0 || sum.Verdicts["confirmed"] != sum.Activations {
		t.Errorf("audit --all: %v %+v", err, r)
	}

	// The relays, per session: method → outcome → count.
	relays := map[string]map[string]map[string]int{}
	for _, e := range dirEvents(t, dir, string(events.KindRelayCompleted)) {
		var p struct{ Method, Outcome string }
		if err := json.Unmarshal(e.Data, &p); err != nil {
			t.Fatalf("relay.completed %s: %v", e.Data, err)
		}
		if relays[e.Session] == nil {
			relays[e.Session] = map[string]map[string]int{}
		}
		if relays[e.Session][p.Method] == nil {
			relays[e.Session][p.Method] = map[string]int{}
		}
		relays[e.Session][p.Method][p.Outcome]++
	}
	for who, id := range sessions {
		got := relays[id]
		if got[string(events.RelaySampling)][string(events.RelayAccepted)] < 1 ||
			got[string(events.RelayElicit)][string(events.RelayAccepted)] != 1 ||
			got[string(events.RelayElicit)][string(events.RelayDeclined)] != 1 ||
			got[string(events.RelayListRoots)][string(events.RelayAccepted)] < 1 {
			t.Errorf("%s client's relays recorded for %s: %v; want sampling accepted, elicitation accepted once and declined once, roots accepted", who, id, got)
		}
		for method, outcomes := range got {
			for outcome, n := range outcomes {
				if outcome != string(events.RelayAccepted) && outcome != string(events.RelayDeclined) {
					t.Errorf("%s client: %d %s relays recorded %s", who, n, method, outcome)
				}
			}
		}
	}

	// Nothing of the relays' content is in the ledger: not in any file of
	// the data directory, not in any event.
	secrets := map[string]string{"server-everything's elicitation message": elicitMessage, "server-everything's sampling system prompt": samplingSystem}
	for who, s := range map[string]clientSecrets{"go": goSecrets, "ts": tsSecrets} {
		secrets[who+" sampled text"], secrets[who+" elicited name"], secrets[who+" root"] = s.sampled, s.elicited, s.root
	}
	exported := runCLI(t, context.Background(), "", "--data-dir", dir, "export")
	if exported.code != 0 || exported.stdout == "" {
		t.Fatalf("export: %+v", exported)
	}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for what, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s is in the ledger's %s", what, path)
			}
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("reading the data directory: %v (%d files)", err, files)
	}
	for what, s := range secrets {
		if strings.Contains(exported.stdout, s) {
			t.Errorf("%s is in an exported event", what)
		}
	}
}

// goPeer is the go-sdk client's side of the session: its handlers answer
// the relayed requests with the secrets and record what arrived.
type goPeer struct {
	secrets clientSecrets
	decline atomic.Bool // the next elicitation is declined

	mu           sync.Mutex
	logs         []mcp.LoggingMessageParams
	updated      []string
	toolsChanged int
	samples      []string // the first message of each sampling request
	elicits      int
}

func (p *goPeer) options() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			first := ""
			if len(r.Params.Messages) > 0 {
				if tc, ok := r.Params.Messages[0].Content.(*mcp.TextContent); ok {
					first = tc.Text
				}
			}
			p.mu.Lock()
			p.samples = append(p.samples, first)
			p.mu.Unlock()
			return &mcp.CreateMessageResult{Role: "assistant", Model: "e2e-model", Content: &mcp.TextContent{Text: p.secrets.sampled}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			p.mu.Lock()
			p.elicits++
			p.mu.Unlock()
			if p.decline.Load() {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": p.secrets.elicited}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			p.mu.Lock()
			p.logs = append(p.logs, *r.Params)
			p.mu.Unlock()
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			p.mu.Lock()
			p.updated = append(p.updated, r.Params.URI)
			p.mu.Unlock()
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			p.mu.Lock()
			p.toolsChanged++
			p.mu.Unlock()
		},
	}
}

// await waits until cond holds over what the peer recorded (bounded by
// testproc.HangBound); when it does not, the test fails and goes on (the
// steps after it are independent), and await reports false.
func (p *goPeer) await(t *testing.T, what string, cond func() bool) bool {
	t.Helper()
	err := testproc.Await(testproc.HangBound, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if cond() {
			return nil
		}
		return errors.New("not received")
	})
	if err != nil {
		t.Errorf("not within %v: %s", testproc.HangBound, what)
		return false
	}
	return true
}

// countLogs counts the log messages from logger at level (locked by the
// caller or not: it locks).
func (p *goPeer) countLogs(logger string, level mcp.LoggingLevel, containing string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.countLogsLocked(logger, level, containing)
}

func (p *goPeer) countLogsLocked(logger string, level mcp.LoggingLevel, containing string) int {
	n := 0
	for _, l := range p.logs {
		data, _ := l.Data.(string)
		if l.Logger == logger && (level == "" || l.Level == level) && strings.Contains(data, containing) {
			n++
		}
	}
	return n
}

// rpcCode is the JSON-RPC code err carries, 0 when none.
func rpcCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// goEverythingClient runs the go-sdk client's steps through srv; opened
// is told the session id as soon as the session is open.
func goEverythingClient(t *testing.T, srv *e2eServe, secrets clientSecrets, opened func(id string)) {
	ctx, cancel := context.WithTimeout(context.Background(), clientsWait)
	defer cancel()
	peer := &goPeer{secrets: secrets}
	c := mcp.NewClient(&mcp.Implementation{Name: "leaseledger-e2e-go", Version: "1.0.0"}, peer.options())
	c.AddRoots(&mcp.Root{URI: secrets.root, Name: "e2e"})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.mcpURL, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	opened(cs.ID())
	closed := false
	defer func() {
		if !closed {
			_ = cs.Close()
		}
	}()
	call := func(name string, args map[string]any) (string, error) {
		t.Helper()
		if args == nil {
			args = map[string]any{} // a nil map would be sent as null
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return "", fmt.Errorf("%w (JSON-RPC code %d)", err, rpcCode(err))
		}
		if res.IsError {
			return toolText(t, res), fmt.Errorf("%s: tool error %q", name, toolText(t, res))
		}
		return toolText(t, res), nil
	}

	// The level before the servers start: each is sent it right after its
	// initialize (the listing below starts them).
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatalf("logging/setLevel info: %v", err)
	}

	// Naming: both servers' own names; echo, which both have, left out
	// and refused; the others served.
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, tool := range lt.Tools {
		tools = append(tools, tool.Name)
	}
	for _, want := range []string{"get-sum", "toggle-subscriber-updates", "trigger-sampling-request", "trigger-elicitation-request",
		"get-roots-list", "progress", "log", "mutable", "change"} {
		if !slices.Contains(tools, want) {
			t.Errorf("tools/list lacks %s: %v", want, tools)
		}
	}
	if slices.Contains(tools, "echo") || slices.ContainsFunc(tools, func(n string) bool { return strings.Contains(n, gateway.ToolSeparator) }) {
		t.Errorf("tools/list shows the colliding echo or a prefixed name: %v", tools)
	}
	if _, err := call("echo", map[string]any{"message": "x", "text": "x"}); rpcCode(err) != gateway.CodeNameCollision {
		t.Errorf("call of the colliding echo: %v, want code %d", err, gateway.CodeNameCollision)
	}
	if got, err := call("get-sum", map[string]any{"a": 2, "b": 3}); err != nil || got != "The sum of 2 and 3 is 5." {
		t.Errorf("get-sum: %q %v", got, err)
	}
	if got, err := call("progress", map[string]any{"n": 0}); err != nil || got != "sent 0" {
		t.Errorf("the test server's progress: %q %v", got, err)
	}

	// Logging at info: the test server's debug message is held back (the
	// server filters; it logs nothing before a level is set), its info
	// message, logged after it, relayed under its name; server-everything's
	// roots sync (its roots/list right after initialize) logs at info under
	// its own logger.
	if _, err := call("log", map[string]any{"level": "debug"}); err != nil {
		t.Errorf("log debug: %v", err)
	}
	if _, err := call("log", map[string]any{"level": "info"}); err != nil {
		t.Errorf("log info: %v", err)
	}
	if peer.await(t, "the test server's info message under logger "+ownServer, func() bool {
		return peer.countLogsLocked(ownServer, "info", "") > 0
	}) {
		if n := peer.countLogs(ownServer, "debug", ""); n != 0 {
			t.Errorf("%d debug messages relayed at level info", n)
		}
	}
	peer.await(t, "server-everything's roots sync message under logger "+allServer+"/everything-server", func() bool {
		return peer.countLogsLocked(allServer+"/everything-server", "info", "Roots updated: 1 root(s)") > 0
	})

	// Prompts: every one listed and got.
	var prompts []*mcp.Prompt
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatalf("prompts/list: %v", err)
		}
		prompts = append(prompts, p)
	}
	var names []string
	for _, p := range prompts {
		names = append(names, p.Name)
	}
	for _, want := range slices.Concat(everythingPrompts, ownPrompts) {
		if !slices.Contains(names, want) {
			t.Errorf("prompts/list lacks %s: %v", want, names)
		}
	}
	for _, p := range prompts {
		if p.Name == "slow" {
			continue
		}
		args := map[string]string{}
		for _, a := range p.Arguments {
			v, ok := promptArgs[a.Name]
			if !ok {
				t.Fatalf("no value for argument %s of prompt %s", a.Name, p.Name)
			}
			args[a.Name] = v
		}
		res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: p.Name, Arguments: args})
		if err != nil || len(res.Messages) == 0 {
			t.Errorf("prompts/get %s %v: %v %+v", p.Name, args, err, res)
			continue
		}
		first, _ := res.Messages[0].Content.(*mcp.TextContent)
		switch want := map[string]string{"args-prompt": "What's weather in Paris, Texas?", "greet": "hello Alice",
			"completable-prompt": "Please promote Alice to the head of the Engineering team."}[p.Name]; {
		case want != "" && (first == nil || first.Text != want):
			t.Errorf("prompts/get %s: %+v, want %q", p.Name, res.Messages[0].Content, want)
		}
	}

	// Completions, routed to the server of the prompt or template.
	for _, c := range []struct {
		ref        mcp.CompleteReference
		arg, value string
		want       []string
	}{
		{mcp.CompleteReference{Type: "ref/prompt", Name: "completable-prompt"}, "department", "Eng", []string{"Engineering"}},
		{mcp.CompleteReference{Type: "ref/resource", URI: "demo://resource/dynamic/text/{resourceId}"}, "resourceId", "7", []string{"7"}},
		{mcp.CompleteReference{Type: "ref/prompt", Name: "greet"}, "name", "al", []string{"alice", "albert"}},
	} {
		res, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &c.ref, Argument: mcp.CompleteParamsArgument{Name: c.arg, Value: c.value}})
		if err != nil || !slices.Equal(res.Completion.Values, c.want) {
			t.Errorf("completion/complete %+v %s=%q: %v %+v, want %v", c.ref, c.arg, c.value, err, res, c.want)
		}
	}

	// A subscription: acknowledged by server-everything with a log message
	// under its name; its updates, once toggled on, reach the client under
	// the URI it subscribed to.
	var uri string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatalf("resources/list: %v", err)
		}
		if uri == "" && strings.HasPrefix(r.URI, "demo://resource/static/") {
			uri = r.URI
		}
	}
	if uri == "" {
		t.Fatal("no static resource of server-everything listed")
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("resources/subscribe %s: %v", uri, err)
	}
	if _, err := call("toggle-subscriber-updates", nil); err != nil {
		t.Fatalf("toggle-subscriber-updates: %v", err)
	}
	peer.await(t, "notifications/resources/updated for "+uri, func() bool { return slices.Contains(peer.updated, uri) })
	peer.await(t, "the subscription's acknowledgement under logger "+allServer, func() bool {
		return peer.countLogsLocked(allServer, "info", "Received Subscribe Resource request for URI: "+uri) > 0
	})
	if _, err := call("toggle-subscriber-updates", nil); err != nil { // off again
		t.Errorf("toggle-subscriber-updates: %v", err)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Errorf("resources/unsubscribe %s: %v", uri, err)
	}

	// Sampling, elicitation (accepted, then declined) and roots, answered
	// by this client's handlers.
	if got, err := call("trigger-sampling-request", map[string]any{"prompt": "e2e prompt", "maxTokens": 5}); err != nil || !strings.Contains(got, secrets.sampled) {
		t.Errorf("trigger-sampling-request: %q %v", got, err)
	}
	peer.mu.Lock()
	if len(peer.samples) != 1 || !strings.Contains(peer.samples[0], "e2e prompt") {
		t.Errorf("sampling requests received: %q", peer.samples)
	}
	peer.mu.Unlock()
	if got, err := call("trigger-elicitation-request", nil); err != nil || !strings.Contains(got, "- Name: "+secrets.elicited) {
		t.Errorf("trigger-elicitation-request accepted: %q %v", got, err)
	}
	peer.decline.Store(true)
	if got, err := call("trigger-elicitation-request", nil); err != nil || !strings.Contains(got, "declined") {
		t.Errorf("trigger-elicitation-request declined: %q %v", got, err)
	}
	if got, err := call("get-roots-list", nil); err != nil || !strings.Contains(got, secrets.root) {
		t.Errorf("get-roots-list: %q %v", got, err)
	}

	// A list change, honoured: the test server's change replaces mutable's
	// schema; the client is told, its call against the listing it was
	// shown is refused until it lists again.
	if got, err := call("mutable", map[string]any{"a": "x"}); err != nil || got != "mutable" {
		t.Errorf("mutable: %q %v", got, err)
	}
	peer.mu.Lock()
	changes := peer.toolsChanged
	peer.mu.Unlock()
	if got, err := call("change", nil); err != nil || got != "changed" {
		t.Fatalf("change: %q %v", got, err)
	}
	if !peer.await(t, "notifications/tools/list_changed after change", func() bool { return peer.toolsChanged > changes }) {
		t.FailNow()
	}
	if _, err := call("mutable", map[string]any{"b": 1}); rpcCode(err) != gateway.CodeListingChanged {
		t.Errorf("mutable against the superseded listing: %v, want code %d", err, gateway.CodeListingChanged)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := call("mutable", map[string]any{"b": 1}); err != nil || got != "mutable" {
		t.Errorf("mutable once listed again: %q %v", got, err)
	}

	// The level changed while the servers run: at warning, info is held
	// back and warning relayed.
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatalf("logging/setLevel warning: %v", err)
	}
	infos := peer.countLogs(ownServer, "info", "")
	if _, err := call("log", map[string]any{"level": "info"}); err != nil {
		t.Errorf("log info: %v", err)
	}
	if _, err := call("log", map[string]any{"level": "warning"}); err != nil {
		t.Errorf("log warning: %v", err)
	}
	if peer.await(t, "the test server's warning message under logger "+ownServer, func() bool {
		return peer.countLogsLocked(ownServer, "warning", "") > 0
	}) {
		if n := peer.countLogs(ownServer, "info", ""); n != infos {
			t.Errorf("an info message relayed at level warning")
		}
	}

	closed = true
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// tsResult is what everything_client.mjs prints. A failed step prints
// {"error": ..., "code": ...} in its place, which fails to decode as the
// step's type or is caught by the step's assertion.
type tsResult struct {
	Session          string          `json:"session"`
	SetLevelInfo     json.RawMessage `json:"setLevelInfo"`
	Tools            json.RawMessage `json:"tools"`
	EchoCode         json.RawMessage `json:"echoCode"`
	Sum              json.RawMessage `json:"sum"`
	OwnProgress      json.RawMessage `json:"ownProgress"`
	LogAtInfo        json.RawMessage `json:"logAtInfo"`
	RootsLog         json.RawMessage `json:"rootsLog"`
	Prompts          json.RawMessage `json:"prompts"`
	CompletePrompt   json.RawMessage `json:"completePrompt"`
	CompleteTemplate json.RawMessage `json:"completeTemplate"`
	CompleteOwn      json.RawMessage `json:"completeOwn"`
	Subscription     json.RawMessage `json:"subscription"`
	Sampling         json.RawMessage `json:"sampling"`
	ElicitAccept     json.RawMessage `json:"elicitAccept"`
	ElicitDecline    json.RawMessage `json:"elicitDecline"`
	Elicits          int             `json:"elicits"`
	Roots            json.RawMessage `json:"roots"`
	RootsRequests    int             `json:"rootsRequests"`
	ListChange       json.RawMessage `json:"listChange"`
	SetLevelWarning  json.RawMessage `json:"setLevelWarning"`
	LogAtWarning     json.RawMessage `json:"logAtWarning"`
}

// tsEverythingClient runs everything_client.mjs through srv and asserts
// what it printed; it returns the client's session id.
func tsEverythingClient(t *testing.T, srv *e2eServe, secrets clientSecrets) string {
	ctx, cancel := context.WithTimeout(context.Background(), clientsWait)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "testdata/everything_client.mjs", srv.mcpURL, allServer, ownServer,
		secrets.sampled, secrets.elicited, secrets.root)
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("everything_client.mjs: %v\n%s", err, stderr.String())
	}
	var r tsResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("everything_client.mjs output %q: %v", out, err)
	}
	t.Logf("TypeScript client: %s", out)
	// step decodes one step's result into v; a step that failed is reported.
	step := func(name string, raw json.RawMessage, v any) bool {
		t.Helper()
		if err := json.Unmarshal(raw, v); err != nil {
			t.Errorf("%s: %s", name, raw)
			return false
		}
		return true
	}
	want := func(name string, raw json.RawMessage, w any) {
		t.Helper()
		b, _ := json.Marshal(w)
		var got, exp any
		_ = json.Unmarshal(b, &exp)
		if err := json.Unmarshal(raw, &got); err != nil || !reflect.DeepEqual(got, exp) {
			t.Errorf("%s: %s, want %s", name, raw, b)
		}
	}

	want("logging/setLevel info", r.SetLevelInfo, "ok")
	var tools []string
	if step("tools/list", r.Tools, &tools) {
		for _, w := range []string{"get-sum", "toggle-subscriber-updates", "trigger-sampling-request", "trigger-elicitation-request",
			"get-roots-list", "progress", "log", "mutable", "change"} {
			if !slices.Contains(tools, w) {
				t.Errorf("tools/list lacks %s: %v", w, tools)
			}
		}
		if slices.Contains(tools, "echo") || slices.ContainsFunc(tools, func(n string) bool { return strings.Contains(n, gateway.ToolSeparator) }) {
			t.Errorf("tools/list shows the colliding echo or a prefixed name: %v", tools)
		}
	}
	want("call of the colliding echo", r.EchoCode, gateway.CodeNameCollision)
	want("get-sum", r.Sum, "The sum of 2 and 3 is 5.")
	want("the test server's progress", r.OwnProgress, "sent 0")
	want("at level info: the test server's info message relayed, its debug message not", r.LogAtInfo, map[string]bool{"debug": false, "info": true})
	var rootsLog struct{ Level, Logger, Data string }
	if step("server-everything's roots sync message", r.RootsLog, &rootsLog) &&
		(rootsLog.Level != "info" || rootsLog.Logger != allServer+"/everything-server" || !strings.Contains(rootsLog.Data, "Roots updated: 1 root(s)")) {
		t.Errorf("server-everything's roots sync message: %+v", rootsLog)
	}

	var prompts struct {
		Listed []string                   `json:"listed"`
		Got    map[string]json.RawMessage `json:"got"`
	}
	if step("prompts", r.Prompts, &prompts) {
		for _, w := range slices.Concat(everythingPrompts, ownPrompts) {
			if !slices.Contains(prompts.Listed, w) {
				t.Errorf("prompts/list lacks %s: %v", w, prompts.Listed)
			}
		}
		for _, name := range prompts.Listed {
			if name == "slow" {
				continue
			}
			var text string
			if err := json.Unmarshal(prompts.Got[name], &text); err != nil || text == "" {
				t.Errorf("prompts/get %s: %s", name, prompts.Got[name])
			}
		}
		for name, w := range map[string]string{"args-prompt": "What's weather in Paris, Texas?", "greet": "hello Alice",
			"completable-prompt": "Please promote Alice to the head of the Engineering team."} {
			want("prompts/get "+name, prompts.Got[name], w)
		}
	}
	want("completion of completable-prompt's department", r.CompletePrompt, []string{"Engineering"})
	want("completion of the text template's resourceId", r.CompleteTemplate, []string{"7"})
	want("completion of greet's name", r.CompleteOwn, []string{"alice", "albert"})

	var sub struct {
		URI     string   `json:"uri"`
		Waited  string   `json:"waited"`
		Updated []string `json:"updated"`
		Ack     *struct{ Level, Logger, Data string }
	}
	if step("subscription", r.Subscription, &sub) {
		if !slices.Contains(sub.Updated, sub.URI) {
			t.Errorf("subscription: no notifications/resources/updated for %s (%s); updates received: %v", sub.URI, sub.Waited, sub.Updated)
		}
		if sub.Ack == nil || sub.Ack.Logger != allServer || sub.Ack.Level != "info" || !strings.Contains(sub.Ack.Data, sub.URI) {
			t.Errorf("subscription: server-everything's acknowledgement (info, logger %s) not received: %s", allServer, r.Subscription)
		}
	}

	var sampling struct {
		Text     string   `json:"text"`
		Requests []string `json:"requests"`
	}
	if step("trigger-sampling-request", r.Sampling, &sampling) &&
		(!strings.Contains(sampling.Text, secrets.sampled) || len(sampling.Requests) != 1 || !strings.Contains(sampling.Requests[0], "e2e prompt")) {
		t.Errorf("trigger-sampling-request: %s", r.Sampling)
	}
	var accepted, declined, roots string
	if step("trigger-elicitation-request accepted", r.ElicitAccept, &accepted) && !strings.Contains(accepted, "- Name: "+secrets.elicited) {
		t.Errorf("trigger-elicitation-request accepted: %q", accepted)
	}
	if step("trigger-elicitation-request declined", r.ElicitDecline, &declined) && !strings.Contains(declined, "declined") {
		t.Errorf("trigger-elicitation-request declined: %q", declined)
	}
	if r.Elicits != 2 {
		t.Errorf("%d elicitation requests reached the client, want 2", r.Elicits)
	}
	if step("get-roots-list", r.Roots, &roots) && !strings.Contains(roots, secrets.root) {
		t.Errorf("get-roots-list: %q", roots)
	}
	if r.RootsRequests == 0 {
		t.Error("no roots/list reached the client")
	}

	var lc struct {
		Before        string          `json:"before"`
		Changed       string          `json:"changed"`
		RefusedCode   json.RawMessage `json:"refusedCode"`
		ListedMutable bool            `json:"listedMutable"`
		After         string          `json:"after"`
	}
	if step("list change", r.ListChange, &lc) {
		if lc.Before != "mutable" || lc.Changed != "changed" || !lc.ListedMutable || lc.After != "mutable" {
			t.Errorf("list change: %s", r.ListChange)
		}
		want("mutable against the superseded listing", lc.RefusedCode, gateway.CodeListingChanged)
	}
	want("logging/setLevel warning", r.SetLevelWarning, "ok")
	want("at level warning: the test server's warning message relayed, its info message not", r.LogAtWarning, map[string]bool{"info": false, "warning": true})
	return r.Session
}
