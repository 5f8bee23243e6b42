//go:build linux

package helper

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// subreaper makes the test process a child subreaper, as the helper is,
// until the test ends.
func subreaper(t testing.TB) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// directChild starts the test target in mode as a child of the calling
// thread; the test kills and reaps it at its end.
func directChild(t testing.TB, mode string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(targetBin.Out, mode)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, in, bufio.NewReader(out)
}

// childLine reads the "child PID" line of the target's orphan mode.
func childLine(t testing.TB, r *bufio.Reader) int {
	t.Helper()
	line, err := r.ReadString('\n')
	var pid int
	if err == nil {
		_, err = fmt.Sscanf(line, "child %d\n", &pid)
	}
	if err != nil {
		t.Fatalf("child line %q: %v", line, err)
	}
	return pid
}

// makeOrphan has the test target start a sleeper and then exit, so the
// sleeper reparents to the test process (a subreaper). The test kills and
// reaps the orphan, by exact pid, at its end.
func makeOrphan(t testing.TB) int {
	t.Helper()
	cmd, in, out := directChild(t, "orphan")
	pid := childLine(t, out)
	t.Cleanup(func() {
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _ = unix.Wait4(pid, nil, 0, nil)
	})
	_ = in.Close() // the target's echo ends: it exits, orphaning the sleeper
	_ = cmd.Wait()
	if ppid, _, ok := procStat(pid); !ok || ppid != os.Getpid() {
		t.Fatalf("orphan %d has parent %d (ok %v), not the test process", pid, ppid, ok)
	}
	return pid
}

// onOtherThread starts the test target's sleep mode from a goroutine locked
// to a thread of its own, so the child is listed in that thread's children
// file, not the main thread's. The thread stays until the test ends.
func onOtherThread(t testing.TB) int {
	t.Helper()
	type res struct {
		pid, tid int
		inFile   bool
	}
	got, release, done := make(chan res), make(chan struct{}), make(chan struct{})
	var work func()
	work = func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if unix.Gettid() == os.Getpid() {
			// Locked to the main thread: hold it, so the next locked
			// goroutine gets another thread.
			inner := make(chan struct{})
			go func() {
				defer close(inner)
				work()
			}()
			<-inner
			return
		}
		cmd := exec.Command(targetBin.Out, "sleep")
		if err := cmd.Start(); err != nil {
			got <- res{}
			return
		}
		tid := unix.Gettid()
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", os.Getpid(), tid))
		got <- res{cmd.Process.Pid, tid, slices.Contains(strings.Fields(string(b)), strconv.Itoa(cmd.Process.Pid))}
		<-release
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	go func() {
		defer close(done)
		work()
	}()
	r := <-got
	t.Cleanup(func() {
		close(release)
		<-done
	})
	if r.pid == 0 {
		t.Fatal("starting the target from another thread failed")
	}
	if r.tid == os.Getpid() || !r.inFile {
		t.Fatalf("child %d not listed by its own thread %d (main thread %d)", r.pid, r.tid, os.Getpid())
	}
	return r.pid
}

// waitState waits until pid's state is want.
func waitState(t testing.TB, pid int, want byte) {
	t.Helper()
	testproc.Eventually(t, fmt.Sprintf("pid %d in state %c", pid, want), func() bool {
		_, st, ok := procStat(pid)
		return ok && st == want
	})
}

// needChildrenFiles skips a test on a kernel without the children files
// (CONFIG_PROC_CHILDREN), where the helper uses the full scan throughout.
func needChildrenFiles(t *testing.T) {
	t.Helper()
	d := newDescendants(os.Getpid(), -1)
	if _, err := d.listChildren(nil); errors.Is(err, errNoChildrenFile) {
		t.Skip("this kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN): the helper scans all of /proc")
	} else if err != nil {
		t.Fatal(err)
	}
}

// Where the kernel has the children files, scan uses them from the first
// call on.
func TestScanUsesChildrenFiles(t *testing.T) {
	needChildrenFiles(t)
	d := newDescendants(os.Getpid(), -1)
	d.scan()
	if d.source != sourceChildren {
		t.Fatalf("scan source %d, want the children files", d.source)
	}
}

