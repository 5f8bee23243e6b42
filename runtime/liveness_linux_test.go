//go:build linux

package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// statLine builds a stat line with the given command, state, flags and
// pending signals (other fields zero).
func statLine(comm string, state byte, flags, sig uint64) []byte {
	f := make([]string, 52-2)
	for i := range f {
		f[i] = "0"
	}
	f[0] = string(state)
	f[statFlagsAt] = strconv.FormatUint(flags, 10)
	f[statSignalAt] = strconv.FormatUint(sig, 10)
	return []byte("42 (" + comm + ") " + strings.Join(f, " ") + "\n")
}

// The stat tier decides only what it can read for certain and leaves the
// rest to status.
func TestStatVerdict(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want verdict
	}{
		{"sleeping", statLine("node", 'S', 0x400000, 0), verdictAlive},
		{"sleeping, odd name", statLine("a) (S 1 2", 'S', 0, 0), verdictAlive},
		{"sigkill pending", statLine("node", 'S', 0, sigkillBit), verdictDying},
		{"other signal pending", statLine("node", 'S', 0, 1<<(15-1)), verdictAlive},
		{"exiting on its own", statLine("node", 'R', pfExiting, 0), verdictUnsure},
		{"exiting, sleeping", statLine("node", 'S', pfExiting, 0), verdictUnsure},
		{"exiting, sigkill pending", statLine("node", 'R', pfExiting, sigkillBit), verdictDying},
		{"zombie", statLine("node", 'Z', 0, 0), verdictDying},
		{"dead", statLine("node", 'X', 0, 0), verdictDying},
		{"running", statLine("node", 'R', 0, 0), verdictUnsure},
		{"disk sleep", statLine("node", 'D', 0, 0), verdictUnsure},
		{"stopped", statLine("node", 'T', 0, 0), verdictUnsure},
		{"truncated", []byte("42 (node) S 1 2 3"), verdictUnsure},
		{"garbage", []byte("nonsense"), verdictUnsure},
		{"empty", nil, verdictUnsure},
	} {
		if got := statVerdict(c.b); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
}

// Wherever the stat tier decides, it says what the status probe (the
// reference) says: checked on every process of the machine, each stat
// read bracketed by two status reads that agree (dying never ends, so the
// stat read between them must agree too).
func TestProcProbeTiersAgree(t *testing.T) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	decided := 0
	for _, d := range dirs {
		st1, err1 := os.ReadFile(d + "/status")
		sb, err2 := os.ReadFile(d + "/stat")
		st2, err3 := os.ReadFile(d + "/status")
		if err1 != nil || err2 != nil || err3 != nil {
			continue // gone meanwhile, or not ours to read
		}
		ref := statusSaysDying(st1)
		if ref != statusSaysDying(st2) {
			continue
		}
		switch statVerdict(sb) {
		case verdictDying:
			decided++
			if !ref {
				t.Errorf("%s: stat says dying, status alive\nstat: %s\nstatus: %s", d, sb, st1)
			}
		case verdictAlive:
			decided++
			if ref {
				t.Errorf("%s: stat says alive, status dying\nstat: %s\nstatus: %s", d, sb, st1)
			}
		}
	}
	if decided == 0 {
		t.Fatal("the stat tier decided for no process")
	}
}

