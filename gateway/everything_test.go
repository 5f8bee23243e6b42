//go:build linux

package gateway

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// server-everything (stdio, node) and the go-sdk test server behind one
// gateway: both listings namespaced, echo called, resources and a
// template of everything listed and read, a long call cancelled by the
// client after its progress arrived (the cancellation reaches the call:
// call.finished cancelled), and closing the session ends it.
func TestEverything(t *testing.T) {
	e := newEnv(t, []server{{"everything", everything(t)}, {"tools", testServer(nil)}}, []string{"alice"}, nil)
	ctx := ctxT(t, 2*time.Minute)
	prog := &progressLog{}
	cs := e.mustConnect(ctx, e.plain["alice"], prog)
	id := cs.ID()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(lt)
	for _, want := range []string{"everything__echo", "everything__trigger-long-running-operation", "tools__echo"} {
		if !slices.Contains(names, want) {
			t.Fatalf("%s not listed: %v", want, names)
		}
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "everything__") && !strings.HasPrefix(n, "tools__") {
			t.Fatalf("tool %q not namespaced", n)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "hi"}})
	if err != nil || res.IsError || text(t, res) != "Echo: hi" {
		t.Fatalf("echo: %v %+v", err, res)
	}

	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	var first string
	for _, u := range uris {
		if strings.HasPrefix(u, "leaseledger://everything/") && first == "" {
			first = u
		}
	}
	if first == "" || !slices.Contains(uris, "leaseledger://tools/test://item/0") {
		t.Fatalf("resources of both servers: %v", uris)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: first})
	if err != nil || len(rr.Contents) == 0 || "leaseledger://everything/"+rr.Contents[0].URI != first {
		t.Fatalf("read %s: %v %+v", first, err, rr)
	}
	var tpl string
	for r, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(r.URITemplate, "leaseledger://everything/") && strings.Contains(r.URITemplate, "{") && tpl == "" {
			tpl = r.URITemplate
		}
	}
	if tpl == "" {
		t.Fatal("no template of everything listed")
	}
	// Expand the template's first variable with 1.
	i, j := strings.Index(tpl, "{"), strings.Index(tpl, "}")
	expanded := tpl[:i] + "1" + tpl[j+1:]
	if rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: expanded}); err != nil || len(rr.Contents) == 0 {
		t.Fatalf("read %s: %v %+v", expanded, err, rr)
	}

	// A long call: cancelled by the client once its first progress arrived.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lp := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 30, "steps": 60}}
	lp.SetProgressToken("long-1")
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, lp)
		errc <- err
	}()
	testproc.Eventually(t, "progress of the long call", func() bool { return prog.n.Load() >= 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled call returned no error")
	}
	cancelled := func() bool {
		return e.count("call.finished", func(x events.Envelope, p events.Payload) bool {
			f := p.(*events.CallFinished)
			return x.Session == id && f.Tool == "trigger-long-running-operation" && f.Outcome == events.CallCancelled
		}) == 1
	}
	testproc.Eventually(t, "call.finished cancelled", cancelled)
	prog.mu.Lock()
	if p := prog.got[0]; p.ProgressToken != "long-1" || p.Total != 60 {
		t.Errorf("progress: %+v", p)
	}
	prog.mu.Unlock()
	// The session goes on after a cancelled call.
	if res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"text": "after"}}); err != nil || text(t, res) != "after" {
		t.Fatalf("echo after cancel: %v %+v", err, res)
	}

	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "session end", func() bool {
		return len(e.g.Sessions()) == 0 && e.count("session.ended", func(x events.Envelope, p events.Payload) bool {
			return x.Session == id && p.(*events.SessionEnded).LeasesTerminated == 2
		}) == 1
	})
}
