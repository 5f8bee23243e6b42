//go:build linux

package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A session with no request for SessionIdleTimeout is ended: session.ended
// recorded, its lease terminated, the client's next request refused. A
// request in flight keeps it alive.
func TestIdleTimeout(t *testing.T) {
	const idle = 400 * time.Millisecond
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, func(o *Options, _ *runtime.Options) {
		o.SessionIdleTimeout = idle
	})
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, e.plain["alice"], nil)
	defer cs.Close()
	id := cs.ID()
	// A call three times as long as the timeout: the session lives on.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__slow", Arguments: map[string]any{"ms": 3 * idle.Milliseconds()}})
	if err != nil || res.IsError {
		t.Fatalf("slow call: %v %+v", err, res)
	}
	if n := e.count("session.ended", nil); n != 0 {
		t.Fatal("session ended during a call")
	}
	testproc.Eventually(t, "idle end", func() bool {
		return len(e.g.Sessions()) == 0 &&
			e.count("session.ended", func(x events.Envelope, _ events.Payload) bool { return x.Session == id }) == 1
	})
	if _, err := cs.ListTools(ctx, nil); err == nil {
		t.Fatal("an idle-ended session still answers")
	}
	if n := e.count("lease.terminated", nil); n != 1 {
		t.Fatalf("lease.terminated: %d", n)
	}
}

// serverSaw reports whether the test server's record file (TESTSERVER_CALLS,
// TESTSERVER_READS) holds the line want exactly n times; the server appends
// and syncs the line before the request's handler runs.
func serverSaw(path, want string, n int) func() error {
	return func() error {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		got := 0
		for _, line := range strings.Split(string(b), "\n") {
			if line == want {
				got++
			}
		}
		if got != n {
			return fmt.Errorf("%s: %d lines %q, want %d", filepath.Base(path), got, want, n)
		}
		return nil
	}
}

// EndSession (and Close) with requests in flight: the call is cancelled
// at once (the client gets an error, not the result), the pending read's
// handle is settled, the scope released; ErrUnknownSession afterwards.
func TestEndSessionInFlight(t *testing.T) {
	dir := t.TempDir()
	calls, reads := filepath.Join(dir, "calls"), filepath.Join(dir, "reads")
	e := newEnv(t, []server{{"tools", testServer(map[string]string{"TESTSERVER_CALLS": calls, "TESTSERVER_READS": reads})}}, []string{"alice"}, nil)
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, e.plain["alice"], nil)
	defer cs.Close()
	id := cs.ID()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	type callOut struct {
		res *mcp.CallToolResult
		err error
	}
	callc, readc := make(chan callOut, 1), make(chan error, 1)
	go func() {
		// The tool sleeps 20 s ignoring cancellation: it cannot answer
		// before EndSession unless EndSession waits for it.
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__slow", Arguments: map[string]any{"ms": 20000}})
		callc <- callOut{res, err}
	}()
	go func() {
		_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "leaseledger://tools/test://slow"})
		readc <- err
	}()
	testproc.Eventually(t, "call admitted and read registered", func() bool {
		return e.count("call.admitted", nil) == 1 && e.count("request.registered", nil) == 1
	})
	// Both requests are in flight on the server: it received them (the
	// read's worker sent it) and their handlers run.
	testproc.Eventually(t, "the server's record of the tools/call", serverSaw(calls, "slow", 1))
	testproc.Eventually(t, "the server's record of the resources/read", serverSaw(reads, "test://slow", 1))
	if err := e.g.EndSession(ctx, id); err != nil {
		t.Fatalf("EndSession: %v", err)
	}
	// EndSession did not wait for the tool: the call ended without the
	// server's answer (an error, not the result "slept 20000"), recorded
	// cancelled with no result.
	if out := <-callc; out.err == nil {
		t.Fatalf("the call in flight completed after EndSession: %+v", out.res)
	}
	if err := <-readc; err == nil {
		t.Fatal("the read in flight completed after EndSession")
	}
	if n := e.count("session.ended", func(x events.Envelope, _ events.Payload) bool { return x.Session == id }); n != 1 {
		t.Fatalf("session.ended: %d", n)
	}
	if n := e.count("call.finished", func(_ events.Envelope, p events.Payload) bool {
		f := p.(*events.CallFinished)
		return f.Outcome == events.CallCancelled && f.ResultBytes == 0 && f.ResultSHA256 == ""
	}); n != 1 {
		t.Fatalf("call.finished cancelled without a result: %d", n)
	}
	if n := e.count("call.finished", nil); n != 1 {
		t.Fatalf("call.finished: %d", n)
	}
	if n := e.count("request.cancelled", nil); n != 1 {
		t.Fatalf("request.cancelled: %d", n)
	}
	if err := e.g.EndSession(ctx, id); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("second EndSession: %v", err)
	}
	if _, err := cs.ListTools(ctx, nil); err == nil {
		t.Fatal("an ended session still answers")
	}
}

