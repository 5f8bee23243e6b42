//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestFingerprintCanonical(t *testing.T) {
	a := ServerConfig{Command: "node", Args: []string{"x", "stdio"}, Env: map[string]string{"A": "1", "B": "2"}}
	b := ServerConfig{Command: "node", Args: []string{"x", "stdio"}, Env: map[string]string{"B": "2", "A": "1"}}
	if a.Fingerprint(testFPKey) != b.Fingerprint(testFPKey) {
		t.Fatal("env order changed the fingerprint")
	}
	for _, c := range []ServerConfig{
		{Command: "node", Args: []string{"x", "stdio"}, Env: map[string]string{"A": "1", "B": "3"}},
		{Command: "node", Args: []string{"x"}, Env: a.Env},
		{Command: "node", Args: a.Args, Env: a.Env, Cwd: "/tmp"},
		{Command: "node", Args: a.Args, Env: a.Env, Shared: true},
	} {
		if c.Fingerprint(testFPKey) == a.Fingerprint(testFPKey) {
			t.Errorf("%+v: same fingerprint as %+v", c, a)
		}
	}
	if len(a.Fingerprint(testFPKey)) != 64 {
		t.Fatal("fingerprint is not hex SHA-256")
	}
}

func TestFileConfigSource(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mcp.json")
	doc := `{"mcpServers":{"everything":{"command":"node","args":["index.js","stdio"],"env":{"K":"V"},"cwd":"/tmp","shared":true}},"other":1}`
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	src := FileConfigSource{Path: p}
	c, err := src.Lookup(context.Background(), "everything")
	if err != nil {
		t.Fatal(err)
	}
	if c.Command != "node" || len(c.Args) != 2 || c.Env["K"] != "V" || c.Cwd != "/tmp" || !c.Shared {
		t.Fatalf("parsed %+v", c)
	}
	if _, err := src.Lookup(context.Background(), "nope"); !errors.Is(err, ErrConfigMissing) {
		t.Fatalf("missing server: %v", err)
	}
	big := make([]byte, MaxConfigBytes+10)
	for i := range big {
		big[i] = ' '
	}
	if err := os.WriteFile(p, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Lookup(context.Background(), "everything"); !errors.Is(err, ErrConfigInvalid) {
		t.Fatalf("oversized file: %v", err)
	}
	if _, err := (FileConfigSource{Path: filepath.Join(dir, "absent")}).Lookup(context.Background(), "x"); !errors.Is(err, ErrConfigMissing) {
		t.Fatalf("absent file: %v", err)
	}
}

func TestToolDigestCanonical(t *testing.T) {
	a := &mcp.Tool{Name: "t", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"b": 1, "a": 2.5}}}
	b := &mcp.Tool{Name: "t", InputSchema: json.RawMessage(`{ "properties": {"a":2.5, "b":1}, "type":"object"}`)}
	da, _ := ToolDigest(a)
	db, _ := ToolDigest(b)
	if da != db {
		t.Fatalf("key order changed the digest: %s vs %s", da, db)
	}
	c := &mcp.Tool{Name: "u", InputSchema: a.InputSchema}
	if dc, _ := ToolDigest(c); dc == da {
		t.Fatal("name is not part of the digest")
	}
}