// A killed child is seen dying by the very next probe, from the moment
// kill(2) returns (SIGKILL pending, exiting, zombie: never "alive"), for a
// multi-threaded target (the go-sdk test server); an idle one is alive
// and read through stat alone.
func TestProcProbeSeesKillAtOnce(t *testing.T) {
	const rounds = 30
	for i := range rounds {
		cmd := idleChild(t)
		var p procProbe
		// Idle: its main thread sleeps once it has started.
		deadline := time.Now().Add(10 * time.Second)
		for {
			before := p.statusReads
			if p.dying(cmd.Process.Pid, os.Getpid()) {
				t.Fatalf("round %d: a live idle child probed dying", i)
			}
			if p.statusReads == before {
				break // decided by stat alone
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the idle child's stat never decided (%d status reads)", i, p.statusReads)
			}
			time.Sleep(time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if !p.dying(cmd.Process.Pid, os.Getpid()) {
			t.Fatalf("round %d: probed alive right after SIGKILL", i)
		}
		_ = cmd.Wait()
		if !p.dying(cmd.Process.Pid, os.Getpid()) {
			t.Fatalf("round %d: probed alive after the reap", i)
		}
		p.close()
	}
}

// A pid that is not the helper's child when the probe opens it (the target
// was reaped and its pid reused) is gone, not pinned: probing pid 1 as if
// this test process were its parent sees it dying, with both files opened
// together on that first probe.
func TestProcProbeRejectsAnotherParent(t *testing.T) {
	var p procProbe
	defer p.close()
	if !p.dying(1, os.Getpid()) {
		t.Fatal("a process with another parent probed alive")
	}
	cmd := idleChild(t)
	var q procProbe
	defer q.close()
	if q.dying(cmd.Process.Pid, os.Getpid()) {
		t.Fatal("our own live child probed dying")
	}
	if q.stat == nil || q.status == nil {
		t.Fatal("the first probe did not open both stat and status")
	}
}

// BenchmarkProcProbe compares, in one run, the admission's liveness probe
// before (status alone, the reference) and now (stat, status only when
// stat cannot decide) on an idle multi-threaded target (the go-sdk test
// server), each through its kept descriptor.
//
//	go test -run '^$' -bench ProcProbe ./runtime/
func BenchmarkProcProbe(b *testing.B) {
	pid := idleChild(b).Process.Pid
	var tiered, ref procProbe
	defer tiered.close()
	defer ref.close()
	if _, ok, _ := ref.readStat(pid, os.Getpid()); !ok {
		b.Fatal("cannot open the target's /proc files")
	}
	refDying := func() bool {
		ref.mu.Lock()
		defer ref.mu.Unlock()
		return ref.statusDying()
	}
	time.Sleep(100 * time.Millisecond) // let it settle into its idle sleep
	const chunk = 500
	var tRef, tTier time.Duration
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		t0 := time.Now()
		for range n {
			if refDying() {
				b.Fatal("reference probe: dying")
			}
		}
		t1 := time.Now()
		for range n {
			if tiered.dying(pid, os.Getpid()) {
				b.Fatal("tiered probe: dying")
			}
		}
		tRef += t1.Sub(t0)
		tTier += time.Since(t1)
	}
	b.ReportMetric(float64(tRef.Nanoseconds())/float64(b.N), "status-ns")
	b.ReportMetric(float64(tTier.Nanoseconds())/float64(b.N), "tiered-ns")
	b.ReportMetric(float64(tTier)/float64(tRef), "ratio")
	b.ReportMetric(float64(tiered.statusReads)/float64(b.N), "status-fallbacks/op")
	b.ReportMetric(0, "ns/op")
}

// Concurrent callers share a read only when it started after they arrived:
// callers arriving while a read is held in progress (here: it read the
// target alive, then the target is killed) wait, and one further read,
// made after the kill, answers all of them (dying); the held read still
// answers its own caller with what it read (alive).
func TestProcProbeSharesOnlyLaterReads(t *testing.T) {
	const waiters = 3
	cmd := idleChild(t)
	pid, me := cmd.Process.Pid, os.Getpid()
	var p procProbe
	defer p.close()
	// Wait until the idle child is read alive (through stat or status).
	for deadline := time.Now().Add(10 * time.Second); p.dying(pid, me); {
		if time.Now().After(deadline) {
			t.Fatal("a live child probed dying")
		}
		time.Sleep(time.Millisecond)
	}
	held, release := make(chan struct{}), make(chan struct{})
	reads := 0
	p.afterRead = func() {
		reads++ // one read at a time: no race
		if reads == 1 {
			close(held)
			<-release
		}
	}
	first := make(chan bool)
	go func() { first <- p.dying(pid, me) }()
	select { // the first read is done (alive) and held before publishing
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the caller made no read")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	later := make(chan bool, waiters)
	for range waiters {
		go func() { later <- p.dying(pid, me) }()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		p.share.Lock()
		n := p.waiting
		p.share.Unlock()
		if n == waiters {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers waiting", n, waiters)
		}
	}
	close(release)
	if <-first {
		t.Fatal("the held read's caller got a verdict it did not read")
	}
	for range waiters {
		if !<-later {
			t.Fatal("a caller that arrived after the kill got the verdict of a read started before it")
		}
	}
	if reads != 2 {
		t.Fatalf("%d reads for 1 + %d callers, want 2 (the held one, one shared)", reads, waiters)
	}
}

// BenchmarkProcProbeConcurrent compares, in one run, 16 admissions at once
// probing one target with a read each (read1, as before reads were shared)
// and through dying (reads shared with callers that arrived before each
// read started), on an idle multi-threaded target (the go-sdk test
// server); reads/op is how many reads the shared side made per probe.
//
//	go test -run '^$' -bench ProcProbeConcurrent ./runtime/
func BenchmarkProcProbeConcurrent(b *testing.B) {
	const callers = 16
	pid, me := idleChild(b).Process.Pid, os.Getpid()
	var shared, own procProbe
	defer shared.close()
	defer own.close()
	reads := 0
	shared.afterRead = func() { reads++ }
	time.Sleep(100 * time.Millisecond) // let it settle into its idle sleep
	run := func(n int, probe func() bool) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		var dying atomic.Bool
		start := time.Now()
		for range callers {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if probe() {
						dying.Store(true)
					}
				}
			})
		}
		wg.Wait()
		if dying.Load() {
			b.Fatal("a live idle child probed dying")
		}
		return time.Since(start)
	}
	ownProbe := func() bool { return own.read1(pid, me) }
	sharedProbe := func() bool { return shared.dying(pid, me) }
	run(callers, ownProbe)
	run(callers, sharedProbe)
	reads = 0
	b.ResetTimer()
	const chunk = 2000
	var tOwn, tShared time.Duration
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		tOwn += run(n, ownProbe)
		tShared += run(n, sharedProbe)
	}
	b.StopTimer()
	b.ReportMetric(float64(tOwn.Nanoseconds())/float64(b.N), "own-read-ns")
	b.ReportMetric(float64(tShared.Nanoseconds())/float64(b.N), "shared-ns")
	b.ReportMetric(float64(tShared)/float64(tOwn), "ratio")
	b.ReportMetric(float64(reads)/float64(b.N), "reads/op")
	b.ReportMetric(0, "ns/op")
}

// idleChild starts the go-sdk test server (multi-threaded, idle until it
// reads a request on its stdin); it is killed and reaped when tb ends.
func idleChild(tb testing.TB) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(testserverBin.Out)
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}
