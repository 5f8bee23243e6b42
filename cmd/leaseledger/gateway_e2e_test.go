package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// End-to-end tests of `leaseledger serve --config`: the real binary, real
// MCP servers (server-everything over stdio and over Streamable HTTP), and
// real clients (go-sdk, and the official TypeScript SDK under node).

const (
	// repoRoot is where these tests run serve, as README.md says to:
	// relative commands and arguments of a config resolve from there.
	repoRoot = "../.."
	// everythingEntry is server-everything's entry point, relative to
	// repoRoot (as examples/mcp.json names it).
	everythingEntry = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
	// stdioServer and httpServer are the config names of the tests'
	// server-everything over stdio and over HTTP.
	stdioServer = "everything"
	httpServer  = "everything-http"
	// e2eWait bounds each wait of these tests for a process or an event.
	e2eWait = 20 * time.Second
)

// requireNode fails the test when node or server-everything is missing
// (`npm ci` in the repository root installs it).
func requireNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node not on PATH: %v", err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, everythingEntry)); err != nil {
		t.Fatalf("server-everything not installed (run `npm ci` in the repository root): %v", err)
	}
}

// writeConfig writes an mcp.json with server-everything over stdio (its
// path relative, as in examples/mcp.json) and, when httpURL is set, the
// same server over Streamable HTTP.
func writeConfig(t *testing.T, httpURL string) string {
	t.Helper()
	servers := map[string]any{stdioServer: map[string]any{"command": "node", "args": []string{everythingEntry, "stdio"}}}
	if httpURL != "" {
		servers[httpServer] = map[string]any{"type": "http", "url": httpURL}
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": servers})
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startEverythingHTTP starts server-everything in Streamable HTTP mode on
// a free loopback port; it is killed and reaped when the test ends.
func startEverythingHTTP(t *testing.T) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command("node", everythingEntry, "streamableHttp")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(e2eWait)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "http://" + addr + "/mcp"
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything (streamableHttp) not listening on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// e2eServe is a `leaseledger serve --config` process run from repoRoot.
type e2eServe struct {
	t       *testing.T
	cmd     *exec.Cmd
	out     *lockedBuffer
	exited  chan struct{}
	mcpURL  string
	natsURL string
}

func startServe(t *testing.T, bin, dir, config string, extra ...string) *e2eServe {
	t.Helper()
	args := append([]string{"--data-dir", dir, "serve", "--port", "-1", "--config", config, "--mcp-addr", "127.0.0.1:0",
		"--shutdown-budget", "15s"}, extra...)
	s := &e2eServe{t: t, cmd: exec.Command(bin, args...), out: &lockedBuffer{}, exited: make(chan struct{})}
	s.cmd.Dir = repoRoot
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
	deadline := time.After(e2eWait)
	for s.mcpURL == "" {
		select {
		case <-s.exited:
			t.Fatalf("serve exited before its MCP endpoint was up:\n%s", s.out.String())
		case <-deadline:
			t.Fatalf("serve did not start:\n%s", s.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		for _, line := range strings.Split(s.out.String(), "\n") {
			if u, ok := strings.CutPrefix(line, "leaseledger: NATS listening on "); ok {
				s.natsURL = u
			}
			if u, ok := strings.CutPrefix(line, "leaseledger: MCP endpoint on "); ok {
				s.mcpURL = u
			}
		}
	}
	return s
}

// stop sends sig and waits for serve to exit; it returns the exit code.
func (s *e2eServe) stop(sig syscall.Signal) int {
	s.t.Helper()
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		s.t.Fatalf("serve did not exit after %v:\n%s", sig, s.out.String())
	}
	return s.cmd.ProcessState.ExitCode()
}

// wireEvent is an event as replay and export print it.
type wireEvent struct {
	Seq        uint64          `json:"seq"`
	Kind       string          `json:"kind"`
	Activation string          `json:"activation"`
	Session    string          `json:"session"`
	Server     string          `json:"server"`
	Data       json.RawMessage `json:"data"`
}

func parseEvents(t *testing.T, out string) []wireEvent {
	t.Helper()
	var evs []wireEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var e wireEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// busEvents replays the events of kind from the running serve.
func (s *e2eServe) busEvents(kind string) []wireEvent {
	s.t.Helper()
	r := runCLI(s.t, context.Background(), "", "replay", "--nats", s.natsURL, "--kind", kind)
	if r.code != 0 {
		s.t.Fatalf("replay: %+v", r)
	}
	return parseEvents(s.t, r.stdout)
}

// awaitEvent waits until serve has recorded an event of kind for session.
func (s *e2eServe) awaitEvent(kind, session string) wireEvent {
	s.t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		for _, e := range s.busEvents(kind) {
			if e.Session == session {
				return e
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no %s for session %s", kind, session)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dirEvents exports the events of kind from a data directory serve no
// longer holds.
func dirEvents(t *testing.T, dir, kind string) []wireEvent {
	t.Helper()
	r := runCLI(t, context.Background(), "", "--data-dir", dir, "export", "--kind", kind)
	if r.code != 0 {
		t.Fatalf("export: %+v", r)
	}
	return parseEvents(t, r.stdout)
}

// connectGo opens a go-sdk client session to url. progress, when set,
// receives every progress notification.
func connectGo(t *testing.T, ctx context.Context, url string, progress chan<- float64) (*mcp.ClientSession, func()) {
	t.Helper()
	// A private transport, so its connections are closed with the
	// session (testproc: no keep-alive goroutine outlives the test).
	tr := &http.Transport{}
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params.Progress:
			default:
			}
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "leaseledger-e2e-go", Version: "1.0.0"}, opts)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs, func() {
		_ = cs.Close()
		tr.CloseIdleConnections()
	}
}

func toolText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestGatewayEndToEnd runs serve with server-everything over stdio and
// over HTTP; a go-sdk client and the TypeScript SDK client each list
// tools, call echo on both servers, list and read resources, list
// templates, cancel a long call after its first progress notification
// and close their session (DELETE → session.ended). Stdio servers run
// under this very binary as the guardian helper. After SIGTERM every
// activation is confirmed by `audit --all`, both cancelled calls are
// recorded as cancelled, and no guardian or server process is left.
func TestGatewayEndToEnd(t *testing.T) {
	requireNode(t)
	bin := cliBinary(t)
	dir := t.TempDir()
	srv := startServe(t, bin, dir, writeConfig(t, startEverythingHTTP(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// go-sdk client.
	progress := make(chan float64, 64)
	cs, closeGo := connectGo(t, ctx, srv.mcpURL, progress)
	defer closeGo()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	for _, want := range []string{stdioServer + "__echo", httpServer + "__echo", stdioServer + "__trigger-long-running-operation"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools/list lacks %s: %v", want, names)
		}
	}
	for _, server := range []string{stdioServer, httpServer} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__echo", Arguments: map[string]any{"message": "hello go"}})
		if err != nil || res.IsError || toolText(t, res) != "Echo: hello go" {
			t.Fatalf("%s echo: %v %+v", server, err, res)
		}
	}

	// The stdio server's guardian is this binary acting as the helper,
	// a child of serve.
	started := srv.busEvents("guardian.started")
	if len(started) == 0 {
		t.Fatal("no guardian.started")
	}
	var gs struct {
		GuardianPID int `json:"guardian_pid"`
	}
	_ = json.Unmarshal(started[0].Data, &gs)
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(gs.GuardianPID) + "/exe")
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(gs.GuardianPID) + "/cmdline")
	if wantExe, _ := filepath.EvalSymlinks(bin); exe != wantExe || string(cmdline) != bin+"\x00"+helperArg+"\x00" {
		t.Fatalf("guardian %d runs %q with %q, want %s %s", gs.GuardianPID, exe, cmdline, bin, helperArg)
	}
	if ppid, _, _ := testproc.Stat(gs.GuardianPID); ppid != srv.cmd.Process.Pid {
		t.Fatalf("guardian's parent is %d, serve is %d", ppid, srv.cmd.Process.Pid)
	}

	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	i := slices.IndexFunc(uris, func(u string) bool { return strings.HasPrefix(u, "leaseledger://"+stdioServer+"/") })
	if i < 0 || !slices.ContainsFunc(uris, func(u string) bool { return strings.HasPrefix(u, "leaseledger://"+httpServer+"/") }) {
		t.Fatalf("resources of both servers expected: %v", uris)
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uris[i]})
	if err != nil || len(read.Contents) == 0 || read.Contents[0].Text == "" && len(read.Contents[0].Blob) == 0 {
		t.Fatalf("read %s: %v %+v", uris[i], err, read)
	}
	var templates []string
	for tpl, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, tpl.URITemplate)
	}
	if !slices.ContainsFunc(templates, func(u string) bool { return strings.HasPrefix(u, "leaseledger://"+stdioServer+"/") }) {
		t.Fatalf("templates: %v", templates)
	}

	// Cancel a long call once its first progress notification arrived.
	callCtx, cancelCall := context.WithCancel(ctx)
	params := &mcp.CallToolParams{Name: stdioServer + "__trigger-long-running-operation", Arguments: map[string]any{"duration": 30, "steps": 30}}
	params.SetProgressToken("e2e-go")
	callErr := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, params)
		callErr <- err
	}()
	select {
	case <-progress:
	case <-time.After(e2eWait):
		t.Fatal("no progress notification passed through")
	}
	cancelCall()
	if err := <-callErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	// The cancellation reached the runtime: the 30 s call is recorded as
	// cancelled, not run to its end.
	testproc.Eventually(t, "the long call recorded cancelled", func() bool {
		for _, e := range srv.busEvents("call.finished") {
			if e.Session == cs.ID() && strings.Contains(string(e.Data), `"outcome":"cancelled"`) {
				return true
			}
		}
		return false
	})
	goSession := cs.ID()
	closeGo()
	srv.awaitEvent("session.ended", goSession)

	// The TypeScript SDK client, the same steps.
	node := exec.CommandContext(ctx, "node", "testdata/mcpclient.mjs", srv.mcpURL, stdioServer, httpServer)
	var nodeErr bytes.Buffer
	node.Stderr = &nodeErr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("mcpclient.mjs: %v\n%s", err, nodeErr.String())
	}
	var ts struct {
		Session   string   `json:"session"`
		Tools     []string `json:"tools"`
		Echo      string   `json:"echo"`
		EchoHTTP  string   `json:"echoHttp"`
		Resources []string `json:"resources"`
		Read      struct {
			URI   string `json:"uri"`
			Bytes int    `json:"bytes"`
		} `json:"read"`
		Templates []string `json:"templates"`
		Cancel    struct {
			Cancelled bool `json:"cancelled"`
			Progress  int  `json:"progress"`
			MS        int  `json:"ms"`
		} `json:"cancel"`
	}
	if err := json.Unmarshal(out, &ts); err != nil {
		t.Fatalf("mcpclient.mjs output %q: %v", out, err)
	}
	if !slices.Contains(ts.Tools, stdioServer+"__echo") || ts.Echo != "Echo: from ts" || ts.EchoHTTP != "Echo: from ts over http" ||
		!slices.ContainsFunc(ts.Resources, func(u string) bool { return strings.HasPrefix(u, "leaseledger://"+stdioServer+"/") }) ||
		!slices.ContainsFunc(ts.Resources, func(u string) bool { return strings.HasPrefix(u, "leaseledger://"+httpServer+"/") }) ||
		ts.Read.Bytes == 0 || len(ts.Templates) == 0 || !ts.Cancel.Cancelled || ts.Cancel.Progress == 0 || ts.Cancel.MS > 15000 {
		t.Fatalf("TypeScript client: %s", out)
	}
	srv.awaitEvent("session.ended", ts.Session)

	guardians := srv.busEvents("guardian.started")
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, srv.out.String())
	}
	for _, e := range guardians {
		_ = json.Unmarshal(e.Data, &gs)
		var target struct {
			TargetPID int `json:"target_pid"`
		}
		_ = json.Unmarshal(e.Data, &target)
		if testproc.Running(gs.GuardianPID) || testproc.Running(target.TargetPID) {
			t.Errorf("guardian %d or server %d still running after serve stopped", gs.GuardianPID, target.TargetPID)
		}
	}

	cancelled := 0
	for _, e := range dirEvents(t, dir, "call.finished") {
		var f struct{ Tool, Outcome string }
		_ = json.Unmarshal(e.Data, &f)
		if f.Tool == "trigger-long-running-operation" && f.Outcome == "cancelled" {
			cancelled++
		}
	}
	if cancelled != 2 {
		t.Errorf("%d long calls recorded as cancelled, want 2", cancelled)
	}
	r := runCLI(t, context.Background(), "", "--data-dir", dir, "audit", "--all", "--json")
	var sum struct {
		Activations int            `json:"activations"`
		Verdicts    map[string]int `json:"verdicts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != 0 || sum.Activations == 0 || sum.Verdicts["confirmed"] != sum.Activations {
		t.Fatalf("audit --all: %v %+v", err, r)
	}
}

// TestGatewayServeKilled kills serve (SIGKILL) with two live MCP sessions
// whose stdio servers run: every guardian sees its parent die and ends its
// server; after a restart the ledger verifies, the restart records the
// orphaned leases as ended (host_lost), and the audit reports their
// activations unconfirmed with the helper_lost reason.
func TestGatewayServeKilled(t *testing.T) {
	requireNode(t)
	bin := cliBinary(t)
	dir := t.TempDir()
	config := writeConfig(t, "")
	srv := startServe(t, bin, dir, config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A SIGHUP reloads the configuration and does not stop serve.
	_ = srv.cmd.Process.Signal(syscall.SIGHUP)
	hupDeadline := time.After(e2eWait)
	for !strings.Contains(srv.out.String(), "leaseledger: config reloaded") {
		select {
		case <-srv.exited:
			t.Fatalf("SIGHUP stopped serve:\n%s", srv.out.String())
		case <-hupDeadline:
			t.Fatalf("SIGHUP not reported:\n%s", srv.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := range 2 {
		cs, closeGo := connectGo(t, ctx, srv.mcpURL, nil)
		defer closeGo()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: stdioServer + "__echo", Arguments: map[string]any{"message": strconv.Itoa(i)}})
		if err != nil || res.IsError {
			t.Fatalf("echo: %v %+v", err, res)
		}
	}
	children := srv.busEvents("lease.child_started")
	var pids []int
	activations := map[string]bool{}
	for _, e := range children {
		var c struct {
			PID         int `json:"pid"`
			GuardianPID int `json:"guardian_pid"`
		}
		_ = json.Unmarshal(e.Data, &c)
		pids = append(pids, c.PID, c.GuardianPID)
		activations[e.Activation] = true
	}
	if len(activations) != 2 {
		t.Fatalf("%d activations started, want 2", len(activations))
	}
	for _, p := range pids {
		if !testproc.Running(p) {
			t.Fatalf("process %d not running before the kill", p)
		}
	}
	srv.stop(syscall.SIGKILL)
	deadline := time.Now().Add(e2eWait)
	for _, p := range pids {
		for testproc.Running(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d survived serve's SIGKILL by %v", p, e2eWait)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	srv = startServe(t, bin, dir, config)
	if !strings.Contains(srv.out.String(), "2 MCP session(s) and 2 lease(s) a previous serve left open") {
		t.Fatalf("restart did not record the orphaned leases:\n%s", srv.out.String())
	}
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, srv.out.String())
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", dir, "verify", "--quiet"); r.code != 0 {
		t.Fatalf("verify after the kill: %+v", r)
	}
	r := runCLI(t, context.Background(), "", "--data-dir", dir, "audit", "--all", "--json")
	var sum struct {
		Unconfirmed []struct {
			Activation string   `json:"activation_id"`
			Reasons    []string `json:"reasons"`
		} `json:"unconfirmed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != exitUnconfirmed {
		t.Fatalf("audit --all: %v %+v", err, r)
	}
	for _, u := range sum.Unconfirmed {
		if activations[u.Activation] && slices.ContainsFunc(u.Reasons, func(s string) bool { return strings.Contains(s, "(helper_lost)") }) {
			delete(activations, u.Activation)
		}
	}
	if len(activations) != 0 {
		t.Fatalf("activations not reported unconfirmed with helper_lost: %v\n%s", activations, r.stdout)
	}
	hostLost := 0
	for _, e := range dirEvents(t, dir, "lease.terminated") {
		if strings.Contains(string(e.Data), `"`+string(events.TerminatedHostLost)+`"`) {
			hostLost++
		}
	}
	if n := len(dirEvents(t, dir, "guardian.lost")); n != 2 || hostLost != 2 {
		t.Fatalf("%d guardian.lost and %d lease.terminated{host_lost} recorded, want 2 each", n, hostLost)
	}
}

