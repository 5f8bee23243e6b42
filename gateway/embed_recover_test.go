//go:build linux

package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

// The re-executed test binary runs embedChild when embedDirEnv is set;
// init runs it before TestMain, so the child builds nothing.
const (
	embedDirEnv    = "LEASELEDGER_EMBED_DIR"
	embedHelperEnv = "LEASELEDGER_EMBED_HELPER"
	embedServerEnv = "LEASELEDGER_EMBED_SERVER"
)

// embedBound bounds every wait of TestEmbeddedHostKilled: a child that
// never says where it listens, a process that never ends. It bounds a
// hang; it times nothing.
const embedBound = 2 * time.Minute

func init() {
	if dir := os.Getenv(embedDirEnv); dir != "" {
		os.Exit(embedChild(dir))
	}
}

// embeddedHost is a Go host that embeds leaseledger the way serve does:
// a ledger with its live projection, crash recovery at start, a runtime
// manager over the projection's ledger and the gateway on an HTTP server.
// Its servers are "ts" (one per session) and "shared" (one for every
// session), both the go-sdk test server.
type embeddedHost struct {
	proj     *live.Projection
	mgr      *runtime.Manager
	gw       *Gateway
	srv      *httptest.Server
	recovery live.RecoveryReport
}

// startEmbeddedHost opens the host's ledger in dir, records what a
// previous run left (live.Recover with a gateway host's ownership) before
// the runtime starts, and starts the gateway.
func startEmbeddedHost(ctx context.Context, dir, helper, server string) (*embeddedHost, error) {
	proj, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: dir}})
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	h := &embeddedHost{proj: proj}
	if h.recovery, err = live.Recover(ctx, proj, live.GatewayOwnership()); err != nil {
		proj.Close()
		return nil, fmt.Errorf("recover: %w", err)
	}
	cfg := &runtime.MapConfigSource{}
	for name, shared := range map[string]bool{"ts": false, "shared": true} {
		if err := cfg.Set(name, runtime.ServerConfig{Command: server, Shared: shared}); err != nil {
			proj.Close()
			return nil, err
		}
	}
	h.mgr, err = runtime.NewManager(runtime.Options{Config: cfg, Ledger: proj.Ledger(), HelperPath: helper,
		EOFGrace: time.Second, TermGrace: 500 * time.Millisecond, KillGrace: time.Second, PipeGrace: 200 * time.Millisecond})
	if err != nil {
		proj.Close()
		return nil, fmt.Errorf("manager: %w", err)
	}
	if h.gw, err = New(Options{Manager: h.mgr, Servers: []string{"shared", "ts"}}); err != nil {
		_ = h.mgr.Close(ctx)
		proj.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	h.srv = httptest.NewServer(h.gw.Handler())
	return h, nil
}

// close shuts the host down in order: the gateway (its sessions end), the
// HTTP server, the manager (every lease ends), the projection.
func (h *embeddedHost) close(ctx context.Context) error {
	errs := []error{h.gw.Close(ctx)}
	h.srv.Close()
	errs = append(errs, h.mgr.Close(ctx), h.proj.Close())
	return errors.Join(errs...)
}

