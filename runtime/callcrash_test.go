//go:build linux

package runtime

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// The re-executed test binary runs callCrashChild when callCrashDirEnv is
// set; init runs it before TestMain, so the child builds nothing.
const (
	callCrashDirEnv    = "LEASELEDGER_CALLCRASH_DIR"
	callCrashHelperEnv = "LEASELEDGER_CALLCRASH_HELPER"
	callCrashServerEnv = "LEASELEDGER_CALLCRASH_SERVER"
	callCrashCallsEnv  = "LEASELEDGER_CALLCRASH_CALLS"
	callCrashModeEnv   = "LEASELEDGER_CALLCRASH_MODE"
)

// Bounds of TestCallCrashOutcomeNeverWrong.
const (
	callCrashMinRounds = 8  // rounds run even once every case was seen
	callCrashMaxRounds = 40 // rounds before failing for an unseen case
	callCrashBudget    = 25 * time.Second
)

func init() {
	if dir := os.Getenv(callCrashDirEnv); dir != "" {
		os.Exit(callCrashChild(dir))
	}
}

// callCrashTools are the calls the child makes in turn: an ok result, a
// tool error (also outcome ok, another result) and a JSON-RPC error.
var callCrashTools = []string{"echo", "fail", "echo", "refuse"}

// callCrashChild is a real host: a Manager over a real ledger in dir and
// the go-sdk test server, making calls one after the other. After each
// Call returns it prints "call <i> <outcome> <result sha256 or ->" straight
// to stdout, then makes the next; after the last one it dies at once
// (mode exit), is killed by the parent (mode kill), or lets the outcome
// linger and exits (mode linger).
func callCrashChild(dir string) int {
	ctx := context.Background()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	cfg := &MapConfigSource{}
	if err := cfg.Set("ts", ServerConfig{Command: os.Getenv(callCrashServerEnv)}); err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		return 2
	}
	m, err := NewManager(Options{Config: cfg, Ledger: l, HelperPath: os.Getenv(callCrashHelperEnv),
		EOFGrace: 100 * time.Millisecond, TermGrace: 100 * time.Millisecond, KillGrace: time.Second, PipeGrace: 100 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 2
	}
	s, err := m.OpenSession(ctx, "s1")
	if err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
		return 2
	}
	capa := s.Capability()
	tools, err := capa.Tools(ctx, "ts")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tools:", err)
		return 2
	}
	digests := map[string]string{}
	for _, pt := range tools {
		digests[pt.Name] = pt.Digest
	}
	n, _ := strconv.Atoi(os.Getenv(callCrashCallsEnv))
	for i := range n {
		tool := callCrashTools[i%len(callCrashTools)]
		res, err := capa.Call(ctx, CallRequest{Server: "ts", Tool: tool, Digest: digests[tool], Arguments: map[string]any{"text": "t" + strconv.Itoa(i)}})
		line := ""
		switch {
		case err == nil:
			b, _ := json.Marshal(res)
			sum := sha256.Sum256(b)
			line = fmt.Sprintf("call %d %s %s\n", i, events.CallOK, hex.EncodeToString(sum[:]))
		case errors.Is(err, ErrRemote):
			line = fmt.Sprintf("call %d %s -\n", i, events.CallRemoteError)
		default:
			fmt.Fprintln(os.Stderr, "call:", err)
			return 2
		}
		os.Stdout.WriteString(line) // straight to the fd: seen by the parent before the next step
	}
	switch os.Getenv(callCrashModeEnv) {
	case "linger":
		time.Sleep(50 * time.Millisecond)
	case "kill":
		os.Stdout.WriteString("done\n")
		time.Sleep(time.Minute) // the parent kills it
	}
	os.Exit(0) // abruptly: no Close, no session end, no lease termination
	return 0
}

// seenCall is what the child saw of one call.
type seenCall struct {
	outcome events.CallOutcome
	sha     string // "" for no result
}

