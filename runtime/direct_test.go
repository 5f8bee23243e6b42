//go:build linux

package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The two stdio modes of an mcp.json entry ("cleanup"): the runtime's
// behaviour is meant to match; only the evidence differs. Each test of
// TestModes runs once per mode, and newEnv's cleanup audits every one:
// every child reaped, verified activations confirmed, direct ones
// unverified (auditEnvelopes).
var cleanupModes = []string{CleanupVerified, CleanupDirect}

// modeServer is the go-sdk test server's entry under mode.
func modeServer(mode string, env map[string]string) ServerConfig {
	c := testServer(env)
	c.Cleanup = mode
	return c
}

// closeOf returns the lease.child_closed of activation act (nil when none).
func closeOf(evs []ev, act string) *events.LeaseChildClosed {
	for _, x := range evs {
		if p, ok := x.Payload.(*events.LeaseChildClosed); ok && x.Activation == act {
			return p
		}
	}
	return nil
}

// checkModeEvidence holds an ended activation's evidence to its mode: a
// verified one has the guardian's receipt, a direct one a best-effort
// child, lease.child_closed with the host's wait status, no guardian
// event, a supervisor barrier unsupported, and the runtime's report and
// the projector's verdict both unverified.
func checkModeEvidence(t *testing.T, e *env, mode, act string) *events.LeaseChildClosed {
	t.Helper()
	evs := e.events()
	st := projector.New()
	for env, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(&env); err != nil {
			t.Fatal(err)
		}
	}
	v, reasons, _ := st.Verdict(act)
	rep, ok := e.m.ConnectionStatus(act)
	if !ok {
		t.Fatalf("%s: no retained report", act)
	}
	if mode == CleanupVerified {
		if v != projector.ResultConfirmed || !rep.Confirmed() || count(evs, "guardian.receipt", func(x ev) bool { return x.Activation == act }) != 1 {
			t.Fatalf("verified %s: verdict %s %v, report %s", act, v, reasons, rep.Result)
		}
		return nil
	}
	if v != projector.ResultUnverified || rep.Result != ResultUnverified || rep.Confirmed() {
		t.Fatalf("direct %s: verdict %s %v, report %s %+v", act, v, reasons, rep.Result, rep.Obligations)
	}
	for _, x := range evs {
		if x.Activation != act {
			continue
		}
		if strings.HasPrefix(string(x.Kind), "guardian.") {
			t.Fatalf("direct %s: %s recorded", act, x.Kind)
		}
		switch p := x.Payload.(type) {
		case *events.LeaseChildStarted:
			if p.Cleanup != events.CleanupBestEffort || p.GuardianPID != 0 {
				t.Fatalf("child_started %+v", p)
			}
		case *events.ConnectionOpened:
			if p.Transport != events.TransportStdio || p.Cleanup != events.CleanupBestEffort {
				t.Fatalf("connection.opened %+v", p)
			}
		case *events.ConnectionBarrier:
			if p.Obligation == events.ObligationSupervisor && (p.Outcome != events.BarrierUnsupported || p.Detail != "direct_child") {
				t.Fatalf("supervisor barrier %+v", p)
			}
		}
	}
	c := closeOf(evs, act)
	if c == nil || !c.Reaped || c.ReapedAt == nil || c.StdinClosedAt == nil || c.StdoutClosedAt == nil || c.StderrClosedAt == nil ||
		c.Descendants != events.DescendantsUnknown {
		t.Fatalf("direct %s: lease.child_closed %+v", act, c)
	}
	return c
}

func TestModes(t *testing.T) {
	for _, mode := range cleanupModes {
		t.Run(mode, func(t *testing.T) {
			t.Run("lifecycle", func(t *testing.T) { modeLifecycle(t, mode) })
			t.Run("revoke_and_reap", func(t *testing.T) { modeRevokeReap(t, mode) })
			t.Run("crash", func(t *testing.T) { modeCrash(t, mode) })
			t.Run("kill9_mid_call", func(t *testing.T) { modeKillMidCall(t, mode) })
			t.Run("kill9_idle", func(t *testing.T) { modeKillIdle(t, mode) })
			t.Run("stubborn", func(t *testing.T) { modeStubborn(t, mode) })
			t.Run("resource_read", func(t *testing.T) { modeResourceRead(t, mode) })
		})
	}
}

