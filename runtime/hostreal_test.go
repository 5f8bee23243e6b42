//go:build linux

package runtime

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Integration tests of the host-facing fixes against real children under
// the real guardian (runtime/internal/testserver).

// readLines returns the lines of a file (none when it does not exist).
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

// Kill the idle server's process from outside and call at once, 50 times:
// no call fails. Each killed activation ends as child_exited, with a
// failed call recorded when the call was sent before the exit was seen
// (then retried); the call runs on a fresh activation.
func TestKillIdleServerCallAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 120*time.Second)
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
	req := CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}
	const rounds = 50
	var killed []string
	for i := range rounds {
		l := e.m.leaseOf("s1", "ts")
		if l == nil {
			t.Fatalf("round %d: no lease", i)
		}
		if err := syscall.Kill(l.child.facts().TargetPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, err := capa.Call(ctx, req); err != nil {
			t.Fatalf("round %d: call after killing the idle server: %v", i, err)
		}
		killed = append(killed, l.activation)
	}
	evs := e.events()
	retried := 0
	for _, act := range killed {
		for _, x := range evs {
			if x.Activation != act {
				continue
			}
			switch p := x.Payload.(type) {
			case *events.LeaseTerminated:
				if p.Reason != "child_exited" {
					t.Errorf("%s terminated for %q, want child_exited", act, p.Reason)
				}
			case *events.CallFinished:
				// ok: the previous round's call; transport_error: this
				// round's, sent before the exit was seen, then retried.
				switch p.Outcome {
				case events.CallOK:
				case events.CallTransportError:
					retried++
				default:
					t.Errorf("%s: call finished %s", act, p.Outcome)
				}
			}
		}
	}
	t.Logf("%d rounds: %d calls sent to a dead child and retried, %d replaced before admission", rounds, retried, rounds-retried)
}

// A child killed after the request reached it fails the call, which is
// not retried: the server recorded exactly one tools/call.
func TestChildKilledAfterAdmissionFails(t *testing.T) {
	e := newEnv(t, nil)
	calls := filepath.Join(t.TempDir(), "calls")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CALLS": calls}))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "ts")
	done := make(chan error, 1)
	go func() {
		_, err := s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "slow", Digest: digestOf(t, tools, "slow"), Arguments: map[string]any{"ms": 30000}})
		done <- err
	}()
	testproc.Eventually(t, "the call reaches the server", func() bool { return len(readLines(t, calls)) == 1 })
	if err := syscall.Kill(l.child.facts().TargetPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrCallFailed) {
		t.Fatalf("call whose child died after receiving it: %v, want ErrCallFailed", err)
	}
	if got := readLines(t, calls); len(got) != 1 {
		t.Fatalf("server saw %v: the call was repeated", got)
	}
	if n := count(e.events(), "call.admitted", nil); n != 1 {
		t.Fatalf("%d admissions, want 1", n)
	}
}

// A JSON-RPC error reply from a real server: ErrRemote with its code,
// remote_error recorded, no server text, the lease kept.
func TestRemoteErrorRealServer(t *testing.T) {
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
	l := e.m.leaseOf("s1", "ts")
	_, err = capa.Call(ctx, CallRequest{Server: "ts", Tool: "refuse", Digest: digestOf(t, tools, "refuse")})
	var le *LeaseError
	if !errors.Is(err, ErrRemote) || !errors.As(err, &le) || le.Code != -32602 || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("err %v", err)
	}
	if n := count(e.events(), "call.finished", func(x ev) bool {
		return x.Payload.(*events.CallFinished).Outcome == events.CallRemoteError
	}); n != 1 {
		t.Fatalf("remote_error recorded %d times", n)
	}
	if _, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	if e.m.leaseOf("s1", "ts") != l {
		t.Fatal("the lease was replaced after a JSON-RPC error reply")
	}
}

// A real user's mcp.json with dotted, dashed, spaced, non-ASCII and long
// names: every entry loads, lists its tools and runs a call, end to end.
func TestMCPJSONOddNamesEndToEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, mcpJSON(testserverBin.Out, oddNames), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Config = FileConfigSource{Path: path} })
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	for _, n := range oddNames {
		tools, err := s.Capability().Tools(ctx, n)
		if err != nil {
			t.Fatalf("%q: tools: %v", n, err)
		}
		if _, err := s.Capability().Call(ctx, CallRequest{Server: n, Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatalf("%q: call: %v", n, err)
		}
	}
	checkOddNameEvents(t, e.envelopes())
}

// A noisy server's stderr is kept bounded (the last MaxStderrBytes, the
// rest counted) and streamed line by line to the host's log; none of it
// reaches the ledger.
func TestNoisyServerStderrBounded(t *testing.T) {
	const total = 1 << 20
	var mu sync.Mutex
	var logged, longest int
	e := newEnv(t, func(o *Options) {
		o.StderrLog = func(session, server, activation string, line []byte) {
			mu.Lock()
			defer mu.Unlock()
			logged += len(line) + 1
			longest = max(longest, len(line))
		}
	})
	e.cfg.Set("noisy", testServer(map[string]string{"TESTSERVER_STDERR_BYTES": "1048576"}))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	if _, err := s.Capability().Tools(ctx, "noisy"); err != nil {
		t.Fatal(err)
	}
	var kept []byte
	var dropped int64
	testproc.Eventually(t, "all stderr kept or counted dropped", func() bool {
		kept, dropped, err = e.m.Stderr("s1", "noisy")
		return err == nil && int64(len(kept))+dropped == total
	})
	if len(kept) != MaxStderrBytes || dropped != total-MaxStderrBytes {
		t.Fatalf("kept %d, dropped %d", len(kept), dropped)
	}
	// The server writes 100-byte numbered lines: the last kept line is the
	// last written (number 10485, cut to 76 bytes).
	if i := bytes.LastIndexByte(kept, '\n'); !bytes.HasPrefix(kept[i+1:], []byte("000010485 ")) {
		t.Fatalf("tail %q", kept[len(kept)-120:])
	}
	mu.Lock()
	if logged < total-100 || longest > MaxStderrLineBytes {
		t.Fatalf("logged %d bytes, longest line %d", logged, longest)
	}
	mu.Unlock()
	for _, x := range e.envelopes() {
		if bytes.Contains(x.Data, []byte("000000000 0000")) {
			t.Fatalf("stderr in event %s", x.Kind)
		}
	}
}