// TestCallCrashOutcomeNeverWrong kills a real host (a re-executed test
// binary running a Manager over a real ledger and the test server) right
// after Call returns, many times. Reopening the ledger, every admitted
// call is either finished with the outcome and result the host saw, or
// listed by the audit as outcome unknown — never a wrong outcome. The test
// fails unless some round lost an outcome (otherwise it proved nothing).
func TestCallCrashOutcomeNeverWrong(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 15))
	start := time.Now()
	unknown, finished := 0, 0
	rounds := 0
	for ; rounds < callCrashMaxRounds && time.Since(start) < callCrashBudget; rounds++ {
		if rounds >= callCrashMinRounds && unknown > 0 && finished > 0 {
			break
		}
		mode := []string{"exit", "kill", "linger"}[rounds%3]
		calls := 1 + rng.IntN(6)
		u, f := callCrashRound(t, rounds, mode, calls)
		unknown += u
		finished += f
	}
	t.Logf("%d rounds in %v: %d outcomes finished, %d unknown", rounds, time.Since(start).Round(time.Millisecond), finished, unknown)
	if unknown == 0 {
		t.Fatalf("no round left a call's outcome unknown in %d rounds: the crash case was not exercised", rounds)
	}
	if finished == 0 {
		t.Fatal("no call's outcome was durable: the outcome check was not exercised")
	}
}

// callCrashRound runs one child and checks its ledger; it returns the
// calls whose outcome the child saw that were unknown and finished.
func callCrashRound(t *testing.T, round int, mode string, calls int) (unknown, finished int) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), callCrashDirEnv+"="+dir, callCrashHelperEnv+"="+helperBin.Out,
		callCrashServerEnv+"="+testserverBin.Out, callCrashCallsEnv+"="+strconv.Itoa(calls), callCrashModeEnv+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	timer := time.AfterFunc(15*time.Second, kill) // a hung child never outlives the test
	seen := map[int]seenCall{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "done" {
			kill()
			continue
		}
		if len(f) != 4 || f[0] != "call" {
			kill()
			t.Fatalf("round %d: child said %q", round, sc.Text())
		}
		i, _ := strconv.Atoi(f[1])
		c := seenCall{outcome: events.CallOutcome(f[2])}
		if f[3] != "-" {
			c.sha = f[3]
		}
		seen[i] = c
	}
	err = cmd.Wait()
	timer.Stop()
	if mode == "kill" {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child did not die by SIGKILL: %v", round, err)
		}
	} else if err != nil {
		t.Fatalf("round %d (%s): child: %v", round, mode, err)
	}
	if len(seen) != calls {
		t.Fatalf("round %d: child reported %d calls of %d", round, len(seen), calls)
	}

	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer l.Close()
	ctx := ctxT(t, 10*time.Second)
	var admitted []string // call ids in admission order
	var act string
	fins := map[string]*events.CallFinished{}
	var pids []int
	for env, err := range l.Events(ctx, ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		p, err := env.Payload()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *events.LeaseChildStarted:
			pids = append(pids, p.PID, p.GuardianPID)
		case *events.CallAdmitted:
			admitted = append(admitted, p.CallID)
			act = env.Activation
		case *events.CallFinished:
			fins[p.CallID] = p
		}
	}
	defer reapOrphans(t, pids)
	if len(admitted) != calls {
		t.Fatalf("round %d: %d call.admitted, the child's %d calls returned", round, len(admitted), calls)
	}
	// The audit, replaying the activation's events, lists the unpaired.
	fold := audit.NewFold(act, audit.Options{})
	for env, err := range l.Events(ctx, ledger.Query{Activation: act}) {
		if err != nil {
			t.Fatal(err)
		}
		if err := fold.Add(&env); err != nil {
			t.Fatal(err)
		}
	}
	res, err := fold.Result()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, u := range res.CallsOutcomeUnknown {
		listed[u.CallID] = true
	}
	for i, id := range admitted {
		want := seen[i]
		fin, ok := fins[id]
		if !ok {
			if !listed[id] {
				t.Fatalf("round %d: call %d (%s) has no call.finished and is not listed unknown: %+v", round, i, id, res.CallsOutcomeUnknown)
			}
			unknown++
			continue
		}
		if listed[id] {
			t.Fatalf("round %d: call %d finished and listed unknown", round, i)
		}
		if fin.Outcome != want.outcome || fin.ResultSHA256 != want.sha {
			t.Fatalf("round %d: call %d recorded %s %q, the host saw %s %q", round, i, fin.Outcome, fin.ResultSHA256, want.outcome, want.sha)
		}
		finished++
	}
	if len(fins) > len(admitted) {
		t.Fatalf("round %d: %d call.finished for %d admitted", round, len(fins), len(admitted))
	}
	return unknown, finished
}

// reapOrphans waits for the dead host's guardian helper and server, which
// the helper's parent-death signal makes clean up; any still running after
// the bound is killed and fails the test.
func reapOrphans(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for pid > 0 && testproc.Running(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if pid > 0 && testproc.Running(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d of the dead host still running after 5s (killed)", pid)
		}
	}
}
