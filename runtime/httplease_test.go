//go:build linux

package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// freePort returns a loopback port free when asked.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// everythingAt starts server-everything (streamableHttp) on port, waits
// until it listens and returns its process; the test's cleanup kills and
// reaps it (again: a test may kill it first).
func everythingAt(t testing.TB, port int) *exec.Cmd {
	t.Helper()
	entry := everything(t)
	cmd := exec.Command(entry.Command, entry.Args[0], "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything (streamableHttp) not listening on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// liveBodies counts the activation's unsettled POST and DELETE requests
// whose response body is open — a call's response stream; GET streams
// (the standalone stream, which a lease keeps open all along) aside
// (test-only introspection).
func liveBodies(ev *httpEvidence) int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	n := 0
	for _, r := range ev.live {
		if r.body != nil && r.body.limit > 0 {
			n++
		}
	}
	return n
}

// TestHTTPAbortQueue: an abort takes the requests live when it is queued
// and aborts them one at a time, in registration order (each one's
// barrier awaited before the next is cancelled): a response stream, a
// request still waiting for its response, another stream. From then on
// only a DELETE may start (a POST is refused before it is registered or
// sent), and the DELETE, started after the abort, is not aborted.
func TestHTTPAbortQueue(t *testing.T) {
	quit := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/stall":
			w.WriteHeader(200)
			io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-quit:
			}
		case "/silent":
			select {
			case <-r.Context().Done():
			case <-quit:
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	defer srv.Close()
	defer close(quit)
	requests := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
	b := newHTTPBoundary(httpTimeouts{time.Second, time.Minute, time.Minute})
	defer b.close()
	rec := &recorder{}
	ev := newHTTPEvidence(rec.emit, draftOf)
	u, _ := checkEndpoint(srv.URL + "/")
	client := b.clientFor(newLeaseRoundTripper(b, u, nil, ev))

	errs := make(chan error, 3)
	for i, path := range []string{"/stall", "/silent", "/stall"} {
		got := make(chan struct{})
		go func() {
			resp, err := client.Post(srv.URL+path, "text/plain", strings.NewReader("{}"))
			if err == nil {
				close(got)
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
		if path == "/stall" {
			<-got
		} else {
			testproc.Eventually(t, "the request reaches the server", func() bool { return len(requests()) == i+1 })
		}
	}
	select {
	case <-ev.abort(time.Now().Add(5*time.Second), false):
	case <-time.After(10 * time.Second):
		t.Fatal("abort job not done")
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrHTTPDetached) {
			t.Fatalf("aborted request: %v", err)
		}
	}
	// Draining: a POST is refused before anything is registered or sent.
	if _, err := client.Post(srv.URL+"/after", "text/plain", strings.NewReader("{}")); !errors.Is(err, ErrHTTPDetached) {
		t.Fatalf("POST after the abort: %v", err)
	}
	// The session DELETE still runs, and the abort does not touch it.
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/bye", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, r := range requests() {
		if strings.HasSuffix(r, "/after") {
			t.Fatal("a refused POST reached the server")
		}
	}
	out, detail, rest := ev.finish(time.Now().Add(5 * time.Second))
	if out != events.BarrierOK || len(rest) != 0 {
		t.Fatalf("finish %s %s, %d facts left", out, detail, len(rest))
	}
	completed, _ := checkHTTPEvidence(t, rec.payloads())
	if len(completed) != 4 {
		t.Fatalf("%d requests recorded, want 4 (the refused POST is not registered)", len(completed))
	}
	var order []string
	for _, p := range rec.payloads() {
		if c, ok := p.(*events.HTTPCompleted); ok {
			order = append(order, c.Ref)
		}
	}
	if strings.Join(order, ",") != "h-1,h-2,h-3,h-4" {
		t.Fatalf("completion order %v: not the registration order", order)
	}
	for ref, c := range completed {
		want := events.HTTPAborted
		if ref == "h-4" {
			want = events.HTTPOK
		}
		if c.Outcome != want || (want == events.HTTPAborted && c.Detail != "aborted") {
			t.Fatalf("%s: %+v", ref, c)
		}
	}
}

// TestHTTPOwnerLossAbortsOwnRequests runs server-everything over HTTP with
// long tool calls in flight on several sessions' leases (one manager, one
// HTTP boundary and pool) and ends leases under them:
//
//   - poisoned by another call: its call's response stream is aborted
//     through its cleanup worker within the close budget, recorded aborted
//     with its barrier, the call fails and the close is confirmed; the
//     other session's call, on its own lease, completes untouched;
//   - replaced for a changed config entry (stale_config): the same, and
//     the call that changed it runs on the new lease;
//   - revoked: the call past the gate completes (revocation lets it), the
//     lease ends with it, nothing is aborted;
//   - the other session ends: its idle lease closes confirmed;
//   - TerminateAll: the last call in flight is aborted likewise.
//
// A session cannot end under a call (the call holds its scope), so a
// session's end finds no request of its own in flight. newEnv's audit
// checks every verdict is confirmed and nothing leaked.
func TestHTTPOwnerLossAbortsOwnRequests(t *testing.T) {
	e := newEnv(t, nil)
	endpoint := everythingHTTP(t)
	e.cfg.Set("remote", ServerConfig{URL: endpoint})
	ctx := ctxT(t, 120*time.Second)
	open := func(id string) (*SessionScope, []PinnedTool, *lease) {
		s, err := e.m.OpenSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Release(context.Background()) })
		tools, err := s.Capability().Tools(ctx, "remote")
		if err != nil {
			t.Fatal(err)
		}
		return s, tools, e.m.leaseOf(id, "remote")
	}
	longCall := func(s *SessionScope, tools []PinnedTool, secs int) chan error {
		errc := make(chan error, 1)
		go func() {
			res, err := s.Capability().Call(ctx, CallRequest{Server: "remote", Tool: "trigger-long-running-operation",
				Digest: digestOf(t, tools, "trigger-long-running-operation"), Arguments: map[string]any{"duration": secs, "steps": secs}})
			if err == nil && res.IsError {
				err = errors.New("tool error")
			}
			errc <- err
		}()
		return errc
	}
	// inFlight waits until the lease's call has its response stream open.
	inFlight := func(l *lease) {
		t.Helper()
		ev := l.child.(*httpChild).ev
		testproc.Eventually(t, "a response body open", func() bool { return liveBodies(ev) >= 1 })
	}
	// aborted counts the activation's requests recorded aborted, its
	// standalone GET stream (aborted by every close) aside.
	aborted := func(act string) (n int) {
		streams := map[string]bool{}
		for _, x := range e.events() {
			if p, ok := x.Payload.(*events.HTTPRegistered); ok && x.Activation == act && p.Scope == scopeStream {
				streams[p.Ref] = true
			}
			if p, ok := x.Payload.(*events.HTTPCompleted); ok && x.Activation == act && p.Outcome == events.HTTPAborted && p.Detail == "aborted" && !streams[p.Ref] {
				n++
			}
		}
		return n
	}
	// ended waits for the lease's close and checks it aborted its call:
	// the call fails and its request is recorded aborted, where a call the
	// close left alone would run its tool to the end and succeed.
	ended := func(l *lease, reason string, errc chan error) {
		t.Helper()
		select {
		case err := <-errc:
			if !errors.Is(err, ErrCallFailed) {
				t.Fatalf("%s: call in flight: %v", reason, err)
			}
		case <-time.After(testproc.HangBound):
			t.Fatalf("%s: the call in flight outlived its lease's close", reason)
		}
		testproc.Eventually(t, "the connection closed", func() bool {
			r, ok := e.m.ConnectionStatus(l.activation)
			return ok && r.Phase == ConnectionClosed
		})
		if rep, _ := e.m.ConnectionStatus(l.activation); !rep.Confirmed() || string(rep.Reason) != reason {
			t.Fatalf("%s: close %+v", reason, rep)
		}
		if aborted(l.activation) == 0 {
			t.Fatalf("%s: no request recorded aborted", reason)
		}
		checkHTTPEvidence(t, httpPayloads(e.events(), l.activation))
	}

	s1, tools1, l1 := open("s1")
	s2, tools2, l2 := open("s2")
	errA := longCall(s1, tools1, 30)
	errB := longCall(s2, tools2, 4)
	inFlight(l1)
	inFlight(l2)
	if _, err := s1.Capability().Call(ctx, CallRequest{Server: "remote", Tool: "echo", Digest: strings.Repeat("0", 64)}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("poisoning call: %v", err)
	}
	ended(l1, "poisoned", errA)
	// Only the poisoned lease's requests were aborted.
	if err := <-errB; err != nil {
		t.Fatalf("call on the other lease: %v", err)
	}
	if e.m.leaseOf("s2", "remote") != l2 || aborted(l2.activation) != 0 {
		t.Fatal("the other lease was touched")
	}

	// A changed entry replaces the lease under its call.
	s3, tools3, l3 := open("s3")
	errC := longCall(s3, tools3, 30)
	inFlight(l3)
	e.cfg.Set("remote", ServerConfig{URL: endpoint, Headers: map[string]string{"X-Changed": "1"}})
	if res, err := s3.Capability().Call(ctx, CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools3, "echo"),
		Arguments: map[string]any{"message": "hi"}}); err != nil || res.IsError {
		t.Fatalf("call on the changed entry: %v", err)
	}
	ended(l3, "stale_config", errC)

	// Revocation lets the call past the gate complete.
	s4, tools4, l4 := open("s4")
	errD := longCall(s4, tools4, 2)
	inFlight(l4)
	if err := e.m.Revoke(ctx, "s4", "remote", "test_revoke"); err != nil {
		t.Fatal(err)
	}
	if err := <-errD; err != nil {
		t.Fatalf("call past the gate of a revoked lease: %v", err)
	}
	testproc.Eventually(t, "the connection closed", func() bool {
		r, ok := e.m.ConnectionStatus(l4.activation)
		return ok && r.Phase == ConnectionClosed
	})
	if rep, _ := e.m.ConnectionStatus(l4.activation); !rep.Confirmed() || rep.Reason != "revoked" || aborted(l4.activation) != 0 {
		t.Fatalf("revoked lease's close: %+v", rep)
	}

	// The other session ends: its idle lease closes.
	if err := s2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, ok := e.m.ConnectionStatus(l2.activation); !ok || !rep.Confirmed() || rep.Reason != "session_ended" {
		t.Fatalf("ended session's close: %+v", rep)
	}
	checkHTTPEvidence(t, httpPayloads(e.events(), l2.activation))

	// TerminateAll under a call.
	s5, tools5, l5 := open("s5")
	errE := longCall(s5, tools5, 30)
	inFlight(l5)
	if err := e.m.TerminateAll(ctx); err != nil {
		t.Fatal(err)
	}
	ended(l5, "terminate_all", errE)
}

