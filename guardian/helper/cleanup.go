//go:build linux || darwin

package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// finish runs the cleanup sequence, sends the receipt and returns the exit
// code. The sequence is the same whatever triggered it; its numbered steps
// are those of docs/guardian.md ("Helper and cleanup sequence").
func (h *helper) finish(trigger string) int {
	h.rc.Trigger = trigger
	close(h.cleanup)
	// From here on the host may have stopped reading: bound every write.
	_ = h.hostOut.SetWriteDeadline(time.Now().Add(hostWriteBound + h.budget()))

	// 1. Flush stdin bytes already relayed (bounded), then close the
	// target's stdin.
	_ = h.stdinW.SetWriteDeadline(time.Now().Add(stdinFlushBound))
	stdinAt := <-h.stdinClosed
	h.rc.Stdin = &wire.PipeFact{ClosedAt: stdinAt}

	// 2. EOF grace: the polite ending for a stdio server.
	h.waitExit(stdinAt.Add(time.Duration(h.req.EOFGraceNS)))
	end := time.Now().UTC()
	if h.rc.ReapedAt != nil && h.rc.ReapedAt.Before(end) {
		end = *h.rc.ReapedAt
	}
	if used := end.Sub(stdinAt); used > 0 {
		h.rc.EOFGraceUsedNS = min(int64(used), h.req.EOFGraceNS)
	}

	// 3. TERM, then the term grace; 4. KILL, then the kill grace — each
	// only while the child is unreaped and has not exited (see signal).
	if !h.reaped {
		h.signal(syscall.SIGTERM)
		h.waitExit(time.Now().Add(time.Duration(h.req.TermGraceNS)))
	}
	if !h.reaped {
		h.signal(syscall.SIGKILL)
		h.waitExit(time.Now().Add(time.Duration(h.req.KillGraceNS)))
	}
	if !h.reaped {
		h.rc.Faults = append(h.rc.Faults, "direct child not reaped within the kill grace")
	}

	// 5. Orphaned descendants: kill them if asked, before waiting for the
	// pipes they may hold.
	if h.req.KillDescendants || h.killReq {
		h.desc.killAll(h.rc.TargetPID)
	}

	// 6. Pipes: wait for EOF, but never past the pipe deadline — a
	// descendant holding stdout must not hold the cleanup.
	h.rc.Stdout, h.rc.Stderr = h.closePipes(time.Now().Add(time.Duration(h.req.PipeGraceNS)))

	// 7. Scan and reap descendants, write the receipt, exit.
	h.desc.scan()
	h.desc.reap()
	h.desc.fill(&h.rc)
	// writeStdin closed the queue before its last drain, so this finds
	// nothing; it stays so that a chunk left there by a future change is
	// still counted rather than lost from the receipt.
	for drained := false; !drained; {
		select {
		case b := <-h.stdinQ:
			h.dropStdin(b)
		default:
			drained = true
		}
	}
	h.rc.StdinDroppedBytes = h.stdinDropped.Load()
	h.rc.FinishedAt = time.Now().UTC()

	b, err := json.Marshal(&h.rc)
	if err == nil {
		err = h.out.WriteFrame(wire.FrameReceipt, b)
	}
	_ = h.hostOut.Close()
	if err != nil {
		return exitNoReceipt
	}
	return exitOK
}

// budget is the longest the cleanup sequence can take by its graces.
func (h *helper) budget() time.Duration {
	return stdinFlushBound + time.Duration(h.req.EOFGraceNS+h.req.TermGraceNS+h.req.KillGraceNS+h.req.PipeGraceNS)
}

// waitExit waits until the child is reaped or the deadline passes, while
// still serving kill-descendants requests and descendant reaping.
func (h *helper) waitExit(deadline time.Time) {
	if h.reaped {
		return
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	tick := time.NewTicker(scanEvery / 2)
	defer tick.Stop()
	for {
		select {
		case x := <-h.exited:
			h.recordExit(x)
			return
		case <-timer.C:
			return
		case ev := <-h.hostEv:
			h.duringCleanup(ev)
		case <-h.sigs:
			// Cleanup is already running; a second request changes nothing.
		case <-tick.C:
			h.desc.scan()
			h.desc.reap()
		}
	}
}

// duringCleanup handles a host event that arrives once cleanup runs: faults
// are recorded, a kill-descendants request is remembered for step 5, and
// nothing can start a second cleanup.
func (h *helper) duringCleanup(ev hostEvent) {
	if ev.fault != "" {
		h.rc.Faults = append(h.rc.Faults, ev.fault)
	}
	if ev.err == nil && ev.ctrl == wire.ControlKillDescendants {
		h.killReq = true
	}
}

// signal sends sig to the exact direct child, only while it is unreaped
// and has not exited (procOS.signal says how each system keeps a reused
// pid from being hit).
func (h *helper) signal(sig syscall.Signal) {
	if h.reaped {
		return
	}
	err := h.sys.signal(sig)
	if errors.Is(err, errChildGone) {
		return // exited, or reaped in between: nothing was sent
	}
	if err != nil {
		h.rc.Faults = append(h.rc.Faults, fmt.Sprintf("signal %s: %v", wire.SignalName(sig), err))
		return
	}
	h.rc.Signals = append(h.rc.Signals, wire.SignalFact{Signal: wire.SignalName(sig), At: time.Now().UTC(), Alive: true})
}

// closePipes waits for EOF on the target's stdout and stderr until the
// deadline, then force-closes our read ends of whichever is still open.
func (h *helper) closePipes(deadline time.Time) (stdout, stderr *wire.PipeFact) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var outRes, errRes *pipeResult
	for outRes == nil || errRes == nil {
		select {
		case r := <-h.stdoutDone:
			outRes = &r
		case r := <-h.stderrDone:
			errRes = &r
		case ev := <-h.hostEv:
			h.duringCleanup(ev)
		case <-timer.C:
			// Closing our read ends releases the pipes we own; the pumps see
			// os.ErrClosed and report a forced close.
			if outRes == nil {
				_ = h.stdoutR.Close()
			}
			if errRes == nil {
				_ = h.stderrR.Close()
			}
		}
	}
	return &wire.PipeFact{ClosedAt: outRes.at, Forced: outRes.forced},
		&wire.PipeFact{ClosedAt: errRes.at, Forced: errRes.forced}
}