// The control API of a serve with --config acts on its runtime through
// the gateway and the manager: the control user lists the live lease of
// an MCP session, revokes it (the next call gets a fresh lease), denies it
// (the next call is refused with the gateway's CodeRefused and recorded as
// lease.acquire_failed{denied}; denying a session not open is not-found)
// and allows it again (a fresh lease), reaps it once idle (lease.reaped;
// the next call gets a fresh lease), ends the session (the client's next
// request fails; session.ended is recorded) and is told when a session
// does not exist; a read-only user may read the projection API but not
// call the control API.
func TestGatewayControlAPI(t *testing.T) {
	requireNode(t)
	bin := cliBinary(t)
	srv := startServe(t, bin, t.TempDir(), writeConfig(t, ""),
		"--control-user", "ops", "--control-password", "ops-pw", "--read-only-user", "dash", "--read-only-password", "dash-pw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(user, pw string) *control.Client {
		// Quiet: the read-only user's refused call is an expected
		// permission violation.
		quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
		nc, err := nats.Connect(srv.natsURL, append(busclient.UserOptions(user, pw), quiet)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return control.NewClient(nc, user)
	}
	ops, dash := connect("ops", "ops-pw"), connect("dash", "dash-pw")

	cs, closeGo := connectGo(t, ctx, srv.mcpURL, nil)
	defer closeGo()
	echo := func() error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: stdioServer + "__echo", Arguments: map[string]any{"message": "x"}})
		if err == nil && res.IsError {
			err = errors.New("tool error")
		}
		return err
	}
	if err := echo(); err != nil {
		t.Fatal(err)
	}
	live, err := ops.LiveLeases(ctx, control.LiveLeasesRequest{Session: cs.ID()})
	if err != nil || len(live.Leases) != 1 || live.Leases[0].Server != stdioServer {
		t.Fatalf("live leases of %s: %v %+v", cs.ID(), err, live)
	}
	first := live.Leases[0].Activation
	if r, err := ops.Revoke(ctx, control.RevokeRequest{Session: cs.ID(), Server: stdioServer, Reason: "operator"}); err != nil || r.Revoked != 1 {
		t.Fatalf("revoke: %+v %v", r, err)
	}
	if err := echo(); err != nil {
		t.Fatalf("call after revoke: %v", err)
	}
	if live, err = ops.LiveLeases(ctx, control.LiveLeasesRequest{Session: cs.ID()}); err != nil || len(live.Leases) != 1 || live.Leases[0].Activation == first {
		t.Fatalf("after revoke, want one fresh lease: %v %+v", err, live)
	}
	if _, err := dash.Revoke(ctx, control.RevokeRequest{Session: cs.ID(), Server: stdioServer, Reason: "dash"}); !errors.Is(err, control.ErrForbidden) {
		t.Fatalf("revoke by the read-only user: %v", err)
	}
	if _, err := dash.Audit(ctx, control.AuditRequest{}); err != nil {
		t.Fatalf("projection API for the read-only user: %v", err)
	}

	// Deny: the session's lease is revoked and its next call refused
	// with the gateway's CodeRefused (the runtime records the refused
	// acquisition as lease.acquire_failed{denied}); allow lifts it and the
	// next call gets a fresh lease.
	second := live.Leases[0].Activation
	if r, err := ops.Revoke(ctx, control.RevokeRequest{Session: cs.ID(), Server: stdioServer, Reason: "operator_deny", Deny: true}); err != nil || r.Revoked != 1 {
		t.Fatalf("deny: %+v %v", r, err)
	}
	for deadline := time.Now().Add(e2eWait); !slices.ContainsFunc(srv.busEvents("lease.revoked"), func(e wireEvent) bool {
		return e.Activation == second && strings.Contains(string(e.Data), `"reason":"operator_deny"`)
	}); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no lease.revoked{operator_deny} for %s", second)
		}
	}
	var we *jsonrpc.Error
	if err := echo(); !errors.As(err, &we) || we.Code != gateway.CodeRefused {
		t.Fatalf("call while denied: %v, want JSON-RPC code %d", err, gateway.CodeRefused)
	}
	if e := srv.awaitEvent("lease.acquire_failed", cs.ID()); !strings.Contains(string(e.Data), `"reason":"denied"`) || e.Activation == second {
		t.Fatalf("refused acquisition recorded as %+v", e)
	}
	if _, err := ops.Revoke(ctx, control.RevokeRequest{Session: "mcp-none", Server: stdioServer, Reason: "operator_deny", Deny: true}); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("deny of a session that is not open: %v", err)
	}
	if err := ops.Allow(ctx, control.AllowRequest{Session: cs.ID(), Server: stdioServer}); err != nil {
		t.Fatalf("allow: %v", err)
	}
	if err := echo(); err != nil {
		t.Fatalf("call after allow: %v", err)
	}
	third := awaitFreshLease(t, ctx, ops, cs.ID(), second)

	// Reap: a lease idle longer than idle_max is reaped (lease.reaped for
	// its activation) and the session's next call gets a fresh lease.
	const idleMax = 200 * time.Millisecond
	time.Sleep(idleMax + 100*time.Millisecond)
	if r, err := ops.Reap(ctx, idleMax); err != nil || r.Reaped < 1 || r.RecordFailed {
		t.Fatalf("reap: %+v %v", r, err)
	}
	if e := srv.awaitEvent("lease.reaped", cs.ID()); e.Activation != third {
		t.Fatalf("lease.reaped for %s, want %s", e.Activation, third)
	}
	if err := echo(); err != nil {
		t.Fatalf("call after reap: %v", err)
	}
	awaitFreshLease(t, ctx, ops, cs.ID(), third)

	if err := ops.EndSession(ctx, "mcp-none"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("end of an unknown session: %v", err)
	}
	if err := ops.EndSession(ctx, cs.ID()); err != nil {
		t.Fatal(err)
	}
	srv.awaitEvent("session.ended", cs.ID())
	if err := echo(); err == nil {
		t.Fatal("a call on an ended session succeeded")
	}
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, srv.out.String())
	}
}

