//go:build linux

package runtime

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A call with Progress set carries a progress token: server-everything's
// trigger-long-running-operation sends one notification per step, and
// each reaches the callback in order, before Call returns.
func TestCallProgressEverything(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("everything", everything(t))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "everything")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		got      []Progress
		returned atomic.Bool
		late     atomic.Bool
	)
	res, err := capa.Call(ctx, CallRequest{Server: "everything", Tool: "trigger-long-running-operation",
		Digest:    digestOf(t, tools, "trigger-long-running-operation"),
		Arguments: map[string]any{"duration": 0.5, "steps": 5},
		Progress: func(p Progress) {
			if returned.Load() {
				late.Store(true)
			}
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
		}})
	returned.Store(true)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 5 || late.Load() {
		t.Fatalf("progress %+v (late %v), want 5 steps before Call returned", got, late.Load())
	}
	for i, p := range got {
		if p.Progress != float64(i+1) || p.Total != 5 || p.Dropped != 0 {
			t.Fatalf("step %d: %+v", i, p)
		}
	}
}

// The connection's reader never waits for a slow callback: at most
// MaxProgressBuffered notifications wait, the rest are dropped and
// counted (the last delivery carries the total), order is kept, and the
// server's progress text reaches the callback only, never an event. A
// call without Progress sends no token, so the server sends nothing.
func TestCallProgressBoundedAndPrivate(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	digest := digestOf(t, tools, "progress")
	l := e.m.leaseOf("s1", "ts")
	const n = 1000
	var got []Progress
	res, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "progress", Digest: digest, Arguments: map[string]any{"n": n},
		Progress: func(p Progress) {
			if len(got) == 0 {
				// Hold the first delivery until the response was read: every
				// notification has then been queued or dropped.
				for deadline := time.Now().Add(30 * time.Second); l.reqs.calls.live.Load() != 0 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			}
			got = append(got, p) // one delivery at a time: no lock needed
		}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "sent 1000" {
		t.Fatalf("call: %v %+v", err, res)
	}
	last := got[len(got)-1]
	if len(got) > MaxProgressBuffered+1 || last.Dropped == 0 || len(got)+last.Dropped != n {
		t.Fatalf("%d delivered, last dropped count %d: want at most %d delivered and the rest counted", len(got), last.Dropped, MaxProgressBuffered+1)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Progress <= got[i-1].Progress || got[i].Dropped < got[i-1].Dropped {
			t.Fatalf("out of order: %+v then %+v", got[i-1], got[i])
		}
	}
	if got[0].Message != "SECRET provider text 1" {
		t.Fatalf("first message %q", got[0].Message)
	}

	res, err = capa.Call(ctx, CallRequest{Server: "ts", Tool: "progress", Digest: digest, Arguments: map[string]any{"n": 3}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "sent 0" {
		t.Fatalf("call without Progress: %v %+v", err, res)
	}
	if l.reqs.calls.live.Load() != 0 {
		t.Fatal("a finished call is still routed")
	}
	err = e.l.Scan(ctx, ledger.Query{}, func(_ ledger.Seq, raw []byte) error {
		if bytes.Contains(raw, []byte("SECRET")) {
			t.Errorf("server text in an event: %s", raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