// embedChild is the embedding host the parent kills: it starts, prints
// "url <endpoint>" and serves until it is killed (or, should the parent
// die first, until its stdin ends).
func embedChild(dir string) int {
	h, err := startEmbeddedHost(context.Background(), dir, os.Getenv(embedHelperEnv), os.Getenv(embedServerEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded host:", err)
		return 2
	}
	os.Stdout.WriteString("url " + h.srv.URL + "\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// connectURL opens an MCP session with go-sdk's client at url, over an
// HTTP client of its own (closed by the caller through closeIdle).
func connectURL(ctx context.Context, url string) (cs *mcp.ClientSession, closeIdle func(), err error) {
	tr := &http.Transport{}
	c := mcp.NewClient(&mcp.Implementation{Name: "embed-test", Version: "0"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	return cs, tr.CloseIdleConnections, err
}

// echo calls server's echo tool in cs and fails the test unless it answers.
func echo(t *testing.T, ctx context.Context, cs *mcp.ClientSession, server string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError {
		t.Fatalf("%s__echo: %v %+v", server, err, res)
	}
}

// TestEmbeddedHostKilled: a host that embeds the ledger, its live
// projection, the runtime and the gateway (a re-executed test binary) is
// killed with SIGKILL while two MCP sessions hold a per-session lease each
// and share a shared lease, their stdio servers running. Restarted on its
// ledger, the embedding host records, through live.Recover, what serve's
// restart records (TestGatewayServeKilled): for each open mcp_http
// session, lease.terminated{host_lost} and guardian.lost{helper_lost} for
// its lease, then session.ended; for the shared lease,
// lease.terminated{host_lost} and guardian.lost{helper_lost} — exactly
// those events. Each of the three activations is unconfirmed with the
// helper_lost reason; the restarted host serves; after its clean shutdown
// a further start finds nothing to recover.
func TestEmbeddedHostKilled(t *testing.T) {
	ctx := ctxT(t, embedBound)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), embedDirEnv+"="+dir, embedHelperEnv+"="+helperBin.Out, embedServerEnv+"="+testserverBin.Out)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = cmd.Process.Signal(syscall.SIGKILL) }
	timer := time.AfterFunc(embedBound, kill) // a hung child never outlives the test
	defer timer.Stop()
	reaped := false
	defer func() {
		if !reaped {
			kill()
			_ = cmd.Wait()
		}
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "url ") {
		t.Fatalf("the embedding host did not start: %q %v", sc.Text(), sc.Err())
	}
	url := strings.TrimPrefix(sc.Text(), "url ")
	for range 2 {
		cs, closeIdle, err := connectURL(ctx, url)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer closeIdle()
		defer cs.Close()
		echo(t, ctx, cs, "ts")
		echo(t, ctx, cs, "shared")
	}
	kill()
	err = cmd.Wait()
	reaped = true
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the embedding host did not die by SIGKILL: %v", err)
	}

	// What the killed run left, read before the restart: the expected
	// recovery events and the processes its guardians end.
	head, want, pids := killedRun(t, ctx, dir)
	defer waitGone(t, pids)
	h, err := startEmbeddedHost(ctx, dir, helperBin.Out, testserverBin.Out)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = h.close(context.Background())
		}
	}()
	if rep := (live.RecoveryReport{Sessions: 2, Leases: 3, Lost: 3}); h.recovery != rep {
		t.Fatalf("recovery %+v, want %+v", h.recovery, rep)
	}
	var got []string
	for x, err := range h.proj.Ledger().Events(ctx, ledger.Query{From: head + 1}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, recoveryLine(t, x))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the restart recorded\n%q\nwant\n%q", got, want)
	}
	err = h.proj.View(func(s *projector.State) {
		for _, w := range want {
			f := strings.Fields(w)
			if f[0] != "guardian.lost" {
				continue
			}
			v, reasons, _ := s.Verdict(f[1])
			if v != projector.ResultUnconfirmed || !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "("+string(events.LostHelper)+")") }) {
				t.Errorf("activation %s: %s %q, want unconfirmed with %s", f[1], v, reasons, events.LostHelper)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	cs, closeIdle, err := connectURL(ctx, h.srv.URL)
	if err != nil {
		t.Fatalf("connect to the restarted host: %v", err)
	}
	defer closeIdle()
	echo(t, ctx, cs, "ts")
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := h.close(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if rep, err := live.Recover(ctx, p, live.GatewayOwnership()); err != nil || rep.Any() {
		t.Fatalf("after a clean shutdown: recovery %+v %v", rep, err)
	}
}

// killedRun reads the killed host's ledger (read-only): its head, the
// recovery lines serve's restart records for it (sorted; see
// recoveryLine), and the pids of its servers and guardians.
func killedRun(t *testing.T, ctx context.Context, dir string) (ledger.Seq, []string, []int) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var want []string
	var pids []int
	for x, err := range l.Events(ctx, ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		pl, err := x.Payload()
		if err != nil {
			t.Fatal(err)
		}
		switch pl := pl.(type) {
		case *events.SessionOpened:
			if pl.Transport != events.SessionMCPHTTP {
				t.Fatalf("session %s opened over %s", x.Session, pl.Transport)
			}
			want = append(want, "session.ended "+x.Session)
		case *events.LeaseChildStarted:
			pids = append(pids, pl.PID, pl.GuardianPID)
			want = append(want, "lease.terminated "+x.Activation+" "+x.Session+" "+string(events.TerminatedHostLost),
				"guardian.lost "+x.Activation+" "+x.Session+" "+string(events.LostHelper))
		}
	}
	if len(want) != 2+2*3 {
		t.Fatalf("the killed run left %q: want two sessions and three leases", want)
	}
	slices.Sort(want)
	return l.Head().Seq, want, pids
}

// recoveryLine is "<kind> <activation> <session> <reason>" for a
// recovery event, "session.ended <session>" for a session's end.
func recoveryLine(t *testing.T, x events.Envelope) string {
	t.Helper()
	pl, err := x.Payload()
	if err != nil {
		t.Fatal(err)
	}
	switch pl := pl.(type) {
	case *events.LeaseTerminated:
		return "lease.terminated " + x.Activation + " " + x.Session + " " + string(pl.Reason)
	case *events.GuardianLost:
		return "guardian.lost " + x.Activation + " " + x.Session + " " + string(pl.Reason)
	case *events.SessionEnded:
		return "session.ended " + x.Session
	}
	return string(x.Kind) + " (not a recovery event)"
}

// waitGone waits, through a pidfd each (no polling), until every process
// of pids has ended: the killed host's guardians end their servers and
// themselves when their parent dies. One still running after embedBound
// is killed and fails the test.
func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(embedBound)
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // already gone
		}
		if err != nil {
			t.Errorf("pidfd of %d: %v", pid, err)
			continue
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		for errors.Is(err, unix.EINTR) {
			n, err = unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		}
		if err != nil || n == 0 {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			t.Errorf("process %d of the killed host still running after %v (killed): %v", pid, embedBound, err)
		}
		unix.Close(fd)
	}
}