// 200 concurrent first calls for one (session, server) start exactly one
// child: counted from the ledger (guardian.started, lease.child_started)
// and from the process table while the lease is live.
func TestSingleFlightConcurrentFirstCalls(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("everything", everything(t))
	ctx := ctxT(t, 60*time.Second)

	// The host's authorization (outside this package) knows the digest; a
	// probe session stands in for it and ends before the real calls.
	probe, err := e.m.OpenSession(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := probe.Capability().Tools(ctx, "everything")
	if err != nil {
		t.Fatal(err)
	}
	digest := digestOf(t, tools, "echo")
	probe.Release(ctx)
	if kids := childrenOf(os.Getpid()); len(kids) != 0 {
		t.Fatalf("probe children remain: %v", kids)
	}

	scope, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer scope.Release(ctx)
	capa := scope.Capability()
	const n = 200
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := capa.Call(ctx, CallRequest{Server: "everything", Tool: "echo", Digest: digest, Arguments: map[string]any{"message": "hi"}})
			if err == nil && res.IsError {
				err = errors.New("tool error")
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if kids := childrenOf(os.Getpid()); len(kids) != 1 {
		t.Fatalf("want exactly one guardian child while the lease lives, have %v", kids)
	}
	evs := e.events()
	s1 := func(x ev) bool { return x.Session == "s1" }
	if got := count(evs, "guardian.started", s1); got != 1 {
		t.Fatalf("guardian.started for s1: %d, want 1", got)
	}
	if got := count(evs, "lease.child_started", s1); got != 1 {
		t.Fatalf("lease.child_started for s1: %d, want 1", got)
	}
	if got := count(evs, "call.admitted", s1); got != n {
		t.Fatalf("call.admitted: %d, want %d", got, n)
	}
	if got := count(evs, "call.finished", func(x ev) bool { return s1(x) && x.Payload.(*events.CallFinished).Outcome == "ok" }); got != n {
		t.Fatalf("call.finished ok: %d, want %d", got, n)
	}
	l := e.m.leaseOf("s1", "everything")
	if l == nil {
		t.Fatal("no lease")
	}
	// Once at acquisition, and once more per re-list after the server
	// notified a tool list change (server-everything may, after
	// initialize): each listing is pinned and recorded.
	testproc.Eventually(t, "every tools/list pinned once", func() bool {
		pinned := count(e.events(), "lease.listing_pinned", func(x ev) bool { return x.Activation == l.activation })
		return l.wire.toolsLists.Load() == int64(pinned) && pinned >= 1
	})
}

// A name or digest mismatch poisons the lease: it is terminated, and the
// server never received tools/call (its own counter file stays absent).
func TestMismatchPoisonsWithoutCalling(t *testing.T) {
	for _, tc := range []struct {
		name, tool string
		badDigest  bool
		want       error
		reason     string
	}{
		{"digest", "echo", true, ErrDigestMismatch, "digest_mismatch"},
		{"name", "no-such-tool", false, ErrNameMismatch, "name_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			calls := filepath.Join(t.TempDir(), "calls")
			e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CALLS": calls}))
			ctx := ctxT(t, 30*time.Second)
			scope, err := e.m.OpenSession(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			defer scope.Release(ctx)
			capa := scope.Capability()
			tools, err := capa.Tools(ctx, "ts")
			if err != nil {
				t.Fatal(err)
			}
			digest := digestOf(t, tools, "echo")
			if tc.badDigest {
				digest = strings.Repeat("0", 64)
			}
			l := e.m.leaseOf("s1", "ts")
			_, err = capa.Call(ctx, CallRequest{Server: "ts", Tool: tc.tool, Digest: digest, Arguments: map[string]any{"text": "x"}})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if _, statErr := os.Stat(calls); !os.IsNotExist(statErr) {
				b, _ := os.ReadFile(calls)
				t.Fatalf("server saw tools/call: %q", b)
			}
			if l.wire.toolsCalls.Load() != 0 {
				t.Fatal("client sent tools/call")
			}
			if e.m.leaseOf("s1", "ts") != nil {
				t.Fatal("poisoned lease still mapped")
			}
			if got := l.cleanup; !got.Confirmed {
				t.Fatalf("poisoned child cleanup not confirmed: %+v", got)
			}
			kinds := strings.Join(e.kinds(l.activation), ",")
			if !strings.Contains(kinds, "call.refused,lease.poisoned,lease.terminated,") || strings.Contains(kinds, "call.admitted") {
				t.Fatalf("events: %s", kinds)
			}
			for _, x := range e.events() {
				if p, ok := x.Payload.(*events.LeasePoisoned); ok && string(p.Reason) != tc.reason {
					t.Fatalf("poison reason %q", p.Reason)
				}
			}
			// A correct call afterwards runs on a fresh child and reaches the server.
			res, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}})
			if err != nil || res.IsError {
				t.Fatalf("call after poison: %v", err)
			}
			if b, _ := os.ReadFile(calls); string(b) != "echo\n" {
				t.Fatalf("server calls = %q", b)
			}
		})
	}
}

