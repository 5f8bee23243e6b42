//go:build linux

package guardian

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

func TestEchoCleanExitConfirmedWithoutSignals(t *testing.T) {
	s := launch(t, spec(t, "echo"))
	if s.HelperVersion() != wire.HelperVersion || !s.Subreaper() {
		t.Fatalf("helper version %q subreaper %v", s.HelperVersion(), s.Subreaper())
	}
	if !s.PIDFD() {
		t.Fatalf("helper does not signal through a pidfd")
	}
	// Newline-delimited JSON-RPC, as an MCP transport would send it.
	rw := s.Stream()
	br := bufio.NewReader(rw)
	for i := range 3 {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i)
		if _, err := io.WriteString(rw, msg); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != msg {
			t.Fatalf("echo: %q, %v", got, err)
		}
	}
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	rc := r.Receipt
	// Prompt without a clock: no signal was needed and the target's exit
	// came inside the EOF grace.
	if len(rc.Signals) != 0 {
		t.Fatalf("signals sent to a target that exits on EOF: %v", signals(rc))
	}
	if rc.ExitCode != 0 || rc.Signal != "" || rc.Trigger != "close" || r.CloseRequest != "control" {
		t.Fatalf("receipt %+v close %q", rc, r.CloseRequest)
	}
	if rc.Stdout.Forced || rc.Stderr.Forced {
		t.Fatalf("pipes force-closed: %+v %+v", rc.Stdout, rc.Stderr)
	}
	if rc.EOFGraceUsedNS < 0 || rc.EOFGraceUsedNS >= rc.EOFGraceNS {
		t.Fatalf("eof grace used %d of %d", rc.EOFGraceUsedNS, rc.EOFGraceNS)
	}
	if rc.ReapedAt.Before(rc.Stdin.ClosedAt) {
		t.Fatal("reaped before stdin was closed")
	}
	if r.HelperExitCode != 0 || r.TargetPID != s.TargetPID() || rc.HelperVersion != wire.HelperVersion {
		t.Fatalf("result %+v", r)
	}
	if running(s.TargetPID()) || running(s.HelperPID()) {
		t.Fatal("target or helper still running after Close")
	}

	// A repeated Close returns the stored result and does no second cleanup.
	again := closeWithin(t, s, time.Second)
	if again.Receipt != r.Receipt || again.HelperExitedAt != r.HelperExitedAt || !again.Confirmed {
		t.Fatal("second Close did not return the stored result")
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
}

func TestTermIgnoringTargetGetsKillAndConfirms(t *testing.T) {
	s := launch(t, spec(t, "ignoreterm"))
	readLine(t, s, "ready\n")
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	rc := r.Receipt
	if got := signals(rc); !slices.Equal(got, []string{"TERM", "KILL"}) {
		t.Fatalf("signals %v", got)
	}
	for _, sf := range rc.Signals {
		if !sf.Alive {
			t.Fatalf("signal %s not sent to a live child", sf.Signal)
		}
	}
	term, _ := rc.TermSentAt()
	kill, _ := rc.KillSentAt()
	if d := kill.Sub(term); d < 250*time.Millisecond {
		t.Fatalf("KILL only %s after TERM; term grace is 300ms", d)
	}
	if d := term.Sub(rc.Stdin.ClosedAt); d < 250*time.Millisecond {
		t.Fatalf("TERM only %s after stdin close; EOF grace is 300ms", d)
	}
	if rc.Signal != "KILL" || rc.ExitCode != -1 {
		t.Fatalf("wait status: exit %d signal %q", rc.ExitCode, rc.Signal)
	}
	if rc.EOFGraceUsedNS != rc.EOFGraceNS {
		t.Fatalf("eof grace used %d, granted %d", rc.EOFGraceUsedNS, rc.EOFGraceNS)
	}
}

func TestTargetEndingOnTermGetsNoKill(t *testing.T) {
	s := launch(t, spec(t, "sleep")) // ignores stdin EOF, dies on TERM
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	if got := signals(r.Receipt); !slices.Equal(got, []string{"TERM"}) {
		t.Fatalf("signals %v", got)
	}
	if r.Receipt.Signal != "TERM" {
		t.Fatalf("wait status signal %q", r.Receipt.Signal)
	}
}

