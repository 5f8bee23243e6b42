//go:build linux

package runtime

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Prompts and completions through handles against our go-sdk test server:
// every page of prompts/list, prompts/get with arguments and with the
// caller's _meta, completion/complete for both reference types; the
// results equal plain go-sdk calls; the registrations record digests,
// never names, arguments or values.
func TestRequestPromptsAndCompletion(t *testing.T) {
	e, capa, o := reqEnv(t)
	cfg := testServer(nil)
	e.cfg.Set("ts", cfg)
	ctx := ctxT(t, 60*time.Second)
	plain := plainSession(t, ctx, cfg)
	opts := DefaultRequestOptions()

	var names []string
	cursor, pages := "", 0
	for {
		h, err := capa.ListPrompts(ctx, o, "ts", cursor, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := await(t, h).Prompts
		want, err := plain.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		jsonEq(t, "prompts/list page", got, want)
		for _, p := range got.Prompts {
			names = append(names, p.Name)
		}
		pages++
		if cursor = got.NextCursor; cursor == "" {
			break
		}
	}
	if pages < 3 || !slices.Contains(names, "greet") || len(names) != 6 {
		t.Fatalf("%d pages, prompts %v", pages, names)
	}

	gp := &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "bob"}}
	h, err := capa.GetPrompt(ctx, o, "ts", gp, opts)
	if err != nil {
		t.Fatal(err)
	}
	gp.Arguments["name"] = "changed after the start" // the handle keeps its own copy
	got := await(t, h).Prompt
	want, err := plain.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, "prompts/get", got, want)
	if txt := got.Messages[0].Content.(*mcp.TextContent).Text; txt != "hello bob" {
		t.Fatalf("prompt text %q", txt)
	}
	greetHandle := h.ID()

	// The caller's _meta arrives at the server beside the handle's own
	// progress token, which wins over the caller's.
	meta := map[string]any{"trace": "trace-secret-1", "n": 1.5, "nested": map[string]any{"k": []any{"v"}}, "progressToken": "caller's"}
	h, err = capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{Name: "meta"}, RequestOptions{Budget: time.Minute, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	var seen map[string]any
	if err := json.Unmarshal([]byte(await(t, h).Prompt.Messages[0].Content.(*mcp.TextContent).Text), &seen); err != nil {
		t.Fatal(err)
	}
	if seen["trace"] != "trace-secret-1" || seen["n"] != 1.5 || string(mustJSON(seen["nested"])) != `{"k":["v"]}` || seen["progressToken"] != h.ID() {
		t.Fatalf("server saw _meta %v (handle %s)", seen, h.ID())
	}
	if meta["progressToken"] != "caller's" {
		t.Fatal("the caller's _meta was changed")
	}

	cp := &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"}, Argument: mcp.CompleteParamsArgument{Name: "name", Value: "al"}}
	h, err = capa.Complete(ctx, o, "ts", cp, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := await(t, h).Completion
	wantC, err := plain.Complete(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, "completion/complete", c, wantC)
	if !slices.Equal(c.Completion.Values, []string{"alice", "albert"}) {
		t.Fatalf("completion %v", c.Completion.Values)
	}
	promptRef := h.ID()
	h, err = capa.Complete(ctx, o, "ts", &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "test://watched"},
		Argument: mcp.CompleteParamsArgument{Name: "x", Value: ""}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c := await(t, h).Completion; !slices.Equal(c.Completion.Values, []string{"1"}) {
		t.Fatalf("resource completion %v", c.Completion.Values)
	}
	resourceRef := h.ID()
	// More values than MCP allows break the envelope.
	h, err = capa.Complete(ctx, o, "ts", &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "many"}, Argument: mcp.CompleteParamsArgument{Name: "x"}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Await(ctx); !errors.Is(err, ErrEnvelope) {
		t.Fatalf("101 values: %v", err)
	}

	regs := map[string]*events.RequestRegistered{}
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.RequestRegistered); ok {
			regs[p.Handle] = p
		}
		b := string(mustJSON(x.Payload))
		for _, secret := range []string{"bob", "alice", "greet", "trace-secret", "test://watched"} {
			if strings.Contains(b, secret) {
				t.Errorf("%s records %q: %s", x.Kind, secret, b)
			}
		}
	}
	if r := regs[greetHandle]; r == nil || r.Method != events.MethodGetPrompt || r.NameSHA256 != sha256Hex("greet") || r.URISHA256 != "" || r.RefType != "" {
		t.Errorf("prompts/get registration %+v", r)
	}
	if r := regs[promptRef]; r == nil || r.Method != events.MethodComplete || r.RefType != events.RefPrompt || r.NameSHA256 != sha256Hex("greet") || r.URISHA256 != "" {
		t.Errorf("ref/prompt completion registration %+v", r)
	}
	if r := regs[resourceRef]; r == nil || r.RefType != events.RefResource || r.URISHA256 != sha256Hex("test://watched") || r.NameSHA256 != "" {
		t.Errorf("ref/resource completion registration %+v", r)
	}
}