// Revoke during a long-running server-everything call: the call past the
// gate completes, Revoke returns before it, no later call passes that
// lease's gate, the completing call kills the child, and the ledger holds
// admitted < revoked < finished(killed_on_cancel) < terminated < receipt.
func TestRevokeDuringLongCall(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("everything", everything(t))
	ctx := ctxT(t, 60*time.Second)
	scope, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer scope.Release(ctx)
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "everything")
	if err != nil {
		t.Fatal(err)
	}
	long := digestOf(t, tools, "trigger-long-running-operation")
	echo := digestOf(t, tools, "echo")
	l := e.m.leaseOf("s1", "everything")

	type out struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := capa.Call(ctx, CallRequest{Server: "everything", Tool: "trigger-long-running-operation", Digest: long,
			Arguments: map[string]any{"duration": 2, "steps": 2}})
		done <- out{res, err}
	}()
	testproc.Eventually(t, "the call in flight", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.inflight == 1 && l.wire.toolsCalls.Load() == 1 })
	if err := e.m.Revoke(ctx, "s1", "everything", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("Revoke waited for the in-flight call")
	default:
	}
	// No call passes the revoked lease's gate.
	if _, _, err := l.call(ctx, l.key.session, CallRequest{Server: "everything", Tool: "echo", Digest: echo}, []byte(`{"message":"x"}`)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("call after revoke: %v", err)
	}
	o := <-done
	if o.err != nil || o.res.IsError {
		t.Fatalf("in-flight call: %v", o.err)
	}
	if !l.cleanup.Confirmed {
		t.Fatalf("cleanup not confirmed: %+v", l.cleanup)
	}
	// server-everything notifies a tool list change once initialized (it
	// registers its conditional tools then): the lease lists again off the
	// receive loop, and that re-list's lease.listing_pinned lands wherever
	// it lands. The order checked is the call's, the revocation's and the
	// close's.
	var seq []string
	for _, k := range e.kinds(l.activation) {
		if k != string(events.KindLeaseListChanged) && k != "lease.listing_pinned" {
			seq = append(seq, k)
		}
	}
	kinds := strings.Join(seq, ",")
	want := "call.admitted,lease.revoked,call.refused,call.finished,lease.terminated,"
	if !strings.Contains(kinds, want) {
		t.Fatalf("order: %s\nwant substring %s", kinds, want)
	}
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.CallFinished); ok && x.Activation == l.activation && !p.KilledOnCancel {
			t.Fatal("finishing call did not record killed_on_cancel")
		}
	}
	if !strings.HasSuffix(kinds, "lease.terminated,connection.phase,guardian.reaped,guardian.receipt,connection.barrier,connection.barrier,connection.barrier,connection.closed") {
		t.Fatalf("termination evidence: %s", kinds)
	}
	// A new call acquires a fresh lease (new activation).
	if _, err := capa.Call(ctx, CallRequest{Server: "everything", Tool: "echo", Digest: echo, Arguments: map[string]any{"message": "x"}}); err != nil {
		t.Fatal(err)
	}
	if nl := e.m.leaseOf("s1", "everything"); nl == nil || nl.activation == l.activation {
		t.Fatal("no fresh lease after revoke")
	}
}

