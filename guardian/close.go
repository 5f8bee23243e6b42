package guardian

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// controlWriteBound bounds delivering the close control frame. If the frame
// cannot be written by then (the helper is not reading because the target is
// not reading its stdin), the host asks out of band with SIGTERM.
const controlWriteBound = 250 * time.Millisecond

// lateTermMargin is added to the EOF grace to decide when a helper that was
// sent the close frame but has not finished is also sent SIGTERM (see
// Close). The helper normally sees the frame at once; the signal is a
// defence in case it did not, and changes nothing if cleanup already runs.
const lateTermMargin = 500 * time.Millisecond

// How cleanup was requested (CleanupResult.CloseRequest).
const (
	closeByControl = "control"
	closeBySignal  = "signal"
	closeByNone    = "none"
)

// testHookCloseBound runs in Close once the close frame's write bound is
// set, before Close waits for writeMu (see testHookHandshakeDone).
var testHookCloseBound func()

// Close runs the cleanup sequence through the helper and returns the
// result. ctx is the one budget for the whole cleanup; give it at least
// Spec.CleanupBudget(). When it ends first the helper is SIGKILLed (on
// Linux its target follows by parent-death signal) and the result is
// unconfirmed with ReasonDeadline, keeping the facts gathered so far.
//
// Close is idempotent: later calls return the stored result without a
// second cleanup (a call racing the first waits for it, within its own ctx).
// When Close returns, no goroutine of the session remains.
func (s *Session) Close(ctx context.Context) CleanupResult {
	if !s.closeStarted.CompareAndSwap(false, true) {
		select {
		case <-s.closeDone:
			return s.result
		case <-ctx.Done():
			r := s.snapshot(false)
			r.Confirmed, r.Reason = false, ReasonDeadline
			r.Faults = append(r.Faults, "close in progress by another caller")
			return r
		}
	}

	s.detach()
	s.requestClose(ctx)
	deadlineHit := s.awaitHelper(ctx)
	killed := false
	if deadlineHit {
		// Out of budget: end the helper; on Linux the target's
		// parent-death signal (SIGKILL) ends the target with it (macOS has
		// none: the target is left the EOF on its stdin, see
		// docs/guardian.md).
		killed = s.proc.Signal(syscall.SIGKILL) == nil
	}
	<-s.waitDone
	// The helper is gone, so its stdout write end is closed and the reader
	// sees EOF after any buffered frames. Closing our end is the backstop.
	select {
	case <-s.readerDone:
	case <-time.After(time.Second):
		s.fault(ReasonPipesClosed, "helper stdout still open after helper exit; closed by host")
		_ = s.fromHelper.Close()
		<-s.readerDone
	}
	r := s.snapshot(deadlineHit)
	r.KilledHelper = killed
	closeFiles(s.toHelper, s.fromHelper)
	s.result = r
	close(s.closeDone)
	return r
}

// awaitHelper waits for the end of the helper's frame stream and its exit,
// within ctx; it reports whether ctx ended first.
//
// Defence: if the helper got the close frame but has not finished its EOF
// grace (plus a margin) after it, it is also sent SIGTERM, which it treats
// like close. A helper already cleaning up ignores it; one that somehow did
// not act on the frame starts cleanup now instead of at the deadline.
func (s *Session) awaitHelper(ctx context.Context) (deadlineHit bool) {
	var lateTerm <-chan time.Time
	s.mu.Lock()
	if s.closeRequest == closeByControl {
		t := time.NewTimer(s.spec.EOFGrace + lateTermMargin)
		defer t.Stop()
		lateTerm = t.C
	}
	s.mu.Unlock()
	for {
		select {
		case <-s.readerDone:
			select {
			case <-s.waitDone:
				return false
			case <-ctx.Done():
				return true
			}
		case <-lateTerm:
			lateTerm = nil
			if s.proc.Signal(syscall.SIGTERM) == nil {
				s.mu.Lock()
				s.lateTerm = true
				s.mu.Unlock()
			}
		case <-ctx.Done():
			return true
		}
	}
}