// A cancel of a prompts/get the server holds reaches the server for the
// handle's wire id.
func TestRequestPromptCancelReachesServer(t *testing.T) {
	e, capa, o := reqEnv(t)
	cancels := filepath.Join(t.TempDir(), "cancels")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CANCELS": cancels}))
	ctx := ctxT(t, 30*time.Second)
	h, err := capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{Name: "slow"}, DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "the request on the wire", func() bool { return len(h.WireIDs()) == 1 })
	rep, err := h.Cancel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Settlement != SettlementSettled || rep.WireID != h.WireIDs()[0] || rep.TransportAccepted != events.DeliveryYes {
		t.Fatalf("report %+v", rep)
	}
	testproc.Eventually(t, "the server saw the cancel", func() bool { b, _ := os.ReadFile(cancels); return strings.TrimSpace(string(b)) == rep.WireID })
}

// Bad prompts, completions, subscriptions and _meta are refused before
// anything is registered or sent.
func TestRequestPromptBadInput(t *testing.T) {
	e, capa, o := reqEnv(t)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	opts := DefaultRequestOptions()
	big := strings.Repeat("x", MaxRequestParamsBytes)
	for name, start := range map[string]func() (*ResourceHandle, error){
		"oversize prompt name": func() (*ResourceHandle, error) {
			return capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{Name: strings.Repeat("n", MaxResourceURIBytes+1)}, opts)
		},
		"no prompt":  func() (*ResourceHandle, error) { return capa.GetPrompt(ctx, o, "ts", nil, opts) },
		"empty name": func() (*ResourceHandle, error) { return capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{}, opts) },
		"non-UTF-8 name": func() (*ResourceHandle, error) {
			return capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{Name: "\xff"}, opts)
		},
		"oversize params": func() (*ResourceHandle, error) {
			return capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": big}}, opts)
		},
		"non-UTF-8 value": func() (*ResourceHandle, error) {
			return capa.GetPrompt(ctx, o, "ts", &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "\xff"}}, opts)
		},
		"oversize meta": func() (*ResourceHandle, error) {
			return capa.ListPrompts(ctx, o, "ts", "", RequestOptions{Budget: time.Minute, Meta: map[string]any{"x": big}})
		},
		"unencodable meta": func() (*ResourceHandle, error) {
			return capa.ListPrompts(ctx, o, "ts", "", RequestOptions{Budget: time.Minute, Meta: map[string]any{"x": func() {}}})
		},
		"oversize cursor": func() (*ResourceHandle, error) {
			return capa.ListPrompts(ctx, o, "ts", strings.Repeat("c", MaxCursorBytes+1), opts)
		},
		"no completion": func() (*ResourceHandle, error) { return capa.Complete(ctx, o, "ts", nil, opts) },
		"no ref":        func() (*ResourceHandle, error) { return capa.Complete(ctx, o, "ts", &mcp.CompleteParams{}, opts) },
		"unknown ref": func() (*ResourceHandle, error) {
			return capa.Complete(ctx, o, "ts", &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/tool", Name: "x"}}, opts)
		},
		"prompt ref with uri": func() (*ResourceHandle, error) {
			return capa.Complete(ctx, o, "ts", &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "x", URI: "y"}}, opts)
		},
		"resource ref without uri": func() (*ResourceHandle, error) {
			return capa.Complete(ctx, o, "ts", &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource"}}, opts)
		},
		"empty subscribe":   func() (*ResourceHandle, error) { return capa.Subscribe(ctx, o, "ts", "", opts) },
		"empty unsubscribe": func() (*ResourceHandle, error) { return capa.Unsubscribe(ctx, o, "ts", "", opts) },
		"subscribe budget":  func() (*ResourceHandle, error) { return capa.Subscribe(ctx, o, "ts", "test://x", RequestOptions{}) },
	} {
		if _, err := start(); !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrInvalidBudget) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := count(e.events(), "request.registered", nil); n != 0 {
		t.Fatalf("%d registrations", n)
	}
}