// awaitFreshLease waits until the live leases of session are one lease
// of stdioServer under an activation other than prev (the projection
// follows the ledger), and returns that activation.
func awaitFreshLease(t *testing.T, ctx context.Context, ops *control.Client, session, prev string) string {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		live, err := ops.LiveLeases(ctx, control.LiveLeasesRequest{Session: session})
		if err == nil && len(live.Leases) == 1 && live.Leases[0].Server == stdioServer && live.Leases[0].Activation != prev {
			return live.Leases[0].Activation
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fresh lease after %s: %v %+v", prev, err, live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawInitialize sends an MCP initialize to url with token ("" for none)
// and returns the HTTP status and the session id it opened.
func rawInitialize(t *testing.T, url, token string) (int, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
}

// serve --tokens: a request without a token or with a wrong one gets 401;
// `token add` + SIGHUP admits a new token, `token remove` + SIGHUP refuses
// it again and ends the session it opened. Without --tokens serve refuses
// to listen on a non-loopback address.
func TestGatewayServeTokens(t *testing.T) {
	requireNode(t)
	config := writeConfig(t, "")
	r := runCLI(t, context.Background(), "", "--data-dir", t.TempDir(), "serve", "--port", "-1", "--config", config, "--mcp-addr", "0.0.0.0:0")
	if r.code == 0 || !strings.Contains(r.stderr, "not a loopback address") {
		t.Fatalf("non-loopback without tokens: %+v", r)
	}

	bin := cliBinary(t)
	file := filepath.Join(t.TempDir(), "tokens")
	add := func(name string) string {
		r := runCLI(t, context.Background(), "", "token", "add", name, "--file", file)
		if r.code != 0 {
			t.Fatalf("token add: %+v", r)
		}
		return strings.TrimSpace(r.stdout)
	}
	first := add("first")
	srv := startServe(t, bin, t.TempDir(), config, "--tokens", file)
	if code, _ := rawInitialize(t, srv.mcpURL, ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := rawInitialize(t, srv.mcpURL, first+"x"); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _ := rawInitialize(t, srv.mcpURL, first); code != http.StatusOK {
		t.Fatalf("valid token: %d", code)
	}
	second := add("second")
	reloaded := func(n int) {
		t.Helper()
		want := "tokens reloaded: " + strconv.Itoa(n) + " in force"
		before := strings.Count(srv.out.String(), "tokens reloaded")
		_ = srv.cmd.Process.Signal(syscall.SIGHUP)
		deadline := time.Now().Add(e2eWait)
		for strings.Count(srv.out.String(), "tokens reloaded") == before {
			if time.Now().After(deadline) {
				t.Fatalf("no reload after SIGHUP:\n%s", srv.out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(srv.out.String(), want) {
			t.Fatalf("want %q:\n%s", want, srv.out.String())
		}
	}
	reloaded(2)
	code, opened := rawInitialize(t, srv.mcpURL, second)
	if code != http.StatusOK || opened == "" {
		t.Fatalf("added token after SIGHUP: %d", code)
	}
	srv.awaitEvent("session.opened", opened)
	if r := runCLI(t, context.Background(), "", "token", "remove", "second", "--file", file); r.code != 0 {
		t.Fatalf("token remove: %+v", r)
	}
	reloaded(1)
	if code, _ := rawInitialize(t, srv.mcpURL, second); code != http.StatusUnauthorized {
		t.Fatalf("removed token after SIGHUP: %d", code)
	}
	srv.awaitEvent("session.ended", opened)
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, srv.out.String())
	}
}

// examples/mcp.json, the config README.md's set-up runs, parses, exposes
// only valid server names, and names files that exist from the repository
// root.
func TestExampleConfig(t *testing.T) {
	cfg, err := loadConfig(filepath.Join(repoRoot, "examples", "mcp.json"))
	if err != nil || !slices.Equal(cfg.names, []string{stdioServer}) {
		t.Fatalf("servers %v, %v", cfg.names, err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, everythingEntry)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(repoRoot, "examples", "mcp.json"))
	if !strings.Contains(string(b), `"`+everythingEntry+`"`) {
		t.Fatalf("examples/mcp.json does not run %s", everythingEntry)
	}
}
