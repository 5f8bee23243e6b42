//go:build linux

package runtime

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// acquireFailedOf returns the activation's lease.acquire_failed.
func (e *env) acquireFailedOf(act string) *events.LeaseAcquireFailed {
	e.t.Helper()
	for _, x := range e.events() {
		if p, ok := x.Payload.(*events.LeaseAcquireFailed); ok && x.Activation == act {
			return p
		}
	}
	e.t.Fatalf("no lease.acquire_failed for %s", act)
	return nil
}

// acquireErr lists server's tools in a fresh session and returns the
// acquisition's error.
func (e *env) acquireErr(server string, within time.Duration) *LeaseError {
	e.t.Helper()
	ctx := ctxT(e.t, within)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Release(ctx)
	_, err = s.Capability().Tools(ctx, server)
	var le *LeaseError
	if !errors.As(err, &le) {
		e.t.Fatalf("listing %s: %v, want a *LeaseError", server, err)
	}
	return le
}

// TestAcquireFailCauseRefused: an HTTP endpoint nothing listens on fails
// the acquisition as ErrInitialize whose cause is connection_refused with
// the endpoint's host:port (not its path or query), in the error, its text
// (what serve logs) and lease.acquire_failed.
func TestAcquireFailCauseRefused(t *testing.T) {
	e := newEnv(t, nil)
	port := freePort(t) // closed again: nothing listens there
	target := "127.0.0.1:" + strconv.Itoa(port)
	e.cfg.Set("remote", ServerConfig{URL: "http://" + target + "/mcp/secret-path?token=x"})
	le := e.acquireErr("remote", 30*time.Second)
	if !errors.Is(le, ErrInitialize) || le.Cause != events.CauseConnectionRefused || le.Target != target {
		t.Fatalf("acquisition: %v (cause %q target %q), want ErrInitialize, connection_refused, %s", le, le.Cause, le.Target, target)
	}
	if msg := le.Error(); !strings.Contains(msg, "cause=connection_refused target="+target) || strings.Contains(msg, "secret") || strings.Contains(msg, "token") {
		t.Fatalf("error text: %q", msg)
	}
	p := e.acquireFailedOf(le.Activation)
	if p.Reason != "initialize_failed" || p.Cause != events.CauseConnectionRefused || p.Target != target || p.HTTPStatus != 0 {
		t.Fatalf("lease.acquire_failed: %+v", p)
	}
	// The activation's audit (what `leaseledger audit <activation>` prints)
	// says so too.
	f := audit.NewFold(le.Activation, audit.Options{})
	for _, env := range e.envelopes() {
		if env.Activation == le.Activation {
			if err := f.Add(&env); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	if a := out.AcquireFailed; a == nil || a.Reason != "initialize_failed" || a.Cause != events.CauseConnectionRefused || a.Target != target {
		t.Fatalf("audit of %s: acquire_failed %+v", le.Activation, a)
	}
}

// TestAcquireFailCauseHTTPStatus: an endpoint answering 503 fails the
// acquisition with cause http_status and the status.
func TestAcquireFailCauseHTTPStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	e := newEnv(t, nil)
	e.cfg.Set("remote", ServerConfig{URL: srv.URL + "/mcp"})
	le := e.acquireErr("remote", 30*time.Second)
	u, _ := url.Parse(srv.URL)
	if !errors.Is(le, ErrInitialize) || le.Cause != events.CauseHTTPStatus || le.HTTPStatus != 503 || le.Target != u.Host {
		t.Fatalf("acquisition: %v (cause %q status %d target %q)", le, le.Cause, le.HTTPStatus, le.Target)
	}
	if strings.Contains(le.Error(), "maintenance") {
		t.Fatalf("the server's text in the error: %q", le.Error())
	}
	if p := e.acquireFailedOf(le.Activation); p.Cause != events.CauseHTTPStatus || p.HTTPStatus != 503 || p.Target != u.Host {
		t.Fatalf("lease.acquire_failed: %+v", p)
	}
}

// TestAcquireFailCauseTLS: an endpoint whose certificate no trusted
// authority signed fails the acquisition with cause tls.
func TestAcquireFailCauseTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake error it would print
	defer srv.Close()
	e := newEnv(t, nil)
	e.cfg.Set("remote", ServerConfig{URL: srv.URL + "/mcp"})
	le := e.acquireErr("remote", 30*time.Second)
	u, _ := url.Parse(srv.URL)
	if !errors.Is(le, ErrInitialize) || le.Cause != events.CauseTLS || le.Target != u.Host {
		t.Fatalf("acquisition: %v (cause %q target %q)", le, le.Cause, le.Target)
	}
	if p := e.acquireFailedOf(le.Activation); p.Cause != events.CauseTLS {
		t.Fatalf("lease.acquire_failed: %+v", p)
	}
}

