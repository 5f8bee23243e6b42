//go:build linux

package guardian

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Binaries the tests build once (testproc.Main): the real helper (static,
// as shipped), the test target and the fake helper.
var (
	helperBin = &testproc.Binary{Out: HelperName, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger-guardian"}
	targetBin = &testproc.Binary{Out: "testtarget", Pkg: "github.com/leaseledger/leaseledger/guardian/internal/testtarget"}
	fakeBin   = &testproc.Binary{Out: "fakehelper", Pkg: "github.com/leaseledger/leaseledger/guardian/internal/fakehelper"}
)

// hostModeEnv makes the test binary act as a host process (see hostMain).
const hostModeEnv = "GUARDIAN_TEST_HOST_MODE"

func TestMain(m *testing.M) {
	if os.Getenv(hostModeEnv) != "" {
		os.Exit(hostMain())
	}
	testproc.Main(m, helperBin, targetBin, fakeBin)
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

// pipeFill returns how many bytes are queued in the pipe behind fd and the
// pipe's capacity (FIONREAD works on either end of a pipe).
func pipeFill(fd int) (queued, capacity int, ok bool) {
	q, err := unix.IoctlGetInt(fd, unix.TIOCINQ) // TIOCINQ is FIONREAD
	if err != nil {
		return 0, 0, false
	}
	c, err := unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		return 0, 0, false
	}
	return q, c, true
}

// pipeLevel returns the bytes queued in the pipe behind f and whether the
// pipe is full for a frame writer: less room left than one data frame. (A
// pipe counts pages, not bytes: partly read pages keep their slot, so a
// pipe that refuses writes can still show some free bytes.)
func pipeLevel(f *os.File) (queued int, full bool) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			q, c, ok := pipeFill(int(fd))
			queued, full = q, ok && c-q < wire.MaxDataChunk+wire.HeaderLen
		})
	}
	return queued, full
}

// procPipeLevel is pipeLevel for descriptor fd of process pid, opened
// through /proc (for reading, non-blocking; nothing is read from it).
func procPipeLevel(pid, fd int) (queued int, full bool) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return pipeLevel(f)
}

// waitStdinStuck waits until the helper can take no more of what s.Write
// relays: the target (which never reads) has a full stdin pipe, the pipe
// from us to the helper is full, and neither that pipe's level nor the
// bytes relayed have moved for several polls, far longer than the
// helper's reader takes to move a chunk while its stdin queue has room.
// Only then is a Write blocked mid-frame that only Close's write bound can
// end.
func waitStdinStuck(t *testing.T, s *Session) {
	t.Helper()
	const stillPolls = 5
	type state struct {
		relayed int64
		queued  int
	}
	last, still := state{relayed: -1}, 0
	testproc.Eventually(t, "stdin pipes full", func() bool {
		s.mu.Lock()
		now := state{relayed: s.stdinBytes}
		s.mu.Unlock()
		var hostFull bool
		now.queued, hostFull = pipeLevel(s.toHelper)
		_, targetFull := procPipeLevel(s.TargetPID(), 0)
		if now != last || !hostFull || !targetFull {
			last, still = now, 0
			return false
		}
		still++
		return still >= stillPolls
	})
}

// waitGone waits until pid is no longer running.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testproc.Eventually(t, fmt.Sprintf("pid %d gone", pid), func() bool { return !running(pid) })
}

// spec returns a Spec for the test target in mode, with short graces.
func spec(t *testing.T, args ...string) Spec {
	id := strings.Map(func(r rune) rune {
		if wire.ValidID(string(r)) {
			return r
		}
		return '-'
	}, t.Name())
	if len(id) > 100 {
		id = id[:100]
	}
	return Spec{
		Command: targetBin.Out, Args: args, ActivationID: "act-" + id, HelperPath: helperBin.Out,
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
