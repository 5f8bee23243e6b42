package audit

import (
	"fmt"
	"slices"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
)

// Bounds of the HTTP request timelines.
const (
	// MaxHTTPRequests bounds the HTTP request timelines (the first ones
	// registered; the rest are counted in http_requests_omitted).
	MaxHTTPRequests = 1000
	// MaxHops bounds the redirect hops listed per request: the runtime
	// follows at most events.MaxRedirectHops; further hops (an anomaly
	// the projector counts) are counted in hops_omitted.
	MaxHops = events.MaxRedirectHops
	// MaxBarriers bounds the barriers listed per request or hop (one is
	// expected; a retried barrier adds one); the rest are counted in
	// barriers_omitted.
	MaxBarriers = 8
)

// HTTPRequest is the timeline of one tracked HTTP request of an
// activation: its registration, every redirect hop, its completion, its
// barriers, its worker's end and any loss of evidence, each with the seq
// that recorded it.
type HTTPRequest struct {
	Ref           string            `json:"ref"`
	Scope         string            `json:"scope,omitempty"`
	Method        events.HTTPMethod `json:"method,omitempty"`
	Origin        string            `json:"origin,omitempty"`
	RegisteredSeq uint64            `json:"registered_seq,omitempty"` // 0: never registered (an anomaly)
	// Status and Reason are the request's evidence status after the
	// folded events (projector); a confirmed request whose receipt moved
	// into an aggregate is confirmed with no reason.
	Status projector.Status `json:"status,omitempty"`
	Reason string           `json:"reason,omitempty"`
	// Hops are the redirect hops in the order recorded, at most MaxHops.
	Hops        []HTTPHop `json:"hops"`
	HopsOmitted int       `json:"hops_omitted,omitempty"`
	// Completed is the first http.completed recorded for the request.
	Completed *events.HTTPCompleted `json:"completed,omitempty"`
	// Barriers are the request's own barriers, at most MaxBarriers.
	Barriers        []HTTPBarrier `json:"barriers"`
	BarriersOmitted int           `json:"barriers_omitted,omitempty"`
	// WorkerDown and Lost are the first http.worker_down and http.lost
	// recorded for the request.
	WorkerDown *events.HTTPWorkerDown `json:"worker_down,omitempty"`
	Lost       *events.HTTPLost       `json:"lost,omitempty"`
	// Steps are "<seq> <what happened>" for the request and its hops, in
	// seq order, at most MaxSteps; StepsOmitted counts the later ones.
	Steps        []string `json:"steps"`
	StepsOmitted int      `json:"steps_omitted,omitempty"`
}

// HTTPHop is one redirect hop of an HTTP request: its own tracked
// resource, with its own barriers.
type HTTPHop struct {
	Hop int    `json:"hop"`
	Ref string `json:"hop_ref"`
	Seq uint64 `json:"seq"` // the http.redirect
	// RedirectStatus is the 3xx status that redirected.
	RedirectStatus int `json:"redirect_status"`
	// FromOrigin is the origin redirected from, as recorded: the
	// request's registered origin for the first hop, the previous hop's
	// origin after it ("" when not recorded). ToOrigin is the hop's
	// recorded origin.
	FromOrigin string `json:"from_origin,omitempty"`
	ToOrigin   string `json:"to_origin"`
	SameOrigin bool   `json:"same_origin"`
	// Status and Reason are the hop's evidence status (projector).
	Status          projector.Status `json:"status,omitempty"`
	Reason          string           `json:"reason,omitempty"`
	Barriers        []HTTPBarrier    `json:"barriers"`
	BarriersOmitted int              `json:"barriers_omitted,omitempty"`
	// WorkerDown and Lost were recorded for the hop's own reference (a
	// worker end recorded for the request covers its hops too).
	WorkerDown *events.HTTPWorkerDown `json:"worker_down,omitempty"`
	Lost       *events.HTTPLost       `json:"lost,omitempty"`
}

// HTTPBarrier is one request-completion barrier: its seq and outcome.
// Late is set when it was recorded after the activation's close froze the
// evidence: it is in the log but changed nothing.
type HTTPBarrier struct {
	Seq     uint64                    `json:"seq"`
	Outcome events.HTTPBarrierOutcome `json:"outcome"`
	Late    bool                      `json:"late,omitempty"`
}

// httpRef locates a reference: request i, and hop h of it (-1: the
// request itself; -2: a hop past MaxHops).
type httpRef struct{ i, h int }

// httpFold collects HTTP request timelines from an activation's events.
type httpFold struct {
	byRef   map[string]httpRef
	list    []HTTPRequest
	omitted int
}