// TestAcquireFailCauseDNS: a host under .invalid (RFC 6761: never
// resolves) fails the acquisition with cause dns. Skipped when this
// machine's resolver cannot answer quickly (no network).
func TestAcquireFailCauseDNS(t *testing.T) {
	const host = "leaseledger-test.nonexistent.invalid"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := net.DefaultResolver.LookupHost(ctx, host)
	cancel()
	var de *net.DNSError
	if !errors.As(err, &de) || de.IsTimeout || errors.Is(err, context.DeadlineExceeded) {
		t.Skipf("the resolver does not answer for %s quickly here (%v): no DNS case", host, err)
	}
	e := newEnv(t, nil)
	e.cfg.Set("remote", ServerConfig{URL: "https://" + host + "/mcp"})
	le := e.acquireErr("remote", 30*time.Second)
	if !errors.Is(le, ErrInitialize) || le.Cause != events.CauseDNS || le.Target != host+":443" {
		t.Fatalf("acquisition: %v (cause %q target %q)", le, le.Cause, le.Target)
	}
	if p := e.acquireFailedOf(le.Activation); p.Cause != events.CauseDNS || p.Target != host+":443" {
		t.Fatalf("lease.acquire_failed: %+v", p)
	}
}

// TestAcquireFailCauseProcessExited: a stdio server that exits at start
// fails the acquisition with cause process_exited; the error carries its
// exit status from the guardian's receipt, and lease.acquire_failed the
// cause (the status is the activation's guardian facts).
func TestAcquireFailCauseProcessExited(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("gone", ServerConfig{Command: "/bin/sh", Args: []string{"-c", "exit 3"}})
	le := e.acquireErr("gone", 30*time.Second)
	if !errors.Is(le, ErrInitialize) || le.Cause != events.CauseProcessExited || le.Target != "" {
		t.Fatalf("acquisition: %v (cause %q target %q)", le, le.Cause, le.Target)
	}
	if le.Exit == nil || le.Exit.Code != 3 || le.Exit.Signal != "" || !strings.Contains(le.Error(), "exit_code=3") {
		t.Fatalf("exit status: %+v in %q", le.Exit, le.Error())
	}
	if p := e.acquireFailedOf(le.Activation); p.Cause != events.CauseProcessExited || p.Target != "" {
		t.Fatalf("lease.acquire_failed: %+v", p)
	}
}

// TestAcquireFailCauseSpawn: a command that does not exist is
// spawn_failed underneath ErrSpawn.
func TestAcquireFailCauseSpawn(t *testing.T) {
	e := newEnv(t, nil)
	e.cfg.Set("missing", ServerConfig{Command: "/nonexistent/leaseledger-no-such-server"})
	le := e.acquireErr("missing", 30*time.Second)
	if !errors.Is(le, ErrSpawn) || le.Cause != events.CauseSpawnFailed {
		t.Fatalf("acquisition: %v (cause %q)", le, le.Cause)
	}
	if p := e.acquireFailedOf(le.Activation); p.Reason != "spawn_failed" || p.Cause != events.CauseSpawnFailed {
		t.Fatalf("lease.acquire_failed: %+v", p)
	}
}

// TestClassifyCause holds classifyErr's table for errors the tests above
// cannot provoke cheaply.
func TestClassifyCause(t *testing.T) {
	op := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, c := range []struct {
		err  error
		want events.FailureCause
	}{
		{ErrHTTPConnectTimeout, events.CauseConnectTimeout},
		{ErrHTTPReceiveTimeout, events.CauseReceiveTimeout},
		{ErrHTTPRequestTimeout, events.CauseRequestTimeout},
		{ErrHTTPCrossOrigin, events.CauseRedirectRefused},
		{ErrHTTPResponseTooLarge, events.CauseResponseTooLarge},
		{&net.DNSError{Err: "no such host", Name: "h", IsNotFound: true}, events.CauseDNS},
		{op(errors.New("x509: certificate signed by unknown authority")), ""}, // text is never read
		{context.Canceled, ""},
		{op(context.DeadlineExceeded), ""},
		{errors.New("opaque"), ""},
	} {
		if got := classifyErr(c.err); got != c.want {
			t.Errorf("classifyErr(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