// Many concurrent calls racing a revocation (run under -race, -count N):
// every call.admitted of the lease precedes lease.revoked, every admitted
// call finishes, everything else is refused.
func TestRevokeRace(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 30*time.Second)
	scope, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer scope.Release(ctx)
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	slow := digestOf(t, tools, "slow")
	l := e.m.leaseOf("s1", "ts")
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := l.call(ctx, l.key.session, CallRequest{Server: "ts", Tool: "slow", Digest: slow}, []byte(`{"ms":20}`))
			if err != nil && !errors.Is(err, ErrRevoked) {
				t.Errorf("call: %v", err)
			}
		}()
	}
	// Revoke once some call is past the gate, so both sides of it are seen.
	testproc.Eventually(t, "a call in flight", func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.inflight > 0 })
	if err := e.m.Revoke(ctx, "s1", "ts", "host_revoked"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	l.terminate(ctx, "test") // waits for the killer's termination
	var revokedSeq uint64
	admitted, finished, refused := 0, 0, 0
	for _, x := range e.events() {
		if x.Activation != l.activation {
			continue
		}
		switch x.Kind {
		case "lease.revoked":
			revokedSeq = uint64(x.Seq)
		case "call.admitted":
			admitted++
			if revokedSeq != 0 {
				t.Fatalf("call.admitted at %d after lease.revoked at %d", x.Seq, revokedSeq)
			}
		case "call.finished":
			finished++
			if revokedSeq == 0 && x.Payload.(*events.CallFinished).KilledOnCancel {
				t.Fatal("killed_on_cancel before revocation")
			}
		case "call.refused":
			refused++
		}
	}
	if revokedSeq == 0 || admitted != finished || admitted+refused != 32 {
		t.Fatalf("revoked=%d admitted=%d finished=%d refused=%d", revokedSeq, admitted, finished, refused)
	}
	if !l.cleanup.Confirmed {
		t.Fatalf("cleanup not confirmed: %+v", l.cleanup)
	}
}

// A config change between calls: the next call runs on a new child, and
// the old one is terminated (stale_config) with a confirmed receipt. A
// schema change behind the same authorization poisons the new lease.
func TestConfigChangeReplacesLease(t *testing.T) {
	e := newEnv(t, nil)
	calls := filepath.Join(t.TempDir(), "calls")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CALLS": calls}))
	ctx := ctxT(t, 30*time.Second)
	scope, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer scope.Release(ctx)
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		t.Fatal(err)
	}
	echo := digestOf(t, tools, "echo")
	call := func() error {
		_, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: echo, Arguments: map[string]any{"text": "x"}})
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	old := e.m.leaseOf("s1", "ts")
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CALLS": calls, "UNRELATED": "1"}))
	if err := call(); err != nil {
		t.Fatal(err)
	}
	nl := e.m.leaseOf("s1", "ts")
	if nl == nil || nl == old || nl.fingerprint == old.fingerprint {
		t.Fatal("call after config change did not get a new lease")
	}
	if !old.cleanup.Confirmed {
		t.Fatalf("old child cleanup: %+v", old.cleanup)
	}
	kinds := strings.Join(e.kinds(old.activation), ",")
	if !strings.Contains(kinds, "lease.stale_replaced,lease.terminated,") || !strings.HasSuffix(kinds, "guardian.receipt,connection.barrier,connection.barrier,connection.barrier,connection.closed") {
		t.Fatalf("old lease events: %s", kinds)
	}
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.LeaseTerminated); ok && x.Activation == old.activation && p.Reason != "stale_config" {
			t.Fatalf("terminated reason %q", p.Reason)
		}
	}

	// The schema changes with the config: the old authorization no longer
	// matches, so the new lease is poisoned and the server sees no call.
	e.cfg.Set("ts", testServer(map[string]string{"TESTSERVER_CALLS": calls, "TESTSERVER_VARIANT": "v2"}))
	if err := call(); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("call after schema change: %v", err)
	}
	if b, _ := os.ReadFile(calls); string(b) != "echo\necho\n" {
		t.Fatalf("server calls = %q", b)
	}
}