// add folds one http.* payload recorded at seq; late marks an event after
// the evidence froze.
func (f *httpFold) add(seq uint64, p events.Payload, late bool) {
	var ref string
	switch p := p.(type) {
	case *events.HTTPRegistered:
		ref = p.Ref
	case *events.HTTPRedirect:
		ref = p.Ref
	case *events.HTTPCompleted:
		ref = p.Ref
	case *events.HTTPBarrier:
		ref = p.Ref
	case *events.HTTPWorkerDown:
		ref = p.Ref
	case *events.HTTPLost:
		ref = p.Ref
	default:
		return
	}
	at, ok := f.byRef[ref]
	if !ok {
		if len(f.list) >= MaxHTTPRequests {
			if _, reg := p.(*events.HTTPRegistered); reg {
				f.omitted++
			}
			return
		}
		if f.byRef == nil {
			f.byRef = map[string]httpRef{}
		}
		at = httpRef{i: len(f.list), h: -1}
		f.byRef[ref] = at
		f.list = append(f.list, HTTPRequest{Ref: ref, Hops: []HTTPHop{}, Barriers: []HTTPBarrier{}, Steps: []string{}})
	}
	r := &f.list[at.i]
	var hop *HTTPHop
	where := ""
	if at.h >= 0 {
		hop = &r.Hops[at.h]
		where = fmt.Sprintf(" (hop %d, %s)", hop.Hop, hop.Ref)
	} else if at.h == -2 {
		where = " (" + ref + ", hop not listed)"
	}
	var step string
	switch p := p.(type) {
	case *events.HTTPRegistered:
		step = fmt.Sprintf("registered %s %s (scope %s)", p.Method, p.Origin, p.Scope)
		switch {
		case at.h == -1 && r.RegisteredSeq == 0:
			r.Scope, r.Method, r.Origin, r.RegisteredSeq = p.Scope, p.Method, p.Origin, seq
		case at.h == -1:
			step += " again"
		}
	case *events.HTTPRedirect:
		step = f.redirect(r, at, seq, p)
	case *events.HTTPCompleted:
		step = fmt.Sprintf("completed %s, status %d, %d bytes", p.Outcome, p.Status, p.BodyBytes)
		if p.Detail != "" {
			step += ", " + p.Detail
		}
		if r.Completed == nil && at.h == -1 {
			r.Completed = p
		}
	case *events.HTTPBarrier:
		step = "barrier " + string(p.Outcome)
		b := HTTPBarrier{Seq: seq, Outcome: p.Outcome, Late: late}
		switch {
		case hop != nil:
			addBarrier(&hop.Barriers, &hop.BarriersOmitted, b)
		case at.h == -1:
			addBarrier(&r.Barriers, &r.BarriersOmitted, b)
		}
	case *events.HTTPWorkerDown:
		step = fmt.Sprintf("worker %s down (%s)", p.Worker, p.Reason)
		switch {
		case hop != nil && hop.WorkerDown == nil:
			hop.WorkerDown = p
		case at.h == -1 && r.WorkerDown == nil:
			r.WorkerDown = p
		}
	case *events.HTTPLost:
		step = "lost (" + p.Reason + ")"
		switch {
		case hop != nil && hop.Lost == nil:
			hop.Lost = p
		case at.h == -1 && r.Lost == nil:
			r.Lost = p
		}
	}
	step += where
	if late {
		step += " — after the close, no effect"
	}
	addStep(&r.Steps, &r.StepsOmitted, seq, step)
}

// redirect records hop p of request r and returns its step.
func (f *httpFold) redirect(r *HTTPRequest, at httpRef, seq uint64, p *events.HTTPRedirect) string {
	same := "cross origin"
	if p.SameOrigin {
		same = "same origin"
	}
	from := r.Origin
	if n := len(r.Hops); n > 0 {
		from = r.Hops[n-1].ToOrigin
	}
	step := fmt.Sprintf("redirect hop %d (%s): %d %s → %s, %s", p.Hop, p.HopRef, p.Status, orDash(from), p.Origin, same)
	if at.h != -1 { // a redirect naming a hop as its request: shown, not followed
		return step
	}
	if _, dup := f.byRef[p.HopRef]; dup {
		return step + ", duplicate hop reference"
	}
	if len(r.Hops) >= MaxHops {
		r.HopsOmitted++
		f.byRef[p.HopRef] = httpRef{i: at.i, h: -2}
		return step
	}
	f.byRef[p.HopRef] = httpRef{i: at.i, h: len(r.Hops)}
	r.Hops = append(r.Hops, HTTPHop{Hop: p.Hop, Ref: p.HopRef, Seq: seq, RedirectStatus: p.Status, FromOrigin: from,
		ToOrigin: p.Origin, SameOrigin: p.SameOrigin, Barriers: []HTTPBarrier{}})
	return step
}

func addBarrier(list *[]HTTPBarrier, omitted *int, b HTTPBarrier) {
	if len(*list) >= MaxBarriers {
		*omitted++
		return
	}
	*list = append(*list, b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// result returns a copy of the timelines that later adds do not change,
// with each request's and hop's evidence status from ev (nil: none yet).
func (f *httpFold) result(ev *projector.Evidence) []HTTPRequest {
	out := slices.Clone(f.list)
	if out == nil {
		out = []HTTPRequest{}
	}
	for i := range out {
		r := &out[i]
		r.Hops = slices.Clone(r.Hops)
		r.Status, r.Reason = status(ev, r.Ref, r.RegisteredSeq != 0)
		for j := range r.Hops {
			h := &r.Hops[j]
			h.Status, h.Reason = status(ev, h.Ref, true)
		}
	}
	return out
}

// status is the evidence status of ref: the tracked resource or recent
// receipt; else, for a tracked reference, confirmed (the projector drops
// only confirmed resources, into an aggregate).
func status(ev *projector.Evidence, ref string, tracked bool) (projector.Status, string) {
	if ev != nil {
		if r, ok := ev.Resource(ref); ok {
			return r.Status, r.Reason
		}
	}
	if tracked && ev != nil {
		return projector.StatusConfirmed, ""
	}
	return "", ""
}