func TestEarlyExitNonZeroStillConfirms(t *testing.T) {
	s := launch(t, spec(t, "exit", "3"))
	out, err := io.ReadAll(s.Stream())
	if err != nil || string(out) != "bye\n" {
		t.Fatalf("read %q, %v", out, err)
	}
	select {
	case <-s.Done():
	case <-time.After(testproc.HangBound):
		t.Fatal("Done not closed after the target exited")
	}
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	if r.Receipt.ExitCode != 3 || r.Receipt.Trigger != "target_exit" || r.CloseRequest != "none" || len(r.Receipt.Signals) != 0 {
		t.Fatalf("receipt %+v close %q", r.Receipt, r.CloseRequest)
	}
}

// orphanPID reads the "child PID" line of the orphan mode.
func orphanPID(t *testing.T, s *Session) int {
	t.Helper()
	line, err := bufio.NewReader(s.Stream()).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "child %d\n", &pid); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return pid
}

func TestOrphanHoldingStdoutIsBoundedAndReported(t *testing.T) {
	sp := spec(t, "orphan")
	s := launch(t, sp)
	orphan := orphanPID(t, s)
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })

	// Bounded without a clock: a close that waited for the orphan (which
	// holds stdout for good) would end only at the context's deadline,
	// unconfirmed; a confirmed one with stdout forced ended at the pipe
	// deadline.
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	rc := r.Receipt
	if !rc.Stdout.Forced {
		t.Fatalf("stdout should have been force-closed at the pipe deadline: %+v", rc.Stdout)
	}
	if !slices.Contains(rc.DescendantsSeen, orphan) {
		t.Fatalf("orphan %d not reported: seen %v", orphan, rc.DescendantsSeen)
	}
	if len(rc.DescendantsKilled) != 0 {
		t.Fatalf("descendants killed without being asked: %v", rc.DescendantsKilled)
	}
	if rc.ExitCode != 0 || len(rc.Signals) != 0 {
		t.Fatalf("target: exit %d signals %v", rc.ExitCode, signals(rc))
	}
	// Not asked to kill: the orphan outlives the session (outside the scope).
	if !running(orphan) {
		t.Fatal("orphan died although nobody asked")
	}
}

func TestOrphanKilledWhenAsked(t *testing.T) {
	sp := spec(t, "orphan")
	sp.KillDescendants = true
	s := launch(t, sp)
	orphan := orphanPID(t, s)
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })

	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	rc := r.Receipt
	if !slices.Contains(rc.DescendantsSeen, orphan) || !slices.Contains(rc.DescendantsKilled, orphan) || !slices.Contains(rc.DescendantsReaped, orphan) {
		t.Fatalf("orphan %d: seen %v killed %v reaped %v", orphan, rc.DescendantsSeen, rc.DescendantsKilled, rc.DescendantsReaped)
	}
	if rc.Stdout.Forced {
		t.Fatal("stdout should close by EOF once the orphan holding it is killed")
	}
	if running(orphan) {
		t.Fatal("orphan still running")
	}
}

