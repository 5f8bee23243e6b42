//go:build linux || darwin

package helper

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// triggerRank lists the cleanup triggers from highest to lowest rank. When
// serve finds several ready at once, it records the highest-ranked one, so
// the receipt's trigger does not depend on which channel a select happened
// to pick:
//
//  1. close: the host asked through the protocol, the orderly path.
//  2. signal: someone asked out of band. The host sends SIGTERM exactly
//     when its close frame could not be delivered, and the write its
//     deadline cut short can leave a partial frame behind, which reads as a
//     protocol fault or EOF as soon as the host closes its end; the request,
//     not its by-product, is what started the cleanup.
//  3. target_exit: the target ended on its own.
//  4. parent_gone: the host is gone. Its death also closes our stdin, so it
//     outranks host_eof, the less specific fact.
//  5. host_eof: the host closed its end without a close frame.
//  6. protocol_fault: a malformed host stream, lowest because it is often
//     the by-product of one of the above. Its text is recorded in the
//     receipt's faults whether or not it is the trigger.
var triggerRank = []string{
	wire.TriggerClose, wire.TriggerSignal, wire.TriggerTargetExit,
	wire.TriggerParentGone, wire.TriggerHostEOF, wire.TriggerProtocolFault,
}

// higher returns whichever of two triggers ranks higher; "" (no trigger)
// ranks lowest.
func higher(a, b string) string {
	ia, ib := slices.Index(triggerRank, a), slices.Index(triggerRank, b)
	switch {
	case ia < 0:
		return b
	case ib < 0:
		return a
	case ib < ia:
		return b
	}
	return a
}

// serve runs the session until something starts cleanup, and says what.
//
// Each wake-up handles one event, then everything else that is ready at
// that moment (see drainReady), and returns the highest-ranked trigger
// among them.
func (h *helper) serve() string {
	tick := time.NewTicker(scanEvery)
	defer tick.Stop()
	for {
		var t string
		select {
		case ev := <-h.hostEv:
			t = h.onHost(ev)
		case x := <-h.exited:
			t = h.onExit(x)
		case s := <-h.sigs:
			t = h.onSignal(s)
		case <-tick.C:
			t = h.onTick()
		}
		if t = higher(t, h.drainReady(tick.C)); t != "" {
			return t
		}
	}
}

// drainReady handles, without blocking, the events already waiting on
// every source, and returns the highest-ranked trigger among them.
func (h *helper) drainReady(tick <-chan time.Time) string {
	best := drain(h.hostEv, h.onHost)
	best = higher(best, drain(h.sigs, h.onSignal))
	best = higher(best, drain(h.exited, h.onExit))
	return higher(best, drain(tick, func(time.Time) string { return h.onTick() }))
}

// drain handles the values waiting on ch until one is a trigger, which it
// returns, or ch is empty. It reads at most cap(ch)+1 values, so a host
// sending an endless stream of control frames cannot keep serve here. It
// stops at a trigger because what follows belongs to the cleanup (which
// still serves kill-descendants requests, see duringCleanup).
func drain[T any](ch <-chan T, handle func(T) string) string {
	for range cap(ch) + 1 {
		select {
		case v := <-ch:
			if t := handle(v); t != "" {
				return t
			}
		default:
			return ""
		}
	}
	return ""
}

// onHost handles one host event and returns the trigger it is, if any.
func (h *helper) onHost(ev hostEvent) string {
	if ev.err != nil {
		if ev.fault != "" {
			h.rc.Faults = append(h.rc.Faults, ev.fault)
			return wire.TriggerProtocolFault
		}
		return wire.TriggerHostEOF
	}
	switch ev.ctrl {
	case wire.ControlClose:
		return wire.TriggerClose
	case wire.ControlKillDescendants:
		h.desc.killAll(h.rc.TargetPID)
	}
	return ""
}

// onExit records the direct child's wait status: a target_exit trigger.
func (h *helper) onExit(x exitInfo) string {
	h.recordExit(x)
	return wire.TriggerTargetExit
}

// onTick checks the parent, and scans for descendants and reaps them when
// a child changed state (see descendants.poll).
func (h *helper) onTick() string {
	if os.Getppid() != h.ppid0 {
		return wire.TriggerParentGone
	}
	h.desc.poll()
	return ""
}

// onSignal maps a signal to a cleanup trigger ("" to keep going).
func (h *helper) onSignal(s os.Signal) string {
	switch s {
	case syscall.SIGPIPE:
		return "" // the failed write reports it
	case syscall.SIGUSR1:
		// Our PR_SET_PDEATHSIG (Linux; macOS has none, and the tick's
		// getppid check alone sees the parent go). It also fires when only
		// the host's forking thread exited; the parent pid tells the two
		// apart.
		if os.Getppid() != h.ppid0 {
			return wire.TriggerParentGone
		}
		h.rc.Faults = append(h.rc.Faults, "parent-death signal while the parent lives (its forking thread exited); ignored")
		return ""
	}
	return wire.TriggerSignal
}

// recordExit puts the direct child's wait status into the receipt.
func (h *helper) recordExit(x exitInfo) {
	h.reaped = true
	if x.err != nil || x.state == nil {
		h.rc.Faults = append(h.rc.Faults, fmt.Sprintf("wait: %v", x.err))
		return
	}
	h.rc.Reaped = true
	at := x.at
	h.rc.ReapedAt = &at
	ws, ok := x.state.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		h.rc.ExitCode = -1
		h.rc.Signal = wire.SignalName(ws.Signal())
	default:
		h.rc.ExitCode = x.state.ExitCode()
	}
}
