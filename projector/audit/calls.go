package audit

import (
	"cmp"
	"slices"

	"github.com/leaseledger/leaseledger/events"
)

// MaxUnknownCalls bounds the admitted calls without an outcome an
// activation's audit tracks and lists; the rest are counted in
// calls_outcome_unknown_omitted.
const MaxUnknownCalls = 100

// States of an [UnknownCall].
const (
	// CallRunning: the call's lease has not ended, so the call may still
	// be running and its outcome may yet be recorded.
	CallRunning = "running"
	// CallLost: the call's lease ended (terminated, or its host lost and
	// the next serve recorded lease.terminated{host_lost}) with the call
	// unpaired. The runtime records every outcome before a lease's
	// termination, so this outcome is lost for good.
	CallLost = "lost"
)

// UnknownCall is a tool call the log shows admitted (call.admitted is
// durable before the request is sent) with no call.finished. Its outcome
// is recorded after the call returns, without the caller waiting for it,
// so a call is listed while it runs (State CallRunning) and, when its host
// stopped before recording the outcome, for good (State CallLost): its
// outcome is unknown, never guessed.
type UnknownCall struct {
	CallID      string `json:"call_id"`
	Tool        string `json:"tool"`
	Session     string `json:"session,omitempty"`
	AdmittedSeq uint64 `json:"admitted_seq"`
	// State is CallRunning or CallLost.
	State string `json:"state"`
}

// callFold pairs an activation's call.admitted with its call.finished.
type callFold struct {
	open map[string]UnknownCall
	// untracked counts admitted calls beyond MaxUnknownCalls still
	// unpaired: a finished call not in open is taken to be one of them.
	// A call.finished with no call.admitted at all (a log anomaly) is
	// taken so too, so calls_outcome_unknown_omitted can then be low;
	// telling them apart would mean remembering every untracked id.
	untracked int
	// ended: the activation's lease ended (lease.terminated), after which
	// no outcome is recorded.
	ended bool
}

func (c *callFold) add(seq uint64, session string, p events.Payload) {
	switch p := p.(type) {
	case *events.CallAdmitted:
		if len(c.open) >= MaxUnknownCalls {
			c.untracked++
			return
		}
		if c.open == nil {
			c.open = make(map[string]UnknownCall)
		}
		c.open[p.CallID] = UnknownCall{CallID: p.CallID, Tool: p.Tool, Session: session, AdmittedSeq: seq}
	case *events.LeaseTerminated:
		c.ended = true
	case *events.CallFinished:
		if _, ok := c.open[p.CallID]; ok {
			delete(c.open, p.CallID)
		} else if c.untracked > 0 {
			c.untracked--
		}
	}
}

// result lists the unpaired calls in admission order (never nil) and the
// number left out.
func (c *callFold) result() ([]UnknownCall, int) {
	out := make([]UnknownCall, 0, len(c.open))
	state := CallRunning
	if c.ended {
		state = CallLost
	}
	for _, u := range c.open {
		u.State = state
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b UnknownCall) int { return cmp.Compare(a.AdmittedSeq, b.AdmittedSeq) })
	return out, c.untracked
}