func TestKillDescendantsControlDuringSession(t *testing.T) {
	s := launch(t, spec(t, "echo"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.KillDescendants(ctx); err != nil {
		t.Fatal(err)
	}
	// The control frame must not disturb the relay.
	if _, err := io.WriteString(s, "still here\n"); err != nil {
		t.Fatal(err)
	}
	readLine(t, s, "still here\n")
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	if len(r.Receipt.Faults) != 0 {
		t.Fatalf("faults %v", r.Receipt.Faults)
	}
}

func TestHelperKilledIsUnconfirmedAndTargetDies(t *testing.T) {
	s := launch(t, spec(t, "echo"))
	if _, err := io.WriteString(s, "ping\n"); err != nil {
		t.Fatal(err)
	}
	readLine(t, s, "ping\n")
	target := s.TargetPID()
	if err := syscall.Kill(s.HelperPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The stream reports the loss.
	if _, err := io.ReadAll(s.Stream()); !errors.Is(err, ErrHelperLost) {
		t.Fatalf("Read after helper loss: %v", err)
	}
	r := closeWithin(t, s, 5*time.Second)
	if r.Confirmed || r.Reason != ReasonHelperLost || !errors.Is(r.Err(), ErrHelperLost) {
		t.Fatalf("result: confirmed %v reason %q", r.Confirmed, r.Reason)
	}
	if r.HelperSignal != "KILL" || r.Receipt != nil {
		t.Fatalf("helper signal %q receipt %v", r.HelperSignal, r.Receipt)
	}
	// PR_SET_PDEATHSIG(SIGKILL) on the target.
	waitGone(t, target)
}

func TestHostKilledHelperCleansUpTarget(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hostModeEnv+"=1", "GUARDIAN_TEST_TARGET="+targetBin.Out, "GUARDIAN_TEST_HELPER="+helperBin.Out)
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
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("host: %q %v", line, err)
	}
	var helper, target int
	if _, err := fmt.Sscanf(line, "pids %d %d ready", &helper, &target); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("host said %q: %v", line, err)
	}
	if !running(target) || !running(helper) {
		t.Fatal("target or helper not running before the host dies")
	}
	if ppid, _, _ := procStat(target); ppid != helper {
		t.Fatalf("target's parent is %d, not the helper %d", ppid, helper)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// EOFGrace 100ms + TermGrace 100ms (ignored) + KILL.
	waitGone(t, target)
	waitGone(t, helper)
}

func TestDeadlineKillsHelperAndIsUnconfirmed(t *testing.T) {
	sp := spec(t, "ignoreterm")
	sp.EOFGrace, sp.TermGrace = 10*time.Second, 10*time.Second
	s := launch(t, sp)
	readLine(t, s, "ready\n")
	r := closeWithin(t, s, 300*time.Millisecond)
	// Close ended at its deadline, not after the graces: against this
	// target (it ignores stdin EOF and TERM) the helper can send its
	// receipt only once it has waited out the EOF grace and the TERM grace
	// and sent KILL, so a Close that overran its deadline to wait for them
	// would hold that receipt (and be confirmed). It holds none, and the
	// helper died of the host's KILL, not on its own after cleanup.
	if r.Receipt != nil {
		t.Fatalf("Close waited for the helper's receipt (signals %v): it overran its deadline", signals(r.Receipt))
	}
	if !r.HelperExited || r.HelperSignal != "KILL" {
		t.Fatalf("helper exited %v by signal %q, want killed by the host", r.HelperExited, r.HelperSignal)
	}
	if r.Confirmed || r.Reason != ReasonDeadline || !r.KilledHelper || !errors.Is(r.Err(), ErrDeadline) {
		t.Fatalf("result: confirmed %v reason %q killed %v", r.Confirmed, r.Reason, r.KilledHelper)
	}
	waitGone(t, r.TargetPID)
}

func TestFloodingTargetCleansUp(t *testing.T) {
	s := launch(t, spec(t, "flood"))
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatal(err)
	}
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	if got := signals(r.Receipt); len(got) == 0 || got[0] != "TERM" {
		t.Fatalf("signals %v", got)
	}
	if r.StdoutBytes < int64(len(buf)) {
		t.Fatalf("stdout bytes %d", r.StdoutBytes)
	}
}

func TestGiantOutputIsSplitIntoBoundedFrames(t *testing.T) {
	const n = 3 << 20 // one "message" three times the frame bound
	s := launch(t, spec(t, "giant", fmt.Sprint(n)))
	got := make([]byte, n)
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("g"), n)
	want[n-1] = '\n'
	if !bytes.Equal(got, want) {
		t.Fatal("giant line corrupted")
	}
	// And a large write towards the target comes back whole.
	big := bytes.Repeat([]byte("0123456789abcdef"), wire.MaxFrameLen/8)
	go func() { _, _ = s.Write(big) }()
	back := make([]byte, len(big))
	if _, err := io.ReadFull(s, back); err != nil || !bytes.Equal(back, big) {
		t.Fatalf("echo of %d bytes: %v", len(big), err)
	}
	requireConfirmed(t, closeWithin(t, s, 5*time.Second))
}

func TestStderrIsRelayed(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	sp := spec(t, "stderr")
	sp.Stderr = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	s := launch(t, sp)
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	mu.Lock()
	defer mu.Unlock()
	if buf.String() != "to-stderr\n" || r.StderrBytes != int64(buf.Len()) {
		t.Fatalf("stderr %q (%d bytes counted)", buf.String(), r.StderrBytes)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestMalformedHostFrameEndsSessionWithRecordedFact(t *testing.T) {
	s := launch(t, spec(t, "echo"))
	// An oversized header on the helper's stdin: the helper must refuse it
	// without allocating, record it, and clean up.
	s.writeMu.Lock()
	_, err := s.toHelper.Write(binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF))
	s.writeMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(testproc.HangBound):
		t.Fatal("helper did not end the session")
	}
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r) // the cleanup facts are real
	rc := r.Receipt
	if rc.Trigger != "protocol_fault" || len(rc.Faults) == 0 || !strings.Contains(rc.Faults[0], "frame") {
		t.Fatalf("trigger %q faults %q", rc.Trigger, rc.Faults)
	}
}