// Idle reaping: the cap is full of idle leases; a new acquisition reaps
// all of them in one pass (the scan covers the whole capped map). With
// every lease busy, the cap is a typed error.
func TestIdleReapAndCap(t *testing.T) {
	const capN = 4
	e := newEnv(t, func(o *Options) { o.MaxLiveLeases = capN; o.IdleMax = time.Minute })
	e.cfg.Set("ts", testServer(nil))
	ctx := ctxT(t, 60*time.Second)
	var scopes []*SessionScope
	for i := 0; i < capN; i++ {
		s, err := e.m.OpenSession(ctx, "s"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx)
		scopes = append(scopes, s)
		if _, err := s.Capability().Tools(ctx, "ts"); err != nil {
			t.Fatal(err)
		}
	}
	extra, err := e.m.OpenSession(ctx, "sx")
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Release(ctx)
	// Not idle yet: the cap holds.
	if _, err = extra.Capability().Tools(ctx, "ts"); !errors.Is(err, ErrTooManyLeases) {
		t.Fatalf("over cap: %v", err)
	}
	var le *LeaseError
	if !errors.As(err, &le) || le.Count != capN {
		t.Fatalf("typed cap error: %#v", err)
	}
	e.clock.Advance(2 * time.Minute)
	if _, err := extra.Capability().Tools(ctx, "ts"); err != nil {
		t.Fatalf("after idle: %v", err)
	}
	evs := e.events()
	if got := count(evs, "lease.reaped", nil); got != capN {
		t.Fatalf("reaped %d, want %d", got, capN)
	}
	if got := e.m.mapped(); got != 1 {
		t.Fatalf("live leases %d, want 1", got)
	}
	if got := count(evs, "lease.acquire_failed", func(x ev) bool { return x.Payload.(*events.LeaseAcquireFailed).Reason == "too_many_leases" }); got != 1 {
		t.Fatalf("too_many_leases events: %d", got)
	}
	// Opportunistic reaping on a call: advance again, call from one
	// session; the other idle lease is reaped in the background and the
	// manager's Close waits for it.
	e.clock.Advance(2 * time.Minute)
	if _, err := scopes[0].Capability().Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "every idle lease reaped", func() bool { return count(e.events(), "lease.reaped", nil) == capN+1 })
}

