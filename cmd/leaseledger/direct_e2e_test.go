//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// TestServeVerifiedAndDirect: an mcp.json with one verified server (the
// guardian) and one direct server ("cleanup": "direct") through serve.
// A go-sdk client uses both; kill -9 of the direct server in the middle of
// a call fails that call, is recorded as the host observed it (exit by
// signal KILL, no signal sent by the host) and the next call gets a fresh
// child; after a clean stop `audit --all` exits 0 with the verified
// activation confirmed and the direct ones unverified, counted apart.
// Then kill -9 of serve itself: the guardian ends the verified server (no
// survivor), the direct server sees its stdin close and exits; the
// restarted serve records both leases ended (host_lost), the verified one's
// guardian lost, and nothing about the direct child it could not observe:
// its activation is unconfirmed (not closed) with its child unsupported.
func TestServeVerifiedAndDirect(t *testing.T) {
	bin := cliBinary(t)
	tsBin := filepath.Join(t.TempDir(), "testserver")
	if err := testproc.Build(testproc.Binary{Out: tsBin, Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"}); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"guarded": map[string]any{"command": tsBin},
		"plain":   map[string]any{"command": tsBin, "cleanup": "direct", "env": map[string]string{"TESTSERVER_CALLS": calls}},
	}})
	config := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	srv := startServe(t, bin, dir, config)
	cs, closeGo := connectGo(t, ctx, srv.mcpURL, nil)
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	for _, want := range []string{"guarded__echo", "plain__echo", "plain__slow"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools/list lacks %s: %v", want, names)
		}
	}
	echo := func(server string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__echo", Arguments: map[string]any{"text": "hi " + server}})
		if err != nil || res.IsError || toolText(t, res) != "hi "+server {
			t.Fatalf("%s echo: %v %+v", server, err, res)
		}
	}
	echo("guarded")
	echo("plain")

	// The children: a verified one under its guardian, a direct one
	// serve's own child.
	direct, verified := startedChildren(t, srv.busEvents("lease.child_started"))
	if len(direct) != 1 || len(verified) != 1 {
		t.Fatalf("children: direct %v, verified %v", direct, verified)
	}
	var killed string
	var killedPID int
	for act, pid := range direct {
		killed, killedPID = act, pid
	}
	if ppid, _, _ := testproc.Stat(killedPID); ppid != srv.cmd.Process.Pid {
		t.Fatalf("direct child's parent is %d, serve is %d", ppid, srv.cmd.Process.Pid)
	}

	// kill -9 of the direct server mid-call.
	failed := make(chan bool, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "plain__slow", Arguments: map[string]any{"ms": 60000}})
		failed <- err != nil || res.IsError
	}()
	testproc.Eventually(t, "the direct server received the slow call", func() bool {
		b, _ := os.ReadFile(calls)
		return strings.Contains(string(b), "slow")
	})
	if err := syscall.Kill(killedPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !<-failed {
		t.Fatal("the call on a killed direct server succeeded")
	}
	echo("plain") // a fresh child
	closeGo()
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, srv.out.String())
	}

	r := runCLI(t, context.Background(), "", "--data-dir", dir, "audit", "--all", "--json")
	var sum struct {
		Activations int            `json:"activations"`
		Verdicts    map[string]int `json:"verdicts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != 0 {
		t.Fatalf("audit --all: %v %+v", err, r)
	}
	if sum.Verdicts["unverified"] != 2 || sum.Verdicts["confirmed"] != 1 || sum.Verdicts["unconfirmed"] != 0 || sum.Activations != 3 {
		t.Fatalf("audit --all verdicts: %+v", sum)
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", dir, "audit", "--all"); r.code != 0 || !strings.Contains(r.stdout, "unverified: 2") {
		t.Fatalf("audit --all (text): %+v", r)
	}
	r = runCLI(t, context.Background(), "", "--data-dir", dir, "audit", killed)
	if r.code != 0 || !strings.Contains(r.stdout, "verdict: unverified") || !strings.Contains(r.stdout, "best_effort_cleanup") {
		t.Fatalf("audit %s: %+v", killed, r)
	}
	for act := range verified {
		if r := runCLI(t, context.Background(), "", "--data-dir", dir, "audit", act); r.code != 0 || !strings.Contains(r.stdout, "verdict: confirmed") {
			t.Fatalf("audit %s: %+v", act, r)
		}
	}
	var sawKill bool
	for _, e := range dirEvents(t, dir, "lease.child_closed") {
		var c events.LeaseChildClosed
		if err := json.Unmarshal(e.Data, &c); err != nil {
			t.Fatal(err)
		}
		if e.Activation == killed {
			sawKill = c.Reaped && c.Signal == "KILL" && c.ExitCode == -1 && c.ExitedBeforeClose && c.KillSentAt == nil && c.TermSentAt == nil
		} else if !c.Reaped || c.ExitCode != 0 || c.Signal != "" || c.Descendants != "unknown" {
			t.Fatalf("the clean stop's direct child: %s", e.Data)
		}
	}
	if !sawKill {
		t.Fatalf("the killed direct child's close: %v", dirEvents(t, dir, "lease.child_closed"))
	}

	// kill -9 of serve with both servers running.
	srv = startServe(t, bin, dir, config)
	cs, closeGo = connectGo(t, ctx, srv.mcpURL, nil)
	defer closeGo()
	echo("guarded")
	echo("plain")
	before := map[string]bool{}
	for _, e := range liveActivations(t, srv) {
		before[e] = true
	}
	direct, verified = startedChildren(t, srv.busEvents("lease.child_started"))
	var pids []int
	orphans := map[string]bool{}
	for act, pid := range direct {
		if !before[act] {
			continue
		}
		pids, orphans[act] = append(pids, pid), true
	}
	for act, pid := range verified {
		if before[act] {
			pids, orphans[act] = append(pids, pid), true
		}
	}
	if len(orphans) != 2 {
		t.Fatalf("live activations %v", orphans)
	}
	srv.stop(syscall.SIGKILL)
	for _, p := range pids {
		testproc.Eventually(t, "no survivor of serve's kill", func() bool { return !testproc.Running(p) })
	}
	srv = startServe(t, bin, dir, config)
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, srv.out.String())
	}
	r = runCLI(t, context.Background(), "", "--data-dir", dir, "audit", "--all", "--json")
	var after struct {
		Verdicts    map[string]int `json:"verdicts"`
		Unconfirmed []struct {
			Activation string   `json:"activation_id"`
			Reasons    []string `json:"reasons"`
		} `json:"unconfirmed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &after); err != nil || r.code != exitUnconfirmed {
		t.Fatalf("audit --all after serve's kill: %v %+v", err, r)
	}
	for _, u := range after.Unconfirmed {
		has := func(s string) bool {
			return slices.ContainsFunc(u.Reasons, func(r string) bool { return strings.Contains(r, s) })
		}
		switch {
		case direct[u.Activation] != 0 && has("not_closed") && has("best_effort_cleanup"):
			delete(orphans, u.Activation)
		case verified[u.Activation] != 0 && has("(helper_lost)"):
			delete(orphans, u.Activation)
		}
	}
	if len(orphans) != 0 || after.Verdicts["unverified"] != 2 || after.Verdicts["confirmed"] != 1 {
		t.Fatalf("serve's kill not recorded as observed: left %v\n%s", orphans, r.stdout)
	}
	if n := len(dirEvents(t, dir, "lease.child_closed")); n != 2 { // the first run's two direct children
		t.Fatalf("%d lease.child_closed: the restarted serve cannot have observed the orphan's end", n)
	}
}

// startedChildren maps the activations of lease.child_started events to
// their child's pid, direct (best_effort) and verified apart.
func startedChildren(t *testing.T, evs []wireEvent) (direct, verified map[string]int) {
	t.Helper()
	direct, verified = map[string]int{}, map[string]int{}
	for _, e := range evs {
		var c events.LeaseChildStarted
		if err := json.Unmarshal(e.Data, &c); err != nil {
			t.Fatal(err)
		}
		if c.Cleanup == events.CleanupBestEffort {
			direct[e.Activation] = c.PID
		} else {
			verified[e.Activation] = c.PID
		}
	}
	return direct, verified
}

// liveActivations lists the activations the running serve holds a live
// lease of (acquired, not terminated).
func liveActivations(t *testing.T, srv *e2eServe) []string {
	t.Helper()
	ended := map[string]bool{}
	for _, e := range srv.busEvents("lease.terminated") {
		ended[e.Activation] = true
	}
	var live []string
	for _, e := range srv.busEvents("lease.acquired") {
		if !ended[e.Activation] {
			live = append(live, e.Activation)
		}
	}
	return live
}