func TestStuckStdinFallsBackToSignalledClose(t *testing.T) {
	// ignoreterm reads stdin; sleep does not. With a target that never
	// reads, the helper's stdin queue and both pipes fill, so the close
	// control frame cannot get through and the host asks with SIGTERM.
	s := launch(t, spec(t, "sleep"))
	writeDone := make(chan error, 1)
	go func() {
		_, err := s.Write(make([]byte, 8<<20))
		writeDone <- err
	}()
	waitStdinStuck(t, s)
	r := closeWithin(t, s, 5*time.Second)
	if err := <-writeDone; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Write returned %v, want ErrClosed", err)
	}
	requireConfirmed(t, r)
	if r.CloseRequest != "signal" || r.Receipt.Trigger != wire.TriggerSignal {
		t.Fatalf("close request %q trigger %q (faults %q)", r.CloseRequest, r.Receipt.Trigger, r.Receipt.Faults)
	}
}

func TestConcurrentCloseRunsCleanupOnce(t *testing.T) {
	s := launch(t, spec(t, "echo"))
	var wg sync.WaitGroup
	results := make([]CleanupResult, 4)
	for i := range results {
		wg.Go(func() { results[i] = closeWithin(t, s, 5*time.Second) })
	}
	wg.Wait()
	for _, r := range results {
		requireConfirmed(t, r)
		if r.Receipt != results[0].Receipt {
			t.Fatal("concurrent Close calls saw different results")
		}
	}
}

// ---- launch failures: typed errors, and no target ever started ----

func markerSpec(t *testing.T) (Spec, string) {
	marker := filepath.Join(t.TempDir(), "started")
	return spec(t, "marker", marker), marker
}

// requireNoMarker proves no target was started for this Launch. A target the
// host started itself (the fallback that must never happen) would be a
// child of this test process from the moment Launch started it until it is
// reaped, exited or not, so the check needs no waiting; a marker on disk
// would show a target that ran anyway.
func requireNoMarker(t *testing.T, marker string) {
	t.Helper()
	for _, pid := range childrenOf(os.Getpid()) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == filepath.Base(targetBin.Out) {
			t.Fatalf("a target (pid %d) was started by the host", pid)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target was started (marker %v)", err)
	}
}

func TestMarkerProvesLaunch(t *testing.T) {
	// The control for the tests below: with a good helper the marker appears.
	sp, marker := markerSpec(t)
	s := launch(t, sp)
	requireConfirmed(t, closeWithin(t, s, 5*time.Second))
	if _, err := os.Stat(marker); err != nil {
		t.Fatal(err)
	}
}

func TestHelperMissingIsTypedAndStartsNothing(t *testing.T) {
	sp, marker := markerSpec(t)
	sp.HelperPath = filepath.Join(t.TempDir(), "no-such-helper")
	_, err := Launch(context.Background(), sp)
	var he *HelperError
	if !errors.Is(err, ErrHelperNotFound) || !errors.As(err, &he) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
	requireNoMarker(t, marker)

	notExec := filepath.Join(t.TempDir(), HelperName)
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sp.HelperPath = notExec
	if _, err := Launch(context.Background(), sp); !errors.Is(err, ErrHelperNotFound) {
		t.Fatalf("non-executable helper: %v", err)
	}
	requireNoMarker(t, marker)
}

func TestDefaultHelperLocationIsBesideExecutable(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, err = findHelper("")
	want := filepath.Join(filepath.Dir(exe), HelperName)
	var he *HelperError
	if !errors.Is(err, ErrHelperNotFound) || !errors.As(err, &he) || he.Op != "find" || he.Path != want {
		t.Fatalf("findHelper(\"\"): %v (want path %s)", err, want)
	}
}

