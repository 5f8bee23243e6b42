//go:build linux

package guardian

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Binaries the tests build once, into a temporary directory: the real
// helper (static, as shipped), the test target and the fake helper.
var bins struct {
	dir, helper, target, fake string
}

// hostModeEnv makes the test binary act as a host process (see hostMain).
const hostModeEnv = "GUARDIAN_TEST_HOST_MODE"

func TestMain(m *testing.M) {
	if os.Getenv(hostModeEnv) != "" {
		os.Exit(hostMain())
	}
	dir, err := os.MkdirTemp("", "guardian-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.helper = filepath.Join(dir, HelperName)
	bins.target = filepath.Join(dir, "testtarget")
	bins.fake = filepath.Join(dir, "fakehelper")
	if err := testproc.Build(
		testproc.Binary{Out: bins.helper, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger-guardian"},
		testproc.Binary{Out: bins.target, Pkg: "github.com/leaseledger/leaseledger/guardian/internal/testtarget"},
		testproc.Binary{Out: bins.fake, Pkg: "github.com/leaseledger/leaseledger/guardian/internal/fakehelper"},
	); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := testproc.Leftovers(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// hostMain is a minimal host: it launches an echo target under the helper,
// prints "pids HELPER TARGET", and waits to be killed.
func hostMain() int {
	s, err := Launch(context.Background(), Spec{
		Command: os.Getenv("GUARDIAN_TEST_TARGET"), Args: []string{"ignoreterm"},
		ActivationID: "host-killed", HelperPath: os.Getenv("GUARDIAN_TEST_HELPER"),
		EOFGrace: 100 * time.Millisecond, TermGrace: 100 * time.Millisecond, KillGrace: time.Second, PipeGrace: 100 * time.Millisecond,
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	// Wait until the target is ready (TERM ignored), so the cleanup must
	// reach KILL.
	line, _ := bufio.NewReader(s.Stream()).ReadString('\n')
	fmt.Printf("pids %d %d %s", s.HelperPID(), s.TargetPID(), line)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test kills us
	return 0
}

// running reports whether pid exists and is neither a zombie nor dead.
func running(pid int) bool { return testproc.Running(pid) }

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int { return testproc.ChildrenOf(pid) }

// procStat reads ppid and state of pid from /proc.
func procStat(pid int) (ppid int, state byte, ok bool) { return testproc.Stat(pid) }

// waitGone polls until pid is no longer running.
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running after %s", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var nonID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// spec returns a Spec for the test target in mode, with short graces.
func spec(t *testing.T, args ...string) Spec {
	id := nonID.ReplaceAllString(t.Name(), "-")
	if len(id) > 100 {
		id = id[:100]
	}
	return Spec{
		Command: bins.target, Args: args, ActivationID: "act-" + id, HelperPath: bins.helper,
		EOFGrace: 300 * time.Millisecond, TermGrace: 300 * time.Millisecond,
		KillGrace: time.Second, PipeGrace: 200 * time.Millisecond,
	}
}

// launch starts a session and makes sure the test ends it.
func launch(t *testing.T, sp Spec) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Launch(ctx, sp)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

func closeWithin(t *testing.T, s *Session, d time.Duration) CleanupResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return s.Close(ctx)
}

func requireConfirmed(t *testing.T, r CleanupResult) {
	t.Helper()
	if !r.Confirmed {
		t.Fatalf("cleanup unconfirmed: reason %q faults %q receipt %+v helper exit %d sig %q",
			r.Reason, r.Faults, r.Receipt, r.HelperExitCode, r.HelperSignal)
	}
	if r.Err() != nil {
		t.Fatalf("confirmed result with Err %v", r.Err())
	}
}

func signals(r *Receipt) []string {
	var out []string
	for _, s := range r.Signals {
		out = append(out, s.Signal)
	}
	return out
}
