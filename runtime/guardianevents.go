package runtime

import (
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
)

// This file is the guardian adapter: guardian returns facts, the runtime
// turns them into guardian.* events (docs/guardian.md, "Mapping to
// events"). Every event carries the lease's activation ID.

// GuardianStartedDraft is the guardian.started event for a launched session.
func GuardianStartedDraft(activation, session, server string, s *guardian.Session) events.Draft {
	return events.Draft{Activation: activation, Session: session, Server: server, Payload: &events.GuardianStarted{
		GuardianPID: s.HelperPID(), TargetPID: s.TargetPID(), HelperVersion: s.Hello().Version, PIDFD: s.Started().PIDFD,
	}}
}

// GuardianCleanupDrafts turns one CleanupResult into events, in order: one
// guardian.signal per signal sent, guardian.reaped (when the child's wait
// status is known), guardian.receipt (when a receipt arrived), and
// guardian.lost when the cleanup is not confirmed. An auditor recomputes
// the verdict from these facts; guardian.lost records the host's reason.
func GuardianCleanupDrafts(activation, session, server string, r guardian.CleanupResult) []events.Draft {
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: activation, Session: session, Server: server, Payload: p}
	}
	var out []events.Draft
	rc := r.Receipt
	if rc != nil && rc.TargetPID > 0 {
		for _, s := range rc.Signals {
			out = append(out, d(&events.GuardianSignal{TargetPID: rc.TargetPID, Signal: s.Signal, At: events.At(s.At), Alive: s.Alive}))
		}
		if rc.Reaped && rc.ReapedAt != nil {
			out = append(out, d(&events.GuardianReaped{TargetPID: rc.TargetPID, ExitCode: clampCode(rc.ExitCode), Signal: rc.Signal, At: events.At(*rc.ReapedAt)}))
		}
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
			p.StdoutClosedAt = events.At(rc.Stdout.ClosedAt)
		}
		if rc.Stderr != nil {
			p.StderrClosedAt = events.At(rc.Stderr.ClosedAt)
		}
		if t, ok := rc.TermSentAt(); ok {
			p.TermSentAt = events.At(t)
		}
		if t, ok := rc.KillSentAt(); ok {
			p.KillSentAt = events.At(t)
		}
		out = append(out, d(p))
	}
	if !r.Confirmed {
		reason := string(r.Reason)
		switch r.Reason {
		case guardian.ReasonDeadline, guardian.ReasonHelperLost, guardian.ReasonPipesClosed, guardian.ReasonReceiptLost:
		default:
			reason = string(guardian.ReasonReceiptLost)
		}
		out = append(out, d(&events.GuardianLost{Reason: reason, TargetPID: max(r.TargetPID, 0)}))
	}
	return out
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
