//go:build linux

package runtime

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Policy tests of the host-facing fixes: a child that died while idle, a
// JSON-RPC error reply, calls on shared leases, revocation and denial,
// the background reaper, ReapIdle's bound, stderr, config names.

// outcomes returns the call.finished outcomes recorded on act.
func (p *policyEnv) outcomes(act string) []events.CallOutcome {
	var out []events.CallOutcome
	for _, x := range p.events() {
		if f, ok := x.Payload.(*events.CallFinished); ok && x.Activation == act {
			out = append(out, f.Outcome)
		}
	}
	return out
}

// terminatedFor returns the lease.terminated reason recorded on act.
func (p *policyEnv) terminatedFor(act string) string {
	for _, x := range p.events() {
		if r, ok := x.Payload.(*events.LeaseTerminated); ok && x.Activation == act {
			return string(r.Reason)
		}
	}
	return ""
}

// A child killed while idle whose exit the guardian reports only after the
// call was sent: the call fails on the old activation (transport_error,
// the lease ended as child_exited) and runs once more on a fresh lease,
// because the receipt's reap time precedes the send.
func TestPolicyIdleChildDiedRetries(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	echo := p.digest(s, "fs", "echo")
	old := p.m.leaseOf("s1", "fs")
	report := make(chan struct{})
	var once sync.Once
	p.l.setBefore(func(ds []events.Draft) {
		if hasKind(ds, "call.admitted") && ds[0].Activation == old.activation {
			once.Do(func() { close(report) }) // the guardian reports after admission
		}
	})
	old.child.(*fakeChild).die(report)
	if _, err := s.Capability().Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatalf("call after an idle child died: %v", err)
	}
	cur := p.m.leaseOf("s1", "fs")
	if cur == nil || cur == old || !terminated(old) {
		t.Fatal("the dead lease was not replaced")
	}
	if got := p.outcomes(old.activation); len(got) != 1 || got[0] != events.CallTransportError {
		t.Fatalf("old activation outcomes %v, want [transport_error]", got)
	}
	if r := p.terminatedFor(old.activation); r != "child_exited" {
		t.Fatalf("old lease terminated for %q, want child_exited", r)
	}
	if got := p.outcomes(cur.activation); len(got) != 1 || got[0] != events.CallOK {
		t.Fatalf("retry outcomes %v, want [ok]", got)
	}
	if p.w.calls.Load() != 1 {
		t.Fatalf("children received %d tools/call, want 1 (the retry)", p.w.calls.Load())
	}
}

// A child whose end is already reported when a call arrives is replaced
// without calling: no call.admitted on the dead activation, and a gate that
// finds it ended refuses with a gone refusal (the caller acquires again).
func TestPolicyEndedChildReplacedBeforeAdmission(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	echo := p.digest(s, "fs", "echo")
	old := p.m.leaseOf("s1", "fs")
	old.child.(*fakeChild).exit()
	_, _, err := old.call(ctx, "s1", echoReq("fs", echo), []byte(`{"text":"x"}`))
	if !isGoneRefusal(err) {
		t.Fatalf("gate on an ended child: %v, want a gone refusal", err)
	}
	if _, err := s.Capability().Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatal(err)
	}
	if n := count(p.events(), "call.admitted", func(x ev) bool { return x.Activation == old.activation }); n != 0 {
		t.Fatalf("%d calls admitted on the ended child", n)
	}
	if r := p.terminatedFor(old.activation); r != "child_exited" {
		t.Fatalf("terminated for %q, want child_exited", r)
	}
}

// A child that dies after the request reached it (the crash tool) fails
// the call and is not retried: the reap follows the send.
func TestPolicyChildDiesAfterAdmissionNotRetried(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	crash := p.digest(s, "fs", "crash")
	l := p.m.leaseOf("s1", "fs")
	launches := p.w.launches.Load()
	if _, err := s.Capability().Call(ctx, CallRequest{Server: "fs", Tool: "crash", Digest: crash}); !errors.Is(err, ErrCallFailed) {
		t.Fatalf("crash: %v, want ErrCallFailed", err)
	}
	if p.w.launches.Load() != launches || p.w.calls.Load() != 1 {
		t.Fatalf("retried: launches %d→%d, calls %d", launches, p.w.launches.Load(), p.w.calls.Load())
	}
	if got := p.outcomes(l.activation); len(got) != 1 || got[0] != events.CallTransportError {
		t.Fatalf("outcomes %v", got)
	}
	if r := p.terminatedFor(l.activation); r != "child_exited" {
		t.Fatalf("terminated for %q, want child_exited", r)
	}
}

