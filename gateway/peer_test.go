//go:build linux

package gateway

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// peerClient is a go-sdk client that declares sampling, elicitation and
// roots and records what reaches it.
type peerClient struct {
	mu          sync.Mutex
	logs        []*mcp.LoggingMessageParams
	toolsChange chan struct{}
	elicit      string // the action its elicitation handler answers with
}

func (e *env) connectPeer(ctx context.Context, p *peerClient) *mcp.ClientSession {
	e.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "gateway-peer-test", Version: "0"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "ANSWER sampled"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if p.elicit == "decline" {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ANSWERNAME"}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			p.mu.Lock()
			p.logs = append(p.logs, r.Params)
			p.mu.Unlock()
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case p.toolsChange <- struct{}{}:
			default:
			}
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///ROOT/work", Name: "work"})
	tr := &mcp.StreamableClientTransport{Endpoint: e.srv.URL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &headers{base: e.srv.Client().Transport}}}
	cs, err := c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	return cs
}

func callText(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("call %s: %d contents", name, len(res.Content))
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// TestPeerRelays: through the gateway, a server's sampling, elicitation
// (accepted, and declined by another client) and roots requests reach the
// session's client and its answers the server; its log messages arrive
// at the level set, named after the server, before the call's answer; a
// tools list change reaches the client, a call against the listing it
// was shown before is refused (and never reaches the server) and works
// once it listed again; a client that declared nothing gets the
// protocol's errors. Each relay is recorded with its outcome, and none of
// the requests' or answers' text is in the ledger.
func TestPeerRelays(t *testing.T) {
	e := newEnv(t, []server{{"p", testServer(map[string]string{"TESTSERVER_PEER": "1"})}}, nil,
		func(o *Options, _ *runtime.Options) { o.Prefixes = map[string]string{"p": ""} })
	ctx := ctxT(t, 2*time.Minute)
	pc := &peerClient{toolsChange: make(chan struct{}, 1)}
	cs := e.connectPeer(ctx, pc)
	defer cs.Close()

	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, ctx, cs, "log", nil); got != "logged" {
		t.Fatalf("log: %q", got)
	}
	// The go-sdk client hands notifications to their handler on a
	// goroutine of its own: the message is awaited here; that it left
	// before the call's answer is TestPeerLogBeforeAnswer's.
	testproc.Eventually(t, "the log message", func() bool {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		return len(pc.logs) > 0
	})
	pc.mu.Lock()
	logs := pc.logs
	pc.mu.Unlock()
	if len(logs) != 1 || logs[0].Logger != "p" || logs[0].Level != "info" {
		t.Fatalf("log messages: %+v, want one from logger p", logs)
	}
	if got := callText(t, ctx, cs, "log", map[string]any{"level": "debug"}); got != "logged" {
		t.Fatalf("log debug: %q", got)
	}
	if got := callText(t, ctx, cs, "sample", nil); got != "ANSWER sampled" {
		t.Fatalf("sample: %q", got)
	}
	if got := callText(t, ctx, cs, "elicit", nil); got != "accept ANSWERNAME" {
		t.Fatalf("elicit: %q", got)
	}
	if got := callText(t, ctx, cs, "roots", nil); got != "file:///ROOT/work" {
		t.Fatalf("roots: %q", got)
	}
	pc.mu.Lock()
	if len(pc.logs) != 1 {
		t.Errorf("a debug message passed the info level: %d messages", len(pc.logs))
	}
	pc.mu.Unlock()

	// A list change: the client hears of it; the listing it was shown is
	// refused until it lists again.
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, ctx, cs, "change", nil); got != "changed" {
		t.Fatalf("change: %q", got)
	}
	select {
	case <-pc.toolsChange:
	case <-time.After(testproc.HangBound):
		t.Fatal("no notifications/tools/list_changed reached the client")
	}
	calls := e.count("call.admitted", nil)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mutable", Arguments: map[string]any{}}); rpcCode(t, err) != CodeListingChanged {
		t.Fatalf("call against the replaced listing: %v, want CodeListingChanged", err)
	}
	if n := e.count("call.admitted", nil); n != calls {
		t.Fatalf("the refused call was admitted (%d → %d)", calls, n)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, ctx, cs, "mutable", map[string]any{"b": 1}); got != "mutable" {
		t.Fatalf("mutable after listing again: %q", got)
	}

	// Another client declines; one that declared nothing is refused.
	decl := e.connectPeer(ctx, &peerClient{toolsChange: make(chan struct{}, 1), elicit: "decline"})
	defer decl.Close()
	if got := callText(t, ctx, decl, "elicit", nil); got != "decline " {
		t.Fatalf("declined elicit: %q", got)
	}
	bare := e.mustConnect(ctx, "", nil)
	defer bare.Close()
	for _, tool := range []string{"sample", "elicit", "roots"} {
		if got := callText(t, ctx, bare, tool, nil); !strings.HasPrefix(got, "error ") {
			t.Errorf("%s for a client without the capability: %q, want the protocol's error", tool, got)
		}
	}

	// The capability-less client's server never sends an elicitation
	// (the go-sdk server checks the capability itself); sampling and
	// roots/list it sends, and the runtime refuses them. A relay's record
	// rides the next append, so it is awaited.
	want := map[events.RelayOutcome]int{events.RelayAccepted: 3, events.RelayDeclined: 1, events.RelayRefused: 2}
	testproc.Eventually(t, "the relays' records", func() error {
		got := map[events.RelayOutcome]int{}
		e.count("relay.completed", func(_ events.Envelope, p events.Payload) bool {
			got[p.(*events.RelayCompleted).Outcome]++
			return true
		})
		if !maps.Equal(got, want) {
			return fmt.Errorf("relay outcomes %v, want %v", got, want)
		}
		return nil
	})
	for _, x := range e.envelopes() {
		b, err := x.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"SECRET", "ANSWER", "ROOT"} {
			if strings.Contains(string(b), secret) {
				t.Errorf("%s event carries relayed text %q", x.Kind, secret)
			}
		}
	}
}

// TestPeerLogBeforeAnswer: on the wire, a tool's log message travels on
// the call's own stream ahead of the call's answer (the runtime's
// noteBarrier and the related request's stream), for every call.
func TestPeerLogBeforeAnswer(t *testing.T) {
	e := newEnv(t, []server{{"p", testServer(map[string]string{"TESTSERVER_PEER": "1"})}}, nil,
		func(o *Options, _ *runtime.Options) { o.Prefixes = map[string]string{"p": ""} })
	_, hdr := e.post(initBody, nil)
	sid := hdr.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatal("no session id")
	}
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	e.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, h)
	e.post(`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}`, h)
	for i := range 20 {
		body := e.postBody(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"log","arguments":{}}}`, 10+i), h)
		logAt, answerAt := strings.Index(body, `"notifications/message"`), strings.Index(body, `"result"`)
		if logAt < 0 || answerAt < 0 || logAt > answerAt {
			t.Fatalf("call %d: the log message is not ahead of the answer on its stream:\n%s", i, body)
		}
	}
}