// The twin: in real situations — orphans the test target leaves behind, one
// of them already dead (a zombie), a grandchild whose parent still lives, a
// child of another thread, and the direct child — the children-file listing
// finds exactly what the full /proc scan finds.
func TestChildrenListingMatchesProcScan(t *testing.T) {
	needChildrenFiles(t)
	subreaper(t)
	target, _, targetOut := directChild(t, "orphan") // alive: its sleeper is a grandchild
	grandchild := childLine(t, targetOut)
	t.Cleanup(func() {
		// Its parent does not reap it: once the parent is gone too, the
		// zombie is ours (we are the subreaper), reaped by its exact pid.
		_ = unix.Kill(grandchild, unix.SIGKILL)
		_ = target.Process.Kill()
		_ = target.Wait()
		_, _ = unix.Wait4(grandchild, nil, 0, nil)
	})
	orphans := []int{makeOrphan(t), makeOrphan(t), makeOrphan(t)}
	zombie := makeOrphan(t)
	if err := unix.Kill(zombie, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitState(t, zombie, 'Z')
	other := onOtherThread(t)

	d := newDescendants(os.Getpid(), target.Process.Pid)
	want := slices.Sorted(slices.Values(append([]int{zombie, other}, orphans...)))
	for round := range 50 { // repeated: one agreeing pair of listings could be luck
		viaProc := d.find(procPIDs())
		pids, err := d.childPIDs()
		if err != nil {
			t.Fatal(err)
		}
		viaChildren := d.find(pids)
		if got, full := slices.Sorted(maps.Keys(viaChildren)), slices.Sorted(maps.Keys(viaProc)); !slices.Equal(got, full) || !slices.Equal(got, want) {
			t.Fatalf("round %d: children files %v, full scan %v, want %v", round, got, full, want)
		}
		if viaChildren[zombie] != 'Z' || viaProc[zombie] != 'Z' {
			t.Fatalf("zombie state: children files %c, full scan %c", viaChildren[zombie], viaProc[zombie])
		}
	}

	// scan records them as before, in pid order, and reap collects the
	// zombie by its exact pid.
	d.scan()
	d.reap()
	if d.source != sourceChildren || !slices.Equal(d.order, want) || !slices.Equal(d.reaped, []int{zombie}) {
		t.Fatalf("source %d seen %v reaped %v, want seen %v reaped [%d]", d.source, d.order, d.reaped, want, zombie)
	}
}

// Children leaving while listings run: the kernel's walk of a children
// list skips the entry after one removed under it, so one listing alone can
// miss a child that is there throughout; childPIDs must not. One thread
// forks pairs — a child that is reaped soon (as the helper's reaper
// goroutine reaps the direct child) and, after it in that thread's list, a
// child that stays — while the test lists without pause.
func TestChildrenListingUnderChurn(t *testing.T) {
	needChildrenFiles(t)
	const rounds, pairs = 30, 8
	d := newDescendants(os.Getpid(), -1)
	rawMisses, unsettled, listings := 0, 0, 0
	for range rounds {
		ready := make(chan []int, 1)
		briefGone, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(finished)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var brief, stay []*exec.Cmd
			var pids []int
			for range pairs {
				for _, l := range []*[]*exec.Cmd{&brief, &stay} {
					if c := exec.Command("sleep", "60"); c.Start() == nil {
						*l = append(*l, c)
					}
				}
			}
			for _, c := range stay {
				pids = append(pids, c.Process.Pid)
			}
			ready <- pids
			for _, c := range brief {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
			close(briefGone)
			<-release
			for _, c := range stay {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}()
		stable := <-ready
		var failure string
		for done := len(stable) != pairs; !done && failure == ""; {
			select {
			case <-briefGone:
				done = true
			default:
			}
			listings++
			if raw, err := d.listChildren(nil); err == nil && !containsAll(raw, stable) {
				rawMisses++
			}
			switch pids, err := d.childPIDs(); {
			case errors.Is(err, errUnsettled):
				unsettled++ // the caller's full scan takes over: allowed, not a miss
			case err != nil:
				failure = err.Error()
			case !containsAll(pids, stable):
				failure = fmt.Sprintf("a child there throughout is missing: %v not all in %v", stable, pids)
			}
		}
		close(release)
		<-finished
		if len(stable) != pairs {
			t.Fatalf("started %d of %d stayers", len(stable), pairs)
		}
		if failure != "" {
			t.Fatal(failure)
		}
	}
	t.Logf("%d listings: single listings missed a stable child %d times; %d unsettled", listings, rawMisses, unsettled)
}

func containsAll(pids, want []int) bool {
	for _, p := range want {
		if !slices.Contains(pids, p) {
			return false
		}
	}
	return true
}

// poll, serve's tick: the first call scans; afterwards an orphan that exits
// is reaped by exact pid at a later tick, because its exit sends SIGCHLD.
func TestPollReapsExitedOrphan(t *testing.T) {
	subreaper(t)
	orphan := makeOrphan(t)
	d := newDescendants(os.Getpid(), -1)
	t.Cleanup(func() {
		if d.chld != nil {
			signal.Stop(d.chld)
		}
	})
	d.poll()
	if !slices.Equal(d.order, []int{orphan}) || len(d.reaped) != 0 {
		t.Fatalf("first poll: seen %v reaped %v", d.order, d.reaped)
	}
	if err := unix.Kill(orphan, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, fmt.Sprintf("exited orphan %d reaped by poll", orphan), func() error {
		if d.poll(); !slices.Contains(d.reaped, orphan) {
			return fmt.Errorf("seen %v reaped %v", d.order, d.reaped)
		}
		return nil
	})
	if _, _, ok := procStat(orphan); ok {
		t.Fatalf("orphan %d still in /proc after reaping", orphan)
	}
}

// An orphan that reparents without a SIGCHLD to the helper (its parent was
// not the helper's child) is still recorded at the cleanup's scan, and
// kill-descendants, which always scans, still kills and reaps it.
func TestKillAllFindsOrphanPollDidNotScan(t *testing.T) {
	subreaper(t)
	d := newDescendants(os.Getpid(), -1)
	t.Cleanup(func() {
		if d.chld != nil {
			signal.Stop(d.chld)
		}
	})
	d.poll() // the first poll: registers for SIGCHLD, finds nothing
	// A grandchild orphaned by its parent's exit: the parent is our child,
	// so its own exit is a SIGCHLD. A tick that already consumed it stands
	// here as a poll that no SIGCHLD reaches from now on: its channel is
	// swapped for one nothing signals. (Draining the real one could not
	// rule out a later SIGCHLD, from this or another child of the test
	// process, making poll scan.)
	orphan := makeOrphan(t)
	signal.Stop(d.chld)
	d.chld = make(chan os.Signal, 1)
	d.poll()
	if len(d.order) != 0 {
		t.Fatalf("poll scanned without a SIGCHLD: seen %v", d.order)
	}
	d.killAll(-1)
	if !slices.Equal(d.order, []int{orphan}) || !slices.Equal(d.killed, []int{orphan}) || !slices.Equal(d.reaped, []int{orphan}) {
		t.Fatalf("seen %v killed %v reaped %v, want [%d] each", d.order, d.killed, d.reaped, orphan)
	}
}

// BenchmarkScan measures the CPU (the thread's CPU clock: user and kernel)
// of one descendant listing, children files against the full /proc scan,
// in one run, and reports both and their ratio. "host" lists this host as
// it is; "host+128" adds 128 idle processes that are not ours, as helpers
// and their targets are to each other, to show what the full scan's cost
// grows with and the children files' does not.
//
//	go test -run '^$' -bench Scan -benchtime 2000x ./guardian/helper/
func BenchmarkScan(b *testing.B) {
	b.Run("host", func(b *testing.B) { benchScan(b, 0) })
	b.Run("host+128", func(b *testing.B) { benchScan(b, 128) })
}

func benchScan(b *testing.B, extra int) {
	if extra > 0 {
		// One shell, our child, and its sleepers: its children, not ours.
		sh := exec.Command("sh", "-c", fmt.Sprintf("for i in $(seq %d); do sleep 300 & done; echo up; wait", extra))
		sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := sh.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := sh.Start(); err != nil {
			b.Skipf("sh: %v", err)
		}
		defer func() {
			_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
			_ = sh.Wait()
		}()
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			b.Fatal(err)
		}
	}
	// The direct child, as in a real helper: listed, and left out.
	target, _, _ := directChild(b, "sleep")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := newDescendants(os.Getpid(), target.Process.Pid)
	var children, full time.Duration
	for b.Loop() {
		t0 := threadCPU()
		pids, err := d.childPIDs()
		if err != nil {
			b.Fatal(err)
		}
		a := d.find(pids)
		t1 := threadCPU()
		c := d.find(procPIDs())
		t2 := threadCPU()
		if len(a) != len(c) {
			b.Fatalf("children files found %v, full scan %v", a, c)
		}
		children, full = children+t1-t0, full+t2-t1
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64(children/n)/1e3, "children-cpu-µs/op")
	b.ReportMetric(float64(full/n)/1e3, "fullscan-cpu-µs/op")
	b.ReportMetric(float64(children)/float64(full), "cpu-ratio")
	b.ReportMetric(float64(len(procPIDs())), "procs")
}

// threadCPU is the calling thread's CPU time so far.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}
