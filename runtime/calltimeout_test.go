//go:build linux

package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// childPID is the pid of the child an activation started (lease.child_started).
func childPID(t *testing.T, e *env, activation string) int {
	t.Helper()
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.LeaseChildStarted); ok && x.Activation == activation {
			return p.PID
		}
	}
	t.Fatalf("no lease.child_started for %s", activation)
	return 0
}

// TestCallTimeout: a call to a server stopped with SIGSTOP ends when its
// budget expires, with the typed timeout (ErrCallTimeout, also
// ErrCallFailed); the server, resumed, sees notifications/cancelled;
// call.finished records outcome timeout; and the lease, whose server may
// still be running the call, is kept and serves the next call.
func TestCallTimeout(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.CallTimeout = time.Second })
	cancels := filepath.Join(t.TempDir(), "cancels")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CANCELS": cancels}))
	ctx := ctxT(t, time.Minute)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	echo := CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "hi"}}
	old := e.m.leaseOf("s1", "ts")
	pid := childPID(t, e, old.activation)
	testproc.Stop(t, pid)
	_, err = s.Capability().Call(ctx, echo)
	if cerr := syscall.Kill(pid, syscall.SIGCONT); cerr != nil {
		t.Fatal(cerr)
	}
	if !errors.Is(err, ErrCallTimeout) || !errors.Is(err, ErrCallFailed) {
		t.Fatalf("call to a stopped server: %v, want ErrCallTimeout", err)
	}
	testproc.Eventually(t, "the resumed server saw notifications/cancelled", func() bool {
		b, _ := os.ReadFile(cancels)
		return strings.TrimSpace(string(b)) != ""
	})
	if res, err := s.Capability().Call(ctx, echo); err != nil || res.IsError {
		t.Fatalf("call after the timeout: %v", err)
	}
	if cur := e.m.leaseOf("s1", "ts"); cur == nil || cur.activation != old.activation {
		t.Fatal("one timeout replaced the lease")
	}
	var outcomes []events.CallOutcome
	for _, x := range e.events() {
		if f, ok := x.Payload.(*events.CallFinished); ok {
			outcomes = append(outcomes, f.Outcome)
		}
	}
	if len(outcomes) != 2 || outcomes[0] != events.CallTimeout || outcomes[1] != events.CallOK {
		t.Fatalf("call.finished outcomes %v, want [timeout ok]", outcomes)
	}
}

// TestWedgedLeaseRetired: a server's call budget in its config
// ("callTimeout") overrides the manager's; MaxConsecutiveTimeouts calls in
// a row past it retire the lease (lease.terminated{wedged}, its child
// ended), and the next call runs on a fresh lease; a call answered in time
// between timeouts starts the count again.
func TestWedgedLeaseRetired(t *testing.T) {
	e := newEnv(t, nil) // the manager's budget is the default: the config's applies
	cfg := testServer(nil)
	cfg.CallTimeout = Duration(300 * time.Millisecond)
	e.cfg.Set("ts", cfg)
	ctx := ctxT(t, time.Minute)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	slow := CallRequest{Server: "ts", Tool: "slow", Digest: digestOf(t, tools, "slow"), Arguments: map[string]any{"ms": 5000}}
	echo := CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "hi"}}
	first := e.m.leaseOf("s1", "ts").activation
	// Timeouts, an answer, then timeouts up to the bound.
	for i := range MaxConsecutiveTimeouts - 1 {
		if _, err := s.Capability().Call(ctx, slow); !errors.Is(err, ErrCallTimeout) {
			t.Fatalf("slow call %d: %v", i, err)
		}
	}
	if _, err := s.Capability().Call(ctx, echo); err != nil {
		t.Fatalf("echo between timeouts: %v", err)
	}
	for i := range MaxConsecutiveTimeouts {
		if cur := e.m.leaseOf("s1", "ts"); cur == nil || cur.activation != first {
			t.Fatalf("lease replaced after %d consecutive timeouts", i)
		}
		if _, err := s.Capability().Call(ctx, slow); !errors.Is(err, ErrCallTimeout) {
			t.Fatalf("slow call %d: %v", i, err)
		}
	}
	if cur := e.m.leaseOf("s1", "ts"); cur != nil && cur.activation == first {
		t.Fatal("the wedged lease is still in service")
	}
	if res, err := s.Capability().Call(ctx, echo); err != nil || res.IsError {
		t.Fatalf("call after the wedged lease: %v", err)
	}
	if cur := e.m.leaseOf("s1", "ts"); cur == nil || cur.activation == first {
		t.Fatal("no fresh lease after the wedged one")
	}
	evs := e.events()
	wedged := count(evs, "lease.terminated", func(x ev) bool {
		p, ok := x.Payload.(*events.LeaseTerminated)
		return ok && x.Activation == first && p.Reason == events.TerminatedWedged
	})
	timeouts := count(evs, "call.finished", func(x ev) bool {
		p, ok := x.Payload.(*events.CallFinished)
		return ok && x.Activation == first && p.Outcome == events.CallTimeout
	})
	if wedged != 1 || timeouts != 2*MaxConsecutiveTimeouts-1 {
		t.Fatalf("%d lease.terminated{wedged}, %d timeouts on the first lease", wedged, timeouts)
	}
}

// TestConfigCallTimeout: "callTimeout" reads a duration string or a whole
// number of milliseconds, and a negative or oversize one refuses the entry.
func TestConfigCallTimeout(t *testing.T) {
	for doc, want := range map[string]time.Duration{
		`{"mcpServers":{"a":{"command":"x","callTimeout":"90s"}}}`: 90 * time.Second,
		`{"mcpServers":{"a":{"command":"x","callTimeout":1500}}}`:  1500 * time.Millisecond,
		`{"mcpServers":{"a":{"command":"x"}}}`:                     0,
	} {
		cfg, err := ParseConfig([]byte(doc))
		if err != nil || time.Duration(cfg["a"].CallTimeout) != want {
			t.Errorf("%s: %v, %v; want %v", doc, time.Duration(cfg["a"].CallTimeout), err, want)
		}
	}
	for _, doc := range []string{
		`{"mcpServers":{"a":{"command":"x","callTimeout":"-1s"}}}`,
		`{"mcpServers":{"a":{"command":"x","callTimeout":"25h"}}}`,
		`{"mcpServers":{"a":{"command":"x","callTimeout":"soon"}}}`,
		`{"mcpServers":{"a":{"command":"x","callTimeout":1.5}}}`,
		`{"mcpServers":{"a":{"command":"x","callTimeout":true}}}`,
	} {
		if _, err := ParseConfig([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", doc)
		}
	}
}
