package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
)

// Bounds of an activation's audit. Each list reports how many entries it
// left out.
const (
	// DefaultTimeline is the number of events the timeline keeps (the
	// last ones) when Options.Timeline is zero.
	DefaultTimeline = 1000
	// All, as Options.Timeline or Summarize's limit, keeps every entry.
	All = -1
	// MaxRequests bounds the request timelines (the first ones
	// registered; the rest are counted in requests_omitted).
	MaxRequests = 1000
	// MaxSteps bounds the steps kept per timeline entry (a request has at
	// most 1 + 11 wire events and a settlement, plus timed-out awaits).
	MaxSteps = 64
)

var (
	// ErrNoEvents: Result was asked of a fold that was given no event.
	ErrNoEvents = errors.New("audit: no events for the activation")
	// ErrOtherActivation: Add was given an event of another activation.
	ErrOtherActivation = errors.New("audit: event of another activation")
)

// Error reports a failed fold step: Op is "add" or "result", Seq the
// event's seq (0 when unknown). It wraps ErrNoEvents, ErrOtherActivation,
// or the decoding or projector error.
type Error struct {
	Op         string
	Activation string
	Seq        uint64
	Err        error
}

func (e *Error) Error() string {
	if e.Seq != 0 {
		return fmt.Sprintf("audit: %s (activation %s, seq %d): %v", e.Op, e.Activation, e.Seq, e.Err)
	}
	return fmt.Sprintf("audit: %s (activation %s): %v", e.Op, e.Activation, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Options bound a [Fold].
type Options struct {
	// Timeline is how many events the timeline keeps, the last ones:
	// zero keeps DefaultTimeline, All keeps every event.
	Timeline int
}

// Activation is the audit of one activation: the `leaseledger audit
// <activation> --json` output, and what any other view of an activation's
// audit returns (see the package documentation for the JSON).
type Activation struct {
	// Report is the projector's report, rebuilt from the activation's
	// events alone.
	Report projector.ActivationReport `json:"report"`
	// Requests are the resource request timelines, in registration
	// order; RequestsOmitted counts registrations past MaxRequests.
	Requests        []Request `json:"requests"`
	RequestsOmitted int       `json:"requests_omitted"`
	// HTTPRequests are the HTTP request timelines (with their redirect
	// hops and barriers), in registration order; HTTPRequestsOmitted
	// counts registrations past MaxHTTPRequests.
	HTTPRequests        []HTTPRequest `json:"http_requests"`
	HTTPRequestsOmitted int           `json:"http_requests_omitted"`
	// Timeline is the last Options.Timeline events, oldest first;
	// TimelineOmitted counts the earlier ones left out.
	Timeline        []Event `json:"timeline"`
	TimelineOmitted uint64  `json:"timeline_omitted"`
	// CallsOutcomeUnknown are the admitted calls with no call.finished,
	// in admission order, at most MaxUnknownCalls (see UnknownCall);
	// CallsOutcomeUnknownOmitted counts the rest.
	CallsOutcomeUnknown        []UnknownCall `json:"calls_outcome_unknown"`
	CallsOutcomeUnknownOmitted int           `json:"calls_outcome_unknown_omitted"`
	// AcquireFailed is the activation's failed acquisition with its cause
	// (see AcquireFailure); absent when none was recorded.
	AcquireFailed *AcquireFailure `json:"acquire_failed,omitempty"`
	// AccessDenied are the activation's actions the access policy denied
	// (see Denial), with the policies that decided, in seq order, at most
	// MaxDenials; AccessDeniedOmitted counts the rest. The report's
	// access section counts every decision, allowed and denied.
	AccessDenied        []Denial `json:"access_denied"`
	AccessDeniedOmitted int      `json:"access_denied_omitted"`
}

// leaseTerminated is the kind whose event makes the fold's unpaired calls
// lost.
var leaseTerminated = new(events.LeaseTerminated).Kind()

// The kinds the acquisition's fold reads.
var (
	leaseAcquireFailed = new(events.LeaseAcquireFailed).Kind()
	guardianReaped     = new(events.GuardianReaped).Kind()
)

// Event is one event of an activation's timeline, its payload as recorded.
type Event struct {
	Seq  uint64          `json:"seq"`
	Time events.Instant  `json:"time"`
	Kind events.Kind     `json:"kind"`
	Data json.RawMessage `json:"data"`
}

// Fold folds one activation's events into its [Activation]. The zero Fold
// is not usable: use [NewFold]. A Fold is not safe for concurrent use.
type Fold struct {
	id    string
	keep  int // 0: every event
	state *projector.State
	ring  []Event
	total uint64
	reqs  requestFold
	http  httpFold
	calls callFold
	acq   acquireFold
	deny  denialFold
}

// NewFold returns a fold of activation's events.
func NewFold(activation string, opts Options) *Fold {
	keep := opts.Timeline
	switch {
	case keep == 0:
		keep = DefaultTimeline
	case keep < 0:
		keep = 0
	}
	return &Fold{id: activation, keep: keep, state: projector.New()}
}

// Add folds env, an event of the fold's activation; events must come in
// increasing seq order (the activation's events may skip seqs). On error
// the fold is unchanged.
func (f *Fold) Add(env *events.Envelope) error {
	if env.Activation != f.id {
		return &Error{Op: "add", Activation: f.id, Seq: uint64(env.Seq), Err: ErrOtherActivation}
	}
	var p events.Payload
	family := env.Kind.Family()
	late := false
	if family == "request" || family == "http" || family == "call" || family == "access" || env.Kind == leaseTerminated ||
		env.Kind == leaseAcquireFailed || env.Kind == guardianReaped {
		var err error
		if p, err = env.Payload(); err != nil {
			return &Error{Op: "add", Activation: f.id, Seq: uint64(env.Seq), Err: err}
		}
		if a, ok := f.state.Activation(f.id); ok {
			late = a.Evidence.Frozen()
		}
	}
	if err := f.state.Apply(env); err != nil {
		return &Error{Op: "add", Activation: f.id, Seq: uint64(env.Seq), Err: err}
	}
	seq := uint64(env.Seq)
	switch family {
	case "request":
		f.reqs.add(seq, p)
	case "http":
		f.http.add(seq, p, late)
	case "call":
		f.calls.add(seq, env.Session, p)
		f.deny.add(seq, env.Session, p)
	case "access":
		f.deny.add(seq, env.Session, p)
	case "lease":
		if env.Kind == leaseTerminated {
			f.calls.add(seq, env.Session, p)
		}
		f.acq.add(seq, p)
	case "guardian":
		f.acq.add(seq, p)
	}
	e := Event{Seq: seq, Time: events.Instant{Time: env.Time}, Kind: env.Kind, Data: env.Data}
	if f.keep == 0 || len(f.ring) < f.keep {
		f.ring = append(f.ring, e)
	} else {
		f.ring[f.total%uint64(f.keep)] = e
	}
	f.total++
	return nil
}

// AddRaw decodes raw, the stored bytes of one ledger record, strictly
// (events.Decode) and folds it with [Fold.Add].
func (f *Fold) AddRaw(raw []byte) error {
	env, err := events.Decode(raw)
	if err != nil {
		return &Error{Op: "add", Activation: f.id, Err: err}
	}
	return f.Add(&env)
}

// Events returns the number of events folded so far.
func (f *Fold) Events() uint64 { return f.total }

// Result returns the activation's audit from the events folded so far
// (ErrNoEvents when there were none). It may be called at any point: a
// later Add does not change an Activation already returned.
func (f *Fold) Result() (Activation, error) {
	rep, ok := f.state.Report(f.id)
	if !ok {
		return Activation{}, &Error{Op: "result", Activation: f.id, Err: ErrNoEvents}
	}
	out := Activation{Report: rep, Requests: f.reqs.result(), RequestsOmitted: f.reqs.omitted, HTTPRequestsOmitted: f.http.omitted}
	a, _ := f.state.Activation(f.id)
	out.HTTPRequests = f.http.result(&a.Evidence)
	out.CallsOutcomeUnknown, out.CallsOutcomeUnknownOmitted = f.calls.result()
	out.AcquireFailed = f.acq.result()
	out.AccessDenied, out.AccessDeniedOmitted = f.deny.result()
	if f.keep > 0 && f.total > uint64(f.keep) { // the ring, oldest first
		start := int(f.total % uint64(f.keep))
		out.Timeline = append(slices.Clone(f.ring[start:]), f.ring[:start]...)
	} else {
		out.Timeline = slices.Clone(f.ring)
	}
	out.TimelineOmitted = f.total - uint64(len(out.Timeline))
	return out, nil
}