// The client's notifications/cancelled cancels a read's handle: the
// request is recorded cancelled, the session goes on.
func TestCancelRead(t *testing.T) {
	dir := t.TempDir()
	cancels, reads := filepath.Join(dir, "cancels"), filepath.Join(dir, "reads")
	e := newEnv(t, []server{{"tools", testServer(map[string]string{"TESTSERVER_CANCELS": cancels, "TESTSERVER_READS": reads})}}, []string{"alice"}, nil)
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, e.plain["alice"], nil)
	defer cs.Close()
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.ReadResource(rctx, &mcp.ReadResourceParams{URI: "leaseledger://tools/test://slow"})
		errc <- err
	}()
	testproc.Eventually(t, "read registered", func() bool { return e.count("request.registered", nil) == 1 })
	// The read's worker sent it: the server received it and holds it.
	testproc.Eventually(t, "the server's record of the resources/read", serverSaw(reads, "test://slow", 1))
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled read returned no error")
	}
	testproc.Eventually(t, "request.cancelled", func() bool {
		return e.count("request.cancelled", func(_ events.Envelope, p events.Payload) bool {
			return p.(*events.RequestCancelled).LocalSettled
		}) == 1
	})
	// The server saw the cancellation of its request.
	testproc.Eventually(t, "the server's record of notifications/cancelled", func() bool {
		b, _ := os.ReadFile(cancels)
		return strings.Count(string(b), "\n") == 1
	})
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "leaseledger://tools/test://item/2"})
	if err != nil || rr.Contents[0].Text != "item 2" {
		t.Fatalf("read after cancel: %v", err)
	}
}

// A server that fails to start is left out of the listing, not fatal;
// calling its tools reports it unavailable with static text.
func TestBrokenServerLeftOut(t *testing.T) {
	broken := runtime.ServerConfig{Command: filepath.Join(t.TempDir(), "missing")}
	e := newEnv(t, []server{{"broken", broken}, {"tools", testServer(nil)}}, []string{"alice"}, nil)
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, e.plain["alice"], nil)
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range toolNames(lt) {
		if !strings.HasPrefix(n, "tools__") {
			t.Fatalf("listed %s", n)
		}
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "broken__echo", Arguments: map[string]any{}})
	if err == nil || rpcCode(t, err) != CodeServerUnavailable || !strings.Contains(err.Error(), msgUnavailable) {
		t.Fatalf("call on a broken server: %v", err)
	}
	var n int
	for _, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 9 {
		t.Fatalf("%d resources", n)
	}
}

// 50 sessions at once against the go-sdk test server, each listing and
// calling; every one ends recorded when the clients close.
func TestConcurrentSessions(t *testing.T) {
	const sessions = 50
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, func(o *Options, _ *runtime.Options) {
		o.MaxSessionsPerToken = sessions
	})
	ctx := ctxT(t, 3*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Go(func() {
			cs, err := e.connect(ctx, e.plain["alice"], nil)
			if err != nil {
				errs <- err
				return
			}
			defer cs.Close()
			if _, err := cs.ListTools(ctx, nil); err != nil {
				errs <- err
				return
			}
			want := fmt.Sprint("s", i)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"text": want}})
			if err != nil {
				errs <- err
				return
			}
			if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != want {
				errs <- fmt.Errorf("session %d: wrong echo", i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testproc.Eventually(t, "every session ended", func() bool { return len(e.g.Sessions()) == 0 })
	if n := e.count("session.ended", nil); n != sessions {
		t.Fatalf("session.ended: %d", n)
	}
	if n := e.count("call.finished", func(_ events.Envelope, p events.Payload) bool {
		return p.(*events.CallFinished).Outcome == events.CallOK
	}); n != sessions {
		t.Fatalf("calls ok: %d", n)
	}
}

// Close ends every session and refuses new ones with 503.
func TestClose(t *testing.T) {
	e := newEnv(t, []server{{"tools", testServer(nil)}}, []string{"alice"}, nil)
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, e.plain["alice"], nil)
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.g.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n := e.count("session.ended", nil); n != 1 {
		t.Fatalf("session.ended: %d", n)
	}
	if err := e.g.EndSession(ctx, cs.ID()); !errors.Is(err, ErrClosed) {
		t.Fatalf("EndSession after Close: %v", err)
	}
	if code, _ := e.post(initBody, map[string]string{"Authorization": "Bearer " + e.plain["alice"]}); code != 503 {
		t.Fatalf("after Close: %d, want 503", code)
	}
}

// A server that never answers initialize fails its acquisition at the
// runtime's AcquireTimeout: the call is reported unavailable, not
// cancelled (the request's own context is still alive), and logged.
func TestAcquireTimeoutNotCancelled(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	e := newEnv(t, []server{{"mute", runtime.ServerConfig{Command: sleep, Args: []string{"60"}}}}, []string{"alice"},
		func(o *Options, r *runtime.Options) {
			r.AcquireTimeout = 300 * time.Millisecond
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, e.plain["alice"], nil)
	defer cs.Close()
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "mute__echo", Arguments: map[string]any{}})
	if err == nil || rpcCode(t, err) != CodeServerUnavailable {
		t.Fatalf("call on a server past its acquire timeout: %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"gateway: listing failed\"") {
		t.Fatalf("failure not logged at warn:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
