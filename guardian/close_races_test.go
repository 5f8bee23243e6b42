//go:build linux

package guardian

import (
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// A target that never reads stdin, and a host that relayed more than the
// target's stdin pipe and the helper's stdin queue hold but less than would
// also fill the host→helper pipe: the close frame still fits into that pipe,
// so the host has no reason to fall back to SIGTERM. The helper must see the
// frame anyway (it used to block on its full stdin queue, never read it, and
// Close burnt its whole budget).
//
// No wait is needed before Close: whenever the helper gets there, the
// backlog ahead of the close frame is larger than the target's stdin pipe
// and the helper's queue together, so the helper reaches a full queue
// before the close frame either way. (Whether it is already blocked when
// the host hangs up, or sees the hang-up first, are the two paths of the
// same fix; the helper package's tests drive the blocked one directly.)
func TestUnreadStdinBacklogStillClosesByControlFrame(t *testing.T) {
	sp := spec(t, "sleep") // never reads stdin; dies on TERM
	s := launch(t, sp)
	// Target stdin pipe (1 MiB) + helper queue (16 × 64 KiB) + chunks in
	// hand, plus about half of the 1 MiB host→helper pipe.
	const n = 2<<20 + 512<<10
	wrote := make(chan error, 1)
	go func() {
		_, err := s.Write(make([]byte, n))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testproc.HangBound):
		t.Fatal("writing the backlog did not complete: pipes smaller than this test assumes")
	}

	// The close's context is the budget: a close that waited on the
	// backlog (which the target never drains) would reach it and be
	// unconfirmed.
	r := closeWithin(t, s, sp.CleanupBudget())
	requireConfirmed(t, r)
	rc := r.Receipt
	if r.CloseRequest != "control" || rc.Trigger != "close" {
		t.Fatalf("close request %q trigger %q (faults %q)", r.CloseRequest, rc.Trigger, r.Faults)
	}
	// The EOF grace ran from stdin's close and ended in a TERM (the
	// target dies on it): the backlog held up neither.
	if term, ok := rc.TermSentAt(); !ok || term.Before(rc.Stdin.ClosedAt) {
		t.Fatalf("TERM %v (sent %v) after stdin close %v", term, ok, rc.Stdin.ClosedAt)
	}
	// What the target never took is a recorded fact, not silently lost.
	if rc.StdinDroppedBytes <= 0 || rc.StdinDroppedBytes > r.StdinBytes {
		t.Fatalf("stdin dropped %d of %d relayed", rc.StdinDroppedBytes, r.StdinBytes)
	}
}

// Launch's context cancelled just as the handshake completes: the cancel
// callback must not leave a past deadline on the helper pipes of a session
// that Launch returns (its reader then failed at once, receipt lost).
func TestLaunchCancelledAsHandshakeEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel as the handshake ends, and go on only once the cancellation
	// callback is running: Launch must then wait for it before it clears
	// the deadlines.
	fired := make(chan struct{})
	testHookLaunchCancelled = func() { close(fired) }
	testHookHandshakeDone = func() {
		cancel()
		<-fired
	}
	t.Cleanup(func() { testHookHandshakeDone, testHookLaunchCancelled = nil, nil })
	s, err := Launch(ctx, spec(t, "echo"))
	testHookHandshakeDone, testHookLaunchCancelled = nil, nil
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { closeWithin(t, s, 5*time.Second) })
	if _, err := io.WriteString(s, "after launch\n"); err != nil {
		t.Fatal(err)
	}
	readLine(t, s, "after launch\n")
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	if r.CloseRequest != "control" || len(r.Faults) != 0 {
		t.Fatalf("close request %q faults %q", r.CloseRequest, r.Faults)
	}
}

// Close starting while a control frame is being written: control's own
// deadline handling must not wipe the bound Close set for its close frame.
// Otherwise, with the helper's stdin pipe full, the close frame is written
// without a deadline and Close blocks far past its context.
func TestCloseDuringControlWriteKeepsItsBound(t *testing.T) {
	s := launch(t, spec(t, "sleep")) // never reads stdin
	closed := make(chan CleanupResult, 1)
	bound := make(chan struct{})
	testHookCloseBound = func() { close(bound) }
	testHookControlWritten = func() {
		testHookControlWritten = nil
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			closed <- s.Close(ctx)
		}()
		// Close sets its write bound, then waits for the write lock we hold.
		<-bound
		// Fill the host→helper pipe with whole frames (PIPE_BUF bytes: each
		// write is atomic) until Close's bound stops the writes.
		chunk := make([]byte, 4096-wire.HeaderLen)
		for s.fw.WriteFrame(wire.FrameStdin, chunk) == nil {
		}
	}
	t.Cleanup(func() { testHookControlWritten, testHookCloseBound = nil, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.KillDescendants(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-closed:
		requireConfirmed(t, r)
		if r.CloseRequest != "signal" {
			t.Fatalf("close request %q, want signal (the frame could not be delivered)", r.CloseRequest)
		}
	case <-time.After(testproc.HangBound): // without its bound, Close blocks for good
		_ = syscall.Kill(s.HelperPID(), syscall.SIGKILL) // unblock the stuck write
		<-closed
		t.Fatal("Close blocked past its context: its close frame was written without a deadline")
	}
}

// The host's defence: a helper that got the close frame but does not act on
// it is also sent SIGTERM once the EOF grace (plus a margin) has passed,
// rather than being SIGKILLed at the deadline with the result unconfirmed.
func TestCloseFrameNotActedOnGetsLateSIGTERM(t *testing.T) {
	sp := spec(t, "echo")
	sp.HelperPath = fakeBin.Out
	t.Setenv("LEASELEDGER_FAKE_HELPER", "deafclose")
	s := launch(t, sp)
	start := time.Now()
	r := closeWithin(t, s, 5*time.Second)
	requireConfirmed(t, r)
	if r.CloseRequest != "signal" || r.KilledHelper || len(r.Faults) != 1 || !strings.Contains(r.Faults[0], "not acted on") {
		t.Fatalf("close request %q killed %v faults %q", r.CloseRequest, r.KilledHelper, r.Faults)
	}
	// Not before the EOF grace had passed (a lower bound: slowness cannot
	// break it). A TERM that never came would leave the helper to the
	// deadline's SIGKILL, which KilledHelper above rules out.
	if d := time.Since(start); d < sp.EOFGrace {
		t.Fatalf("close took %s, less than the EOF grace", d)
	}
}