// Acquire, list, call, session end: the same for both modes; a direct
// child ends at its stdin's EOF with exit 0 and no signal.
func modeLifecycle(t *testing.T, mode string) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", modeServer(mode, nil))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := s.Capability().Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "hi" {
		t.Fatalf("echo: %s", mustJSON(res))
	}
	l := e.m.leaseOf("s1", "ts")
	if l == nil {
		t.Fatal("no lease")
	}
	if _, err := s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: strings.Repeat("a", 64)}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("digest mismatch: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if e.m.leaseOf("s1", "ts") != nil || len(childrenOf(os.Getpid())) != 0 {
		t.Fatal("session end left the lease or its child")
	}
	if c := checkModeEvidence(t, e, mode, l.activation); c != nil {
		if c.ExitCode != 0 || c.Signal != "" || c.TermSentAt != nil || c.KillSentAt != nil || c.ExitedBeforeClose || c.StdoutForced {
			t.Fatalf("direct child at EOF: %+v", c)
		}
	}
}

// Revocation and idle reaping end a lease the same way in both modes.
func modeRevokeReap(t *testing.T, mode string) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", modeServer(mode, nil))
	e.cfg.Set("other", modeServer(mode, nil))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	for _, srv := range []string{"ts", "other"} {
		if _, err := s.Capability().Tools(ctx, srv); err != nil {
			t.Fatal(err)
		}
	}
	revoked, reaped := e.m.leaseOf("s1", "ts"), e.m.leaseOf("s1", "other")
	if err := e.m.Revoke(ctx, "s1", "ts", "host_request"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Capability().Tools(ctx, "ts"); err != nil { // a fresh lease
		t.Fatal(err)
	}
	if nl := e.m.leaseOf("s1", "ts"); nl == nil || nl == revoked {
		t.Fatal("no fresh lease after revocation")
	}
	e.clock.Advance(time.Hour)
	if n, err := e.m.ReapIdle(ctx, time.Minute); n != 2 || err != nil {
		t.Fatalf("ReapIdle: %d %v", n, err)
	}
	for _, l := range []*lease{revoked, reaped} {
		checkModeEvidence(t, e, mode, l.activation)
	}
	if count(e.events(), "lease.reaped", nil) != 2 {
		t.Fatal("reaps not recorded")
	}
}

// A child that exits during a call fails it with its wait status and is
// replaced by the next call.
func modeCrash(t *testing.T, mode string) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", modeServer(mode, nil))
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
	first := e.m.leaseOf("s1", "ts")
	_, err = s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "crash", Digest: digestOf(t, tools, "crash")})
	var le *LeaseError
	if !errors.Is(err, ErrCallFailed) || !errors.As(err, &le) || le.Cause != events.CauseProcessExited || le.Exit == nil || le.Exit.Code != 3 {
		t.Fatalf("crash: %v (%+v)", err, le)
	}
	if _, err := s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	if nl := e.m.leaseOf("s1", "ts"); nl == nil || nl == first {
		t.Fatal("no fresh lease after the crash")
	}
	if c := checkModeEvidence(t, e, mode, first.activation); c != nil && (c.ExitCode != 3 || !c.ExitedBeforeClose || c.TermSentAt != nil) {
		t.Fatalf("crashed direct child: %+v", c)
	}
}