// requestClose asks the helper to start cleanup: a control frame when it can
// be delivered promptly, else SIGTERM (which the helper treats the same).
func (s *Session) requestClose(ctx context.Context) {
	select {
	case <-s.readerDone:
		s.setCloseRequest(closeByNone) // the session already ended
		closeFiles(s.toHelper)
		return
	default:
	}
	bound := time.Now().Add(controlWriteBound)
	if d, ok := ctx.Deadline(); ok && d.Before(bound) {
		bound = d
	}
	// Also unblocks a Write or control frame stuck on a full pipe, so we can
	// get the lock; nobody can move this deadline any more.
	s.setCloseBound(bound)
	if testHookCloseBound != nil {
		testHookCloseBound()
	}
	s.writeMu.Lock()
	sent := false
	if !s.streamCorrupt {
		if err := s.fw.WriteFrame(wire.FrameControl, []byte{wire.ControlClose}); err == nil {
			sent = true
		} else {
			s.streamCorrupt = true
		}
	}
	s.writeMu.Unlock()
	switch {
	case sent:
		s.setCloseRequest(closeByControl)
	case s.proc.Signal(syscall.SIGTERM) == nil:
		s.setCloseRequest(closeBySignal)
		s.mu.Lock()
		s.faults = append(s.faults, "close control frame not deliverable; sent SIGTERM to the helper")
		s.mu.Unlock()
		// Keep the helper's stdin open until it exits (Close closes it
		// then). The write cut short above can leave a partial frame, and
		// EOF after it reads as a protocol fault; the helper ranks the
		// signal higher only when both are pending at once, but a signal
		// reaches its channel asynchronously and can come second. Without
		// the EOF the signal is the only request the helper sees.
		return
	default:
		s.setCloseRequest(closeByNone)
	}
	// EOF on the helper's stdin: nothing more will come from us. The
	// helper also watches for this hang-up while a target that does not
	// read its stdin keeps the helper's stdin queue full, so it reads on to
	// the close frame instead of waiting on the queue.
	closeFiles(s.toHelper)
}

func (s *Session) setCloseRequest(how string) {
	s.mu.Lock()
	s.closeRequest = how
	s.mu.Unlock()
}

// snapshot assembles the result from the facts gathered so far and decides
// confirmation.
func (s *Session) snapshot(deadlineHit bool) CleanupResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := CleanupResult{
		ActivationID: s.spec.ActivationID, HelperPath: s.helperPath, HelperVersion: s.hello.Version,
		HelperPID: s.proc.Pid, TargetPID: s.started.TargetPID, HelperExitCode: -1,
		CloseRequest: s.closeRequest,
		StdinBytes:   s.stdinBytes, StdoutBytes: s.stdoutBytes, StdoutDropped: s.stdoutDropped, StderrBytes: s.stderrBytes,
		Faults: append([]string(nil), s.faults...),
	}
	if s.receipt != nil {
		rc := *s.receipt
		r.Receipt, r.ReceiptAt = &rc, s.receiptAt
		if s.lateTerm && rc.Trigger == wire.TriggerSignal {
			// The frame was written but the helper never acted on it; the
			// late SIGTERM is what started the cleanup.
			r.CloseRequest = closeBySignal
			r.Faults = append(r.Faults, "close control frame written but not acted on; SIGTERM sent to the helper after the EOF grace")
		}
	}
	helperOK := false
	if s.helperState != nil {
		r.HelperExited, r.HelperExitedAt = true, s.helperExitAt
		if ws, ok := s.helperState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.HelperSignal = wire.SignalName(ws.Signal())
		} else {
			r.HelperExitCode = s.helperState.ExitCode()
			helperOK = r.HelperExitCode == 0
		}
	} else if s.helperWaitErr != nil {
		r.Faults = append(r.Faults, fmt.Sprintf("waiting for helper: %v", s.helperWaitErr))
	}

	receiptOK := false
	if s.receipt != nil {
		switch {
		case s.receipt.ActivationID != s.spec.ActivationID || s.receipt.TargetPID != s.started.TargetPID || s.receipt.HelperPID != s.proc.Pid:
			r.Faults = append(r.Faults, "receipt not correlated with this activation")
		case !s.receipt.Reaped:
			r.Faults = append(r.Faults, "receipt: target not reaped")
		case !s.receipt.HasCleanupFacts():
			r.Faults = append(r.Faults, "receipt lacks wait or pipe-close facts")
		default:
			receiptOK = true
		}
	}

	switch {
	case receiptOK && helperOK && !deadlineHit && s.firstFailure == "":
		r.Confirmed = true
	case s.firstFailure != "":
		r.Reason = s.firstFailure
	case deadlineHit:
		r.Reason = ReasonDeadline
	case r.HelperExited && !helperOK:
		r.Reason = ReasonHelperLost
	case s.receipt != nil && !s.receipt.Reaped:
		r.Reason = ReasonDeadline // the helper's own kill grace ran out
	case s.receipt == nil && s.streamEnded && s.endedBeforeExt:
		r.Reason = ReasonPipesClosed
	default:
		r.Reason = ReasonReceiptLost
	}
	return r
}