// TestHTTPRemoteSessionLost: the server drops the lease's session (a go-sdk
// server closes it: later requests for it get 404). The lease is marked
// lost like a stdio child that exited — by the 404 to its next POST or by
// the go-sdk's failed stream, whichever comes first — so it ends
// (child_exited, transport detail remote_lost_<signal>, close confirmed)
// and the next acquisition starts a new session that works.
func TestHTTPRemoteSessionLost(t *testing.T) {
	e := newEnv(t, nil)
	endpoint, _, srv := goSDKHTTPServer(t)
	e.cfg.Set("remote", ServerConfig{URL: endpoint})
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	req := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}
	if _, err := s.Capability().Call(ctx, req); err != nil {
		t.Fatal(err)
	}
	old := e.m.leaseOf("s1", "remote")
	closeServerSessions(srv)
	// The first call may be the one that learns it (its POST gets the
	// 404: it fails, nothing retried), or find the lease already lost.
	var res *mcp.CallToolResult
	for attempt := 0; attempt < 2; attempt++ {
		if res, err = s.Capability().Call(ctx, req); err == nil || !errors.Is(err, ErrCallFailed) {
			break
		}
	}
	if err != nil || res.IsError {
		t.Fatalf("call after the session was dropped: %v", err)
	}
	if cur := e.m.leaseOf("s1", "remote"); cur == nil || cur.activation == old.activation {
		t.Fatal("the lost lease was not replaced")
	}
	rep, ok := e.m.ConnectionStatus(old.activation)
	if !ok || !rep.Confirmed() || rep.Reason != "child_exited" || !strings.HasPrefix(rep.Obligations[0].Detail, "remote_lost_") {
		t.Fatalf("lost lease's close: %+v", rep)
	}
}