// kill -9 of the server while a call runs: the call fails with a typed
// error carrying the wait status, and the lease records what was observed
// (exit by signal 9, sent by nobody the host knows).
func modeKillMidCall(t *testing.T, mode string) {
	calls := filepath.Join(t.TempDir(), "calls")
	e := newEnv(t, nil)
	e.cfg.Set("ts", modeServer(mode, map[string]string{"TESTSERVER_CALLS": calls}))
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
	errc := make(chan error, 1)
	go func() {
		_, err := s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "slow", Digest: digestOf(t, tools, "slow"), Arguments: map[string]any{"ms": 60000}})
		errc <- err
	}()
	testproc.Eventually(t, "the server received the call", func() bool {
		b, _ := os.ReadFile(calls)
		return strings.Contains(string(b), "slow")
	})
	if err := syscall.Kill(l.child.facts().TargetPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	var le *LeaseError
	if !errors.Is(err, ErrCallFailed) || !errors.As(err, &le) || le.Cause != events.CauseProcessExited || le.Exit == nil || le.Exit.Signal != "KILL" {
		t.Fatalf("call on a killed child: %v (%+v)", err, le)
	}
	if c := checkModeEvidence(t, e, mode, l.activation); c != nil && (c.Signal != "KILL" || c.ExitCode != -1 || !c.ExitedBeforeClose || c.KillSentAt != nil) {
		t.Fatalf("killed direct child: %+v", c)
	}
}

// kill -9 while idle: the next call is not failed, it goes to a fresh
// child.
func modeKillIdle(t *testing.T, mode string) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", modeServer(mode, nil))
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
	call := func() error {
		_, err := s.Capability().Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}})
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "ts")
	pid := l.child.facts().TargetPID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// kill returns before the child is dead: the next call comes once it
	// has exited, so the host's close must find it exited already.
	testproc.Eventually(t, "the killed child exited", func() bool { return !testproc.Running(pid) })
	if err := call(); err != nil {
		t.Fatalf("call after an idle child was killed: %v", err)
	}
	if nl := e.m.leaseOf("s1", "ts"); nl == nil || nl == l {
		t.Fatal("the killed child was not replaced")
	}
	<-l.termDone
	if c := checkModeEvidence(t, e, mode, l.activation); c != nil && (c.Signal != "KILL" || !c.ExitedBeforeClose) {
		t.Fatalf("killed idle direct child: %+v", c)
	}
}

// A child that ignores EOF and TERM gets TERM, then KILL, within the close
// budget: from the guardian, or from the host to its process group.
func modeStubborn(t *testing.T, mode string) {
	e := newEnv(t, nil)
	e.cfg.Set("stubborn", modeServer(mode, map[string]string{"TESTSERVER_IGNORE_TERM": "1", "TESTSERVER_IGNORE_EOF": "1"}))
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Capability().Tools(ctx, "stubborn"); err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "stubborn")
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := checkModeEvidence(t, e, mode, l.activation)
	if mode == CleanupVerified {
		if l.cleanup.Receipt == nil || l.cleanup.Receipt.Signal != "KILL" {
			t.Fatalf("stubborn verified: %+v", l.cleanup)
		}
		return
	}
	if c.Signal != "KILL" || c.TermSentAt == nil || c.KillSentAt == nil || !c.GroupSignalled || c.ExitedBeforeClose {
		t.Fatalf("stubborn direct child: %+v", c)
	}
}

// Resource reads through caller-owned handles behave the same.
func modeResourceRead(t *testing.T, mode string) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", modeServer(mode, nil))
	released := make(chan struct{})
	e.m.testHookWorkerReleasing = func(*ResourceHandle) { <-released }
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	capa := s.Capability()
	o, err := capa.NewOwner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := capa.ReadResource(ctx, o, "ts", "test://text", DefaultRequestOptions())
	if err != nil {
		t.Fatal(err)
	}
	if r := await(t, h).Read; len(r.Contents) != 3 || r.Contents[0].Text != "first" {
		t.Fatalf("read %s", mustJSON(r))
	}
	if _, err := o.End(ctx); err != nil {
		t.Fatal(err)
	}
	l := e.m.leaseOf("s1", "ts")
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(released)
	// The handle's worker holds the session until its deferred release,
	// which may come after the owner's end and after this Release (the
	// hook makes it so): then the worker's release is the last and ends
	// the session. The lease's termination is the event to wait on.
	select {
	case <-l.termDone:
	case <-ctx.Done():
		t.Fatal("the session's end never terminated the lease")
	}
	checkModeEvidence(t, e, mode, l.activation)
}