func TestWrongHelperVersionIsTypedAndStartsNothing(t *testing.T) {
	sp, marker := markerSpec(t)
	sp.HelperPath = fakeBin.Out
	t.Setenv("LEASELEDGER_FAKE_HELPER", "wrongversion")
	_, err := Launch(context.Background(), sp)
	var he *HelperError
	if !errors.Is(err, ErrHelperVersion) || !errors.As(err, &he) || he.Op != "hello" || he.Protocol != 99 || he.Version != "leaseledger-guardian/9.9.9" {
		t.Fatalf("got %v", err)
	}
	requireNoMarker(t, marker)
}

func TestUnsupportedHelpersAreTypedAndStartNothing(t *testing.T) {
	for _, mode := range []string{"garbage", "silent", "exit"} {
		t.Run(mode, func(t *testing.T) {
			sp, marker := markerSpec(t)
			sp.HelperPath = fakeBin.Out
			sp.HelloTimeout = 300 * time.Millisecond
			t.Setenv("LEASELEDGER_FAKE_HELPER", mode)
			// A Launch that did not bound the hello by HelloTimeout
			// would wait on the silent helper until this context ends,
			// and its error would then carry the context's.
			ctx, cancel := context.WithTimeout(context.Background(), testproc.HangBound)
			defer cancel()
			_, err := Launch(ctx, sp)
			if !errors.Is(err, ErrHelperUnsupported) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v", err)
			}
			requireNoMarker(t, marker)
		})
	}
}

func TestLaunchHonoursContext(t *testing.T) {
	sp, marker := markerSpec(t)
	sp.HelperPath = fakeBin.Out
	t.Setenv("LEASELEDGER_FAKE_HELPER", "silent")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Launch(ctx, sp)
	if !errors.Is(err, ErrHelperUnsupported) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	requireNoMarker(t, marker)
}

func TestTargetStartFailureIsTyped(t *testing.T) {
	sp := spec(t)
	sp.Command = filepath.Join(t.TempDir(), "no-such-target")
	if _, err := Launch(context.Background(), sp); !errors.Is(err, ErrTargetStart) {
		t.Fatalf("got %v", err)
	}
}

func TestInvalidSpec(t *testing.T) {
	sp := spec(t, "echo")
	sp.ActivationID = "bad id/with.dots"
	if _, err := Launch(context.Background(), sp); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("got %v", err)
	}
	sp = spec(t, "echo")
	sp.EOFGrace = -time.Second
	if _, err := Launch(context.Background(), sp); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("got %v", err)
	}
}

func TestReceiptLostIsUnconfirmed(t *testing.T) {
	sp := spec(t, "echo")
	sp.HelperPath = fakeBin.Out
	t.Setenv("LEASELEDGER_FAKE_HELPER", "noreceipt")
	s := launch(t, sp)
	r := closeWithin(t, s, 5*time.Second)
	if r.Confirmed || r.Reason != ReasonReceiptLost || r.HelperExitCode != 0 || !errors.Is(r.Err(), ErrReceiptLost) {
		t.Fatalf("result: confirmed %v reason %q helper exit %d", r.Confirmed, r.Reason, r.HelperExitCode)
	}
}

func TestPrematurePipeClosureIsUnconfirmed(t *testing.T) {
	sp := spec(t, "echo")
	sp.HelperPath = fakeBin.Out
	t.Setenv("LEASELEDGER_FAKE_HELPER", "closepipes")
	s := launch(t, sp)
	// The fake closes its stdout at the close frame and runs on until
	// SIGTERM: only once the host has recorded the stream's end (with the
	// helper still running) is it told to exit, cleanly.
	testHookStreamEnded = func() { _ = syscall.Kill(s.HelperPID(), syscall.SIGTERM) }
	t.Cleanup(func() { testHookStreamEnded = nil })
	r := closeWithin(t, s, 5*time.Second)
	if r.Confirmed || r.Reason != ReasonPipesClosed || !errors.Is(r.Err(), ErrPipesClosed) || r.HelperExitCode != 0 {
		t.Fatalf("result: confirmed %v reason %q helper exit %d faults %q", r.Confirmed, r.Reason, r.HelperExitCode, r.Faults)
	}
}

func readLine(t *testing.T, r io.Reader, want string) {
	t.Helper()
	// Byte at a time so nothing beyond the line is consumed.
	var got []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(got, []byte("\n")) {
		if _, err := r.Read(b); err != nil {
			t.Fatalf("reading %q: got %q, %v", want, got, err)
		}
		got = append(got, b[0])
	}
	if string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