// TestHTTPRemoteServerKilledReplaced runs server-everything over HTTP and
// loses its remote session twice, like a stdio child that exits:
//
//   - killed: the next call's POST is refused at the dial, so nothing was
//     sent; the call fails, the lease is marked lost (connection_refused)
//     and the call after the server is back runs on a new lease;
//   - restarted under the lease (same port, its sessions gone): the next
//     call's POST is answered 400 for the unknown session id (what
//     server-everything answers); the lease is marked lost
//     (session_rejected) and the next call runs on a new lease (a call
//     may first fail on the pooled connection the kill broke).
//
// Each lost lease ends child_exited, its close confirmed (newEnv's audit
// checks the verdicts), with transport detail remote_lost_<signal> — or
// listing_failed when the re-list that server-everything's tools/list_changed
// notifications of a new session trigger met the kill first (the loss
// signal is recorded alike).
func TestHTTPRemoteServerKilledReplaced(t *testing.T) {
	e := newEnv(t, nil)
	port := freePort(t)
	cmd := everythingAt(t, port)
	e.cfg.Set("remote", ServerConfig{URL: "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"})
	ctx := ctxT(t, 120*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	req := CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"message": "hi"}}
	if _, err := s.Capability().Call(ctx, req); err != nil {
		t.Fatal(err)
	}
	// why: the reasons the loss may be recorded under — the server's
	// standalone stream breaking at the kill fails the session
	// (session_failed) unless a call's request met the dead or restarted
	// server first.
	checkLost := func(old *lease, why ...string) {
		t.Helper()
		got := old.child.(*httpChild).lost()
		if !slices.Contains(why, got) {
			t.Fatalf("lost as %q, want one of %q", got, why)
		}
		if cur := e.m.leaseOf("s1", "remote"); cur == nil || cur.activation == old.activation {
			t.Fatal("the lost lease was not replaced")
		}
		rep, ok := e.m.ConnectionStatus(old.activation)
		if !ok || !rep.Confirmed() || (rep.Reason != "child_exited" && rep.Reason != events.TerminatedListingFailed) || rep.Obligations[0].Detail != "remote_lost_"+got {
			t.Fatalf("lost lease's close: %+v", rep)
		}
	}

	old := e.m.leaseOf("s1", "remote")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// (A call may first meet a pooled connection the kill broke. One that
	// starts once the loss is marked, by the broken standalone stream,
	// acquires a replacement instead, which the refused dial fails.)
	for attempt := 0; attempt < 3 && !old.childGone(); attempt++ {
		if _, err := s.Capability().Call(ctx, req); err == nil || !errors.Is(err, ErrCallFailed) && !old.childGone() {
			t.Fatalf("call to the killed server: %v", err)
		}
	}
	if !old.childGone() {
		t.Fatal("the refused dial did not mark the lease lost")
	}
	cmd = everythingAt(t, port)
	if res, err := s.Capability().Call(ctx, req); err != nil || res.IsError {
		t.Fatalf("call after the restart: %v", err)
	}
	checkLost(old, lostConnectionRefused, lostSessionFailed)

	old = e.m.leaseOf("s1", "remote")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	everythingAt(t, port)
	// A call may first meet the pooled connection the kill broke (a
	// transport error; nothing proves the session gone), then the 400.
	var res *mcp.CallToolResult
	for attempt := 0; attempt < 3; attempt++ {
		if res, err = s.Capability().Call(ctx, req); err == nil || !(errors.Is(err, ErrRemote) || errors.Is(err, ErrCallFailed)) {
			break
		}
	}
	if err != nil || res.IsError {
		t.Fatalf("call after the session was rejected: %v", err)
	}
	checkLost(old, lostSessionRejected, lostSessionFailed)
}

