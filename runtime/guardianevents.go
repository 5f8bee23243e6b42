package runtime

import (
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
)

// This file is the guardian adapter: guardian returns facts, the runtime
// turns them into guardian.* events (docs/guardian.md, "Mapping to
// events"). Every event carries the lease's activation ID.

// guardianStartedDraft is the guardian.started event of a launched child.
func guardianStartedDraft(activation, session, server string, f childFacts) events.Draft {
	return events.Draft{Activation: activation, Session: session, Server: server, Payload: &events.GuardianStarted{
		GuardianPID: f.HelperPID, TargetPID: f.TargetPID, HelperVersion: f.HelperVersion, PIDFD: f.PIDFD,
	}}
}

// guardianCleanupDrafts turns one CleanupResult into events, in order: one
// guardian.signal per signal sent and guardian.reaped (when the child's
// wait status is known), both only from a correlated receipt; then either
// guardian.receipt (confirmed cleanup) or guardian.lost (anything else).
//
// A receipt is correlated when its activation, target pid and helper pid
// are this session's; an uncorrelated receipt is not this activation's
// evidence, so none of its facts are recorded and the result is
// guardian.lost{receipt_lost}. An unconfirmed cleanup never emits
// guardian.receipt: the projector confirms a guardian child from a
// receipt's facts alone, so a receipt followed by guardian.lost would be
// counted as two resources (one confirmed, one lost). Exactly one of
// guardian.receipt / guardian.lost is emitted per cleanup. An auditor
// recomputes the verdict from these facts; guardian.lost records the
// host's reason and, for a correlated receipt that did not confirm, the
// receipt's remaining facts (pipe closes, descendants, dropped stdin), so
// every fact of an unconfirmed cleanup is in the ledger.
func guardianCleanupDrafts(activation, session, server string, r guardian.CleanupResult) []events.Draft {
	out, _ := guardianCleanupFacts(activation, session, server, r)
	return out
}

// guardianCleanupFacts is guardianCleanupDrafts that also reports whether
// guardian.receipt was emitted (the supervisor obligation's outcome).
func guardianCleanupFacts(activation, session, server string, r guardian.CleanupResult) (out []events.Draft, receipted bool) {
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: activation, Session: session, Server: server, Payload: p}
	}
	rc := r.Receipt
	correlated := correlatedReceipt(r, activation)
	if correlated {
		for _, s := range rc.Signals {
			out = append(out, d(&events.GuardianSignal{TargetPID: rc.TargetPID, Signal: events.Signal(s.Signal), At: events.At(s.At), Alive: s.Alive}))
		}
		if rc.Reaped && rc.ReapedAt != nil {
			out = append(out, d(&events.GuardianReaped{TargetPID: rc.TargetPID, ExitCode: clampCode(rc.ExitCode), Signal: rc.Signal, At: events.At(*rc.ReapedAt)}))
		}
	}
	if correlated && r.Confirmed {
		p := &events.GuardianReceipt{
			HelperVersion: rc.HelperVersion, TargetPID: rc.TargetPID, Reaped: rc.Reaped, ExitCode: clampCode(rc.ExitCode),
			Signal: rc.Signal, EOFGraceNS: max(rc.EOFGraceNS, 0),
			DescendantsSeen: capPIDs(rc.DescendantsSeen), DescendantsKilled: capPIDs(rc.DescendantsKilled),
			HelperExitCode: clampCode(r.HelperExitCode),
		}
		if p.HelperVersion == "" {
			p.HelperVersion = r.HelperVersion
		}
		if rc.Stdin != nil {
			p.StdinClosedAt = events.At(rc.Stdin.ClosedAt)
		}
		if rc.Stdout != nil {
			p.StdoutClosedAt, p.StdoutForced = events.At(rc.Stdout.ClosedAt), rc.Stdout.Forced
		}
		if rc.Stderr != nil {
			p.StderrClosedAt, p.StderrForced = events.At(rc.Stderr.ClosedAt), rc.Stderr.Forced
		}
		p.DescendantsDropped = max(rc.DescendantsDropped, 0) + max(len(rc.DescendantsSeen)-len(p.DescendantsSeen), 0)
		p.StdinDroppedBytes = max(rc.StdinDroppedBytes, 0)
		if t, ok := rc.TermSentAt(); ok {
			p.TermSentAt = events.At(t)
		}
		if t, ok := rc.KillSentAt(); ok {
			p.KillSentAt = events.At(t)
		}
		return append(out, d(p)), true
	}
	lost := &events.GuardianLost{Reason: lostReason(r, activation), TargetPID: max(r.TargetPID, 0)}
	if correlated {
		// The partial facts the helper did report before the cleanup
		// ended unconfirmed (signals and wait status are above).
		lost.Receipt = true
		if rc.Stdin != nil {
			lost.StdinClosedAt = events.At(rc.Stdin.ClosedAt)
		}
		if rc.Stdout != nil {
			lost.StdoutClosedAt, lost.StdoutForced = events.At(rc.Stdout.ClosedAt), rc.Stdout.Forced
		}
		if rc.Stderr != nil {
			lost.StderrClosedAt, lost.StderrForced = events.At(rc.Stderr.ClosedAt), rc.Stderr.Forced
		}
		lost.DescendantsSeen, lost.DescendantsKilled = capPIDs(rc.DescendantsSeen), capPIDs(rc.DescendantsKilled)
		lost.DescendantsDropped = max(rc.DescendantsDropped, 0) + max(len(rc.DescendantsSeen)-len(lost.DescendantsSeen), 0)
		lost.StdinDroppedBytes = max(rc.StdinDroppedBytes, 0)
	}
	return append(out, d(lost)), false
}

// correlatedReceipt reports whether r's receipt belongs to this child: its
// activation, target pid and helper pid are the session's.
func correlatedReceipt(r guardian.CleanupResult, activation string) bool {
	rc := r.Receipt
	return rc != nil && rc.TargetPID > 0 && rc.ActivationID == activation &&
		(r.ActivationID == "" || r.ActivationID == activation) &&
		rc.TargetPID == r.TargetPID && rc.HelperPID == r.HelperPID
}

// lostReason is the recorded reason of an unconfirmed cleanup. The
// guardian's reasons map one to one onto the recorded ones; a receipt that
// does not belong to this child, or a reason the guardian added later, is
// recorded as a lost receipt (never as confirmed).
func lostReason(r guardian.CleanupResult, activation string) events.LostReason {
	switch {
	case r.Receipt != nil && !correlatedReceipt(r, activation):
		return events.LostReceipt
	case r.Reason == guardian.ReasonDeadline:
		return events.LostDeadline
	case r.Reason == guardian.ReasonHelperLost:
		return events.LostHelper
	case r.Reason == guardian.ReasonPipesClosed:
		return events.LostPipesClosed
	}
	return events.LostReceipt
}

func clampCode(c int) int {
	if c < -1 || c > 255 {
		return -1
	}
	return c
}

func capPIDs(p []int) []int {
	if len(p) > events.MaxPIDList {
		return p[:events.MaxPIDList]
	}
	return p
}

// since returns the non-negative nanoseconds since t.
func since(now, t time.Time) int64 { return max(int64(now.Sub(t)), 0) }