// Session end by the last owner: clones keep the session alive; the last
// release terminates the session's leases and spares the shared lease,
// which keeps serving other sessions until TerminateAll.
func TestSessionEndLastOwnerSparesShared(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("own", testServer(nil))
	shared := testServer(nil)
	shared.Shared = true
	e.cfg.Set("shared", shared)
	ctx := ctxT(t, 60*time.Second)
	a, err := e.m.OpenSession(ctx, "sa")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.OpenSession(ctx, "sa"); !errors.Is(err, ErrSessionOpen) {
		t.Fatalf("second open: %v", err)
	}
	clone, err := a.Clone()
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []string{"own", "shared"} {
		if _, err := a.Capability().Tools(ctx, srv); err != nil {
			t.Fatal(err)
		}
	}
	sharedLease := e.m.leaseOf(SharedSessionKey, "shared")
	own := e.m.leaseOf("sa", "own")
	if sharedLease == nil || own == nil {
		t.Fatal("leases missing")
	}
	a.Release(ctx)
	a.Release(ctx) // idempotent per owner
	if e.m.leaseOf("sa", "own") == nil {
		t.Fatal("session ended while a clone still owns it")
	}
	clone.Release(ctx)
	if e.m.leaseOf("sa", "own") != nil || !own.cleanup.Confirmed {
		t.Fatal("session lease not terminated with confirmed cleanup at last release")
	}
	if e.m.leaseOf(SharedSessionKey, "shared") != sharedLease {
		t.Fatal("shared lease did not survive session end")
	}
	if _, err := a.Capability().Tools(ctx, "own"); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("capability after session end: %v", err)
	}
	evs := e.events()
	if count(evs, "session.ended", func(x ev) bool {
		p := x.Payload.(*events.SessionEnded)
		return x.Session == "sa" && p.LeasesTerminated == 1 && p.SharedSpared == 1
	}) != 1 {
		t.Fatal("session.ended not recorded as expected")
	}
	// Another session uses the same shared child, still validating digests.
	b, err := e.m.OpenSession(ctx, "sb")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	tools, err := b.Capability().Tools(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if e.m.leaseOf(SharedSessionKey, "shared") != sharedLease {
		t.Fatal("shared lease not reused")
	}
	if _, err := b.Capability().Call(ctx, CallRequest{Server: "shared", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Capability().Call(ctx, CallRequest{Server: "shared", Tool: "echo", Digest: strings.Repeat("a", 64)}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("shared lease skipped digest validation: %v", err)
	}
	if _, err := b.Capability().Tools(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.TerminateAll(ctx); err != nil {
		t.Fatal(err)
	}
	if e.m.mapped() != 0 || len(childrenOf(os.Getpid())) != 0 {
		t.Fatal("TerminateAll left leases or children")
	}
	if count(e.events(), "lease.terminated", func(x ev) bool { return x.Payload.(*events.LeaseTerminated).Reason == "terminate_all" }) != 1 {
		t.Fatal("terminate_all not recorded")
	}
}

// ReapIdle reaps shared leases too.
func TestReapIdleIncludesShared(t *testing.T) {
	e := newEnv(t, nil)
	shared := testServer(nil)
	shared.Shared = true
	e.cfg.Set("shared", shared)
	ctx := ctxT(t, 30*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	if _, err := s.Capability().Tools(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.m.ReapIdle(ctx, time.Nanosecond); n != 1 || err != nil {
		t.Fatalf("ReapIdle reaped %d: %v", n, err)
	}
	if e.m.leaseOf(SharedSessionKey, "shared") != nil {
		t.Fatal("shared lease survived ReapIdle")
	}
}

// A crashing child ends its lease (transport_error) and the next call gets
// a fresh one; a TERM- and EOF-ignoring child is KILLed by the guardian
// with a confirmed receipt; tool errors carry no server text into errors.
func TestFaults(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("ts", testServer(nil))
	e.cfg.Set("stubborn", testServer(map[string]string{"TESTSERVER_IGNORE_TERM": "1", "TESTSERVER_IGNORE_EOF": "1"}))
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
	res, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "fail", Digest: digestOf(t, tools, "fail")})
	if err != nil || !res.IsError {
		t.Fatalf("tool error: %v %+v", err, res)
	}
	first := e.m.leaseOf("s1", "ts")
	_, err = capa.Call(ctx, CallRequest{Server: "ts", Tool: "crash", Digest: digestOf(t, tools, "crash")})
	if !errors.Is(err, ErrCallFailed) {
		t.Fatalf("crash: %v", err)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Fatal("server text in error")
	}
	if _, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	if nl := e.m.leaseOf("s1", "ts"); nl == nil || nl == first {
		t.Fatal("no fresh lease after crash")
	}
	if _, err := capa.Tools(ctx, "stubborn"); err != nil {
		t.Fatal(err)
	}
	st := e.m.leaseOf("s1", "stubborn")
	e.m.TerminateAll(ctx)
	if !st.cleanup.Confirmed || st.cleanup.Receipt == nil || st.cleanup.Receipt.Signal != "KILL" {
		t.Fatalf("stubborn cleanup: %+v", st.cleanup)
	}
	if count(e.events(), "guardian.signal", func(x ev) bool { return x.Activation == st.activation }) != 2 {
		t.Fatal("want TERM and KILL signal events")
	}
	if _, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: "bad name!", Digest: strings.Repeat("a", 64)}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("invalid tool name: %v", err)
	}
	if _, err := capa.Call(ctx, CallRequest{Server: "nope", Tool: "echo", Digest: strings.Repeat("a", 64)}); !errors.Is(err, ErrConfigMissing) {
		t.Fatalf("unconfigured server: %v", err)
	}
}