// TestHTTPCloseExpiredDeadline: an HTTP connection closed with its
// caller's deadline already passed records timeout for every step whose
// report it awaits, http_requests included (observed settled, but past the
// deadline), whichever of a report and the deadline a wait saw first (see
// TestConnCloseExpiredDeadline), and the projector agrees.
func TestHTTPCloseExpiredDeadline(t *testing.T) {
	p := newLossyEnv(t, nil)
	endpoint, _, srv := goSDKHTTPServer(t)
	// With no budget the session DELETE is cut off: the remote sessions
	// stay on the server until ended from its side, so their goroutines
	// exit.
	t.Cleanup(func() {
		closeServerSessions(srv)
	})
	p.cfg.Set("remote", ServerConfig{URL: endpoint})
	// No local process: supervisor is a fact known up front (ok,
	// no_local_process), not a report the close awaits.
	closeExpired(t, p, "remote", 4, events.ObligationSupervisor)
}

// TestHTTPLostAtDeadline: a request whose barrier cannot return before the
// close's deadline (the ledger holds its redirect hop's record, so it is
// stuck between hops) is recorded http.lost{deadline} in the close's own
// append, before connection.closed; the hop, never durably recorded, is
// only counted unsettled. The close is unconfirmed (http_requests timeout
// requests_unsettled) and the projector, replaying the real events,
// agrees: the resource is lost. The late records change nothing.
func TestHTTPLostAtDeadline(t *testing.T) {
	p := newLossyEnv(t, nil)
	endpoint, _ := goSDKHTTP(t)
	h := newHopServer(t, endpoint)
	p.cfg.Set("remote", ServerConfig{URL: h.srv.URL + "/r/1/mcp"})
	s := p.open("s1")
	ctx := ctxT(t, 60*time.Second)
	tools, err := s.Capability().Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	l := p.m.leaseOf("s1", "remote")
	act := l.activation
	var block, held atomic.Bool
	release := make(chan struct{})
	block.Store(true)
	p.l.setBefore(func(ds []events.Draft) {
		for _, d := range ds {
			// Only the first hop recorded after the block (the call's).
			if _, ok := d.Payload.(*events.HTTPRedirect); ok && d.Activation == act && block.Load() && held.CompareAndSwap(false, true) {
				<-release
			}
		}
	})
	errc := make(chan error, 1)
	go func() {
		_, err := s.Capability().Call(ctx, CallRequest{Server: "remote", Tool: "echo", Digest: digestOf(t, tools, "echo")})
		errc <- err
	}()
	testproc.Eventually(t, "the request held", held.Load)
	rep, err := p.m.CloseConnection(ctx, ConnectionRef{Activation: act}, time.Second)
	block.Store(false)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("the call whose request was stuck succeeded")
	}
	// Under load the cleanup worker may itself be inside an append (a
	// settle fact batched before the block) when the deadline passes:
	// then the close says so (cleanup_worker_running); both are the
	// deadline's honest report.
	if d := rep.Obligations[3].Detail; rep.Confirmed() || rep.Obligations[3].Outcome != events.BarrierTimeout || (d != "requests_unsettled" && d != "cleanup_worker_running") {
		t.Fatalf("report %+v", rep)
	}
	envs := p.l.envelopes()
	var lost []*events.HTTPLost
	lostSeq, closedSeq := uint64(0), uint64(0)
	for _, x := range envs {
		if x.Activation != act {
			continue
		}
		switch x.Kind {
		case "http.lost":
			pl, err := events.DecodePayload(x.Kind, x.Data)
			if err != nil {
				t.Fatal(err)
			}
			lost = append(lost, pl.(*events.HTTPLost))
			lostSeq = uint64(x.Seq)
		case "connection.closed":
			if closedSeq == 0 {
				closedSeq = uint64(x.Seq)
			}
		}
	}
	if len(lost) != 1 || lost[0].Reason != lostDeadline || lostSeq == 0 || lostSeq > closedSeq {
		t.Fatalf("http.lost %v (seq %d, closed at %d)", lost, lostSeq, closedSeq)
	}
	agree(t, envs, rep)
	st := projector.New()
	for i := range envs {
		if err := st.Apply(&envs[i]); err != nil {
			t.Fatal(err)
		}
	}
	pr, _ := st.Report(act)
	found := false
	for _, r := range pr.Resources {
		if r.ID.Reference == lost[0].Ref {
			found = r.Status == projector.StatusLost && r.Reason == lostDeadline
		}
	}
	if pr.Verdict != projector.ResultUnconfirmed || !found {
		t.Fatalf("projector: %s %v", pr.Verdict, pr.Reasons)
	}
}
