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

// UnknownCall is a tool call the log shows admitted (call.admitted is
// durable before the request is sent) with no call.finished. Its outcome
// is recorded after the call returns, without the caller waiting for it,
// so a call is listed while it runs and, when its host stopped before
// recording the outcome, for good: its outcome is unknown, never guessed.
type UnknownCall struct {
	CallID      string `json:"call_id"`
	Tool        string `json:"tool"`
	Session     string `json:"session,omitempty"`
	AdmittedSeq uint64 `json:"admitted_seq"`
}

// callFold pairs an activation's call.admitted with its call.finished.
type callFold struct {
	open map[string]UnknownCall
	// untracked counts admitted calls beyond MaxUnknownCalls still
	// unpaired: a finished call not in open is one of them.
	untracked int
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
	for _, u := range c.open {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b UnknownCall) int { return cmp.Compare(a.AdmittedSeq, b.AdmittedSeq) })
	return out, c.untracked
}
