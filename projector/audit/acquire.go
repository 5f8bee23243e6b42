package audit

import "github.com/leaseledger/leaseledger/events"

// AcquireFailure is an activation's failed acquisition: its first
// lease.acquire_failed, with the operator's account of the failure (the
// cause the runtime observed at its boundary — a refused dial to target,
// a DNS or TLS failure, a timer, an HTTP status, an exited process) and,
// for a process that exited, its wait status as the activation's
// guardian.reaped recorded it.
type AcquireFailure struct {
	Seq        uint64              `json:"seq"`
	Reason     string              `json:"reason"`
	Cause      events.FailureCause `json:"cause,omitempty"`
	Target     string              `json:"target,omitempty"`
	HTTPStatus int                 `json:"http_status,omitempty"`
	DurationNS int64               `json:"duration_ns"`
	// ExitCode (-1 when killed by a signal) and Signal are the target's
	// wait status for cause process_exited, when guardian.reaped recorded
	// it; absent otherwise.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
}

// acquireFold keeps an activation's first lease.acquire_failed and its
// target's first guardian.reaped.
type acquireFold struct {
	failed *AcquireFailure
	reaped *events.GuardianReaped
}

func (a *acquireFold) add(seq uint64, p events.Payload) {
	switch p := p.(type) {
	case *events.LeaseAcquireFailed:
		if a.failed == nil {
			a.failed = &AcquireFailure{Seq: seq, Reason: p.Reason, Cause: p.Cause, Target: p.Target,
				HTTPStatus: p.HTTPStatus, DurationNS: p.DurationNS}
		}
	case *events.GuardianReaped:
		if a.reaped == nil {
			a.reaped = p
		}
	}
}

// result returns the failed acquisition, or nil when none was recorded.
func (a *acquireFold) result() *AcquireFailure {
	if a.failed == nil {
		return nil
	}
	out := *a.failed
	if out.Cause == events.CauseProcessExited && a.reaped != nil {
		code := a.reaped.ExitCode
		out.ExitCode, out.Signal = &code, a.reaped.Signal
	}
	return &out
}