// A JSON-RPC error reply is remote_error: typed (ErrRemote with the code),
// no server text, and the lease is kept and keeps serving.
func TestPolicyRemoteErrorKeepsLease(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s := p.open("s1")
	refuse, echo := p.digest(s, "fs", "refuse"), p.digest(s, "fs", "echo")
	l := p.m.leaseOf("s1", "fs")
	_, err := s.Capability().Call(ctx, CallRequest{Server: "fs", Tool: "refuse", Digest: refuse})
	var le *LeaseError
	if !errors.Is(err, ErrRemote) || !errors.As(err, &le) || le.Code != jsonrpc.CodeInvalidParams || errors.Is(err, ErrCallFailed) {
		t.Fatalf("err %v, want ErrRemote with code %d", err, jsonrpc.CodeInvalidParams)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Fatal("server text in error")
	}
	if got := p.outcomes(l.activation); len(got) != 1 || got[0] != events.CallRemoteError {
		t.Fatalf("outcomes %v, want [remote_error]", got)
	}
	if _, err := s.Capability().Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatal(err)
	}
	if p.m.leaseOf("s1", "fs") != l || terminated(l) {
		t.Fatal("a JSON-RPC error reply ended the lease")
	}
}

// Calls on a shared lease are recorded under the calling session; Revoke
// never touches the shared lease (whatever the session), RevokeShared
// does.
func TestPolicySharedCallsAndRevokeShared(t *testing.T) {
	p := newPolicyEnv(t, nil)
	p.cfg.Set("shared", ServerConfig{Command: "fake", Shared: true})
	ctx := context.Background()
	a, b := p.open("sa"), p.open("sb")
	echo := p.digest(a, "shared", "echo")
	for _, s := range []*SessionScope{a, b} {
		if _, err := s.Capability().Call(ctx, echoReq("shared", echo)); err != nil {
			t.Fatal(err)
		}
	}
	sh := p.m.leaseOf(SharedSessionKey, "shared")
	for _, kind := range []events.Kind{"call.admitted", "call.finished"} {
		for _, sess := range []string{"sa", "sb"} {
			if n := count(p.events(), kind, func(x ev) bool { return x.Session == sess && x.Activation == sh.activation }); n != 1 {
				t.Fatalf("%s under %s: %d, want 1", kind, sess, n)
			}
		}
		if n := count(p.events(), kind, func(x ev) bool { return x.Session == SharedSessionKey }); n != 0 {
			t.Fatalf("%s recorded under the shared key: %d", kind, n)
		}
	}
	if err := p.m.Revoke(ctx, "sa", "shared", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	if err := p.m.Revoke(ctx, SharedSessionKey, "shared", "host_revoked"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Revoke with the shared key: %v", err)
	}
	if terminated(sh) || p.m.leaseOf(SharedSessionKey, "shared") != sh {
		t.Fatal("Revoke of a session touched the shared lease")
	}
	if err := p.m.RevokeShared(ctx, "shared", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	if !terminated(sh) || p.m.leaseOf(SharedSessionKey, "shared") != nil {
		t.Fatal("RevokeShared did not end the shared lease")
	}
}

// Deny revokes and refuses (recorded, nothing started) until Allow; other
// sessions are unaffected; a call reaching a lease's gate while denied is
// refused there; DenyShared blocks every session's shared lease.
func TestPolicyDenyUntilAllowed(t *testing.T) {
	p := newPolicyEnv(t, nil)
	p.cfg.Set("shared", ServerConfig{Command: "fake", Shared: true})
	ctx := context.Background()
	s1, s2 := p.open("s1"), p.open("s2")
	echo := p.digest(s1, "fs", "echo")
	l1 := p.m.leaseOf("s1", "fs")
	if err := p.m.Deny(ctx, "s1", "fs", "host_denied"); err != nil {
		t.Fatal(err)
	}
	if !terminated(l1) {
		t.Fatal("Deny did not revoke the lease")
	}
	launches := p.w.launches.Load()
	if _, err := s1.Capability().Call(ctx, echoReq("fs", echo)); !errors.Is(err, ErrDenied) {
		t.Fatalf("call while denied: %v", err)
	}
	if _, err := s1.Capability().Tools(ctx, "fs"); !errors.Is(err, ErrDenied) {
		t.Fatalf("tools while denied: %v", err)
	}
	if p.w.launches.Load() != launches {
		t.Fatal("a denied key started a child")
	}
	denied := func(x ev) bool {
		f, ok := x.Payload.(*events.LeaseAcquireFailed)
		return ok && f.Reason == "denied" && x.Session == "s1"
	}
	if n := count(p.events(), "lease.acquire_failed", denied); n != 2 {
		t.Fatalf("lease.acquire_failed{denied}: %d, want 2", n)
	}
	if _, err := s2.Capability().Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatalf("another session was denied: %v", err)
	}
	if err := p.m.Allow("s1", "fs"); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Capability().Call(ctx, echoReq("fs", echo)); err != nil {
		t.Fatalf("after Allow: %v", err)
	}

	// A call racing Deny reaches the gate of a live lease: refused there.
	l := p.m.leaseOf("s1", "fs")
	p.m.setDenied(leaseKey{"s1", "fs"}, true)
	if _, _, err := l.call(ctx, "s1", echoReq("fs", echo), []byte(`{}`)); !errors.Is(err, ErrDenied) {
		t.Fatalf("gate while denied: %v", err)
	}
	if n := count(p.events(), "call.refused", func(x ev) bool { return x.Payload.(*events.CallRefused).Reason == "denied" }); n != 1 {
		t.Fatalf("call.refused{denied}: %d", n)
	}
	_ = p.m.Allow("s1", "fs")

	shEcho := p.digest(s2, "shared", "echo")
	if err := p.m.DenyShared(ctx, "shared", "host_denied"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*SessionScope{s1, s2} {
		if _, err := s.Capability().Call(ctx, echoReq("shared", shEcho)); !errors.Is(err, ErrDenied) {
			t.Fatalf("shared call while denied: %v", err)
		}
	}
	if err := p.m.AllowShared("shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Capability().Call(ctx, echoReq("shared", shEcho)); err != nil {
		t.Fatal(err)
	}
}

// The background reaper ends an idle lease with no traffic at all; Close
// stops it (TestMain's goroutine check would see a leftover).
func TestPolicyBackgroundReaper(t *testing.T) {
	p := newPolicyEnv(t, func(o *Options) { o.ReapInterval = 2 * time.Millisecond; o.IdleMax = time.Minute })
	p.cfg.Set("shared", ServerConfig{Command: "fake", Shared: true})
	s := p.open("s1")
	p.digest(s, "fs", "echo")
	p.digest(s, "shared", "echo")
	own, sh := p.m.leaseOf("s1", "fs"), p.m.leaseOf(SharedSessionKey, "shared")
	p.clock.Advance(2 * time.Minute)
	testproc.Eventually(t, "both leases terminated", func() bool { return terminated(own) && terminated(sh) })
	if n := count(p.events(), "lease.reaped", nil); n != 2 {
		t.Fatalf("lease.reaped: %d, want 2", n)
	}
}

// ReapIdle(ctx, 0) uses the manager's IdleMax: a lease idle for less is
// kept; one idle for at least IdleMax is reaped.
func TestPolicyReapIdleZeroUsesIdleMax(t *testing.T) {
	p := newPolicyEnv(t, func(o *Options) { o.IdleMax = time.Minute })
	ctx := context.Background()
	s := p.open("s1")
	p.digest(s, "fs", "echo")
	l := p.m.leaseOf("s1", "fs")
	p.clock.Advance(30 * time.Second)
	if n, err := p.m.ReapIdle(ctx, 0); n != 0 || err != nil || terminated(l) {
		t.Fatalf("ReapIdle(0) at half IdleMax: reaped %d (%v)", n, err)
	}
	p.clock.Advance(31 * time.Second)
	if n, err := p.m.ReapIdle(ctx, 0); n != 1 || err != nil || !terminated(l) {
		t.Fatalf("ReapIdle(0) past IdleMax: reaped %d (%v)", n, err)
	}
}

// The stderr ring keeps the last MaxStderrBytes and counts the rest; lines
// reach the log whole, long ones in MaxStderrLineBytes pieces.
func TestStderrRing(t *testing.T) {
	var r stderrRing
	var all bytes.Buffer
	for i := 0; all.Len() < 3*MaxStderrBytes; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%7000)
		all.Write(chunk)
		r.write(chunk)
	}
	got, dropped := r.snapshot()
	want := all.Bytes()[all.Len()-MaxStderrBytes:]
	if !bytes.Equal(got, want) || dropped != int64(all.Len()-MaxStderrBytes) {
		t.Fatalf("kept %d bytes (dropped %d), want the last %d", len(got), dropped, MaxStderrBytes)
	}
	var lines []string
	emit := func(b []byte) { lines = append(lines, string(b)) }
	long := strings.Repeat("x", MaxStderrLineBytes+10)
	r.lines([]byte("one\ntw"), emit)
	r.lines([]byte("o\n"+long+"\nlast"), emit)
	r.flush(emit)
	wantLines := []string{"one", "two", long[:MaxStderrLineBytes], long[MaxStderrLineBytes:], "last"}
	if strings.Join(lines, "|") != strings.Join(wantLines, "|") {
		t.Fatalf("lines %q", lines)
	}
}

// A Deny that runs after an acquisition's first denial check but before
// the acquisition maps its lease is not bypassed: the acquisition checks
// again under the map lock and is refused, and no child starts.
func TestPolicyDenyRacingAcquisition(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s1 := p.open("s1")
	var once sync.Once
	p.m.testHookDenyChecked = func() {
		once.Do(func() {
			if err := p.m.Deny(ctx, "s1", "fs", "host_denied"); err != nil {
				t.Error(err)
			}
		})
	}
	launches := p.w.launches.Load()
	if _, err := s1.Capability().Tools(ctx, "fs"); !errors.Is(err, ErrDenied) {
		t.Fatalf("acquisition racing Deny: %v, want ErrDenied", err)
	}
	if p.w.launches.Load() != launches || p.m.leaseOf("s1", "fs") != nil {
		t.Fatal("a child of a denied key was started or mapped")
	}
}
