package audit

import (
	"fmt"
	"slices"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
)

// Request is the timeline of one logical resource request of an
// activation: its registration, every wire id (dispatch and MRTR
// continuations), timed-out awaits, and its settlement with the cancel
// report when cancelled.
type Request struct {
	Handle        string               `json:"handle"`
	Owner         string               `json:"owner,omitempty"`
	Method        events.RequestMethod `json:"method,omitempty"`
	RegisteredSeq uint64               `json:"registered_seq,omitempty"`
	// WireIDs are the wire ids in order, at most projector.MaxWireIDs;
	// WireIDsOmitted counts the rest.
	WireIDs        []string                 `json:"wire_ids,omitempty"`
	WireIDsOmitted int                      `json:"wire_ids_omitted,omitempty"`
	AwaitTimeouts  int                      `json:"await_timeouts,omitempty"`
	Completed      *events.RequestCompleted `json:"completed,omitempty"`
	Cancelled      *events.RequestCancelled `json:"cancelled,omitempty"`
	// Steps are "<seq> <what happened>", in seq order, at most MaxSteps;
	// StepsOmitted counts the later ones left out.
	Steps        []string `json:"steps"`
	StepsOmitted int      `json:"steps_omitted,omitempty"`
}

// requestFold collects request timelines from an activation's events.
type requestFold struct {
	byHandle map[string]int
	list     []Request
	omitted  int
}

func (f *requestFold) add(seq uint64, p events.Payload) {
	var handle, step string
	switch p := p.(type) {
	case *events.RequestRegistered:
		handle, step = p.Handle, "registered"
	case *events.RequestDispatched:
		handle, step = p.Handle, "dispatched wire "+p.WireID
	case *events.RequestContinued:
		handle, step = p.Handle, fmt.Sprintf("continued wire %s (round %d)", p.WireID, p.Round)
	case *events.RequestAwaitTimedOut:
		handle, step = p.Handle, fmt.Sprintf("await timed out after %s", time.Duration(p.WaitedNS))
	case *events.RequestCompleted:
		handle, step = p.Handle, fmt.Sprintf("completed %s, %d bytes", p.Outcome, p.ResultBytes)
		if p.Detail != "" {
			step += ", " + p.Detail
		}
		if p.Code != 0 {
			step += fmt.Sprintf(" (code %d)", p.Code)
		}
	case *events.RequestCancelled:
		handle, step = p.Handle, fmt.Sprintf("cancelled (%s): local_settled %v, transport_accepted %s, notification_delivered %s, remote %s",
			p.Reason, p.LocalSettled, p.TransportAccepted, p.NotificationDelivered, p.Remote)
	default:
		return
	}
	if f.byHandle == nil {
		f.byHandle = map[string]int{}
	}
	i, ok := f.byHandle[handle]
	if !ok {
		if len(f.list) >= MaxRequests {
			if _, reg := p.(*events.RequestRegistered); reg {
				f.omitted++
			}
			return
		}
		i = len(f.list)
		f.byHandle[handle] = i
		f.list = append(f.list, Request{Handle: handle, Steps: []string{}})
	}
	r := &f.list[i]
	switch p := p.(type) {
	case *events.RequestRegistered:
		r.Owner, r.Method, r.RegisteredSeq = p.Owner, p.Method, seq
	case *events.RequestDispatched:
		r.addWireID(p.WireID)
	case *events.RequestContinued:
		r.addWireID(p.WireID)
	case *events.RequestAwaitTimedOut:
		r.AwaitTimeouts++
	case *events.RequestCompleted:
		if r.Completed == nil {
			r.Completed = p
		}
	case *events.RequestCancelled:
		if r.Cancelled == nil {
			r.Cancelled = p
		}
	}
	addStep(&r.Steps, &r.StepsOmitted, seq, step)
}

func (r *Request) addWireID(id string) {
	if len(r.WireIDs) >= projector.MaxWireIDs {
		r.WireIDsOmitted++
		return
	}
	r.WireIDs = append(r.WireIDs, id)
}

// result returns a copy of the timelines that later adds do not change.
func (f *requestFold) result() []Request {
	if f.list == nil {
		return []Request{}
	}
	return slices.Clone(f.list)
}

// addStep appends "<seq> step" to steps, or counts it past MaxSteps.
func addStep(steps *[]string, omitted *int, seq uint64, step string) {
	if len(*steps) >= MaxSteps {
		*omitted++
		return
	}
	*steps = append(*steps, fmt.Sprintf("%d %s", seq, step))
}
