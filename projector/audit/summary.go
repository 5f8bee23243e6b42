package audit

import (
	"container/heap"
	"slices"
	"strings"

	"github.com/leaseledger/leaseledger/projector"
)

// DefaultUnconfirmed is the number of unconfirmed activations a Summary
// lists when Summarize's limit is zero.
const DefaultUnconfirmed = 100

// Summary is the audit of every activation of a projector state: the
// `leaseledger audit --all --json` output, and what any other view of the
// whole log's audit returns (see the package documentation for the JSON).
type Summary struct {
	// Events is the number of events the state applied.
	Events      uint64 `json:"events"`
	Activations int    `json:"activations"`
	// Verdicts counts activations by verdict; every verdict is present.
	Verdicts map[string]int `json:"verdicts"`
	// NotClosed counts the unconfirmed activations with no close report.
	NotClosed int `json:"not_closed"`
	// Unconfirmed lists unconfirmed activations in activation order, at
	// most the limit given to Summarize; Omitted counts the rest.
	Unconfirmed []Unconfirmed       `json:"unconfirmed"`
	Omitted     int                 `json:"unconfirmed_omitted"`
	Anomalies   projector.Anomalies `json:"anomalies"`
	// Host is the host the chain is bound to (projector.State.Host),
	// omitted when none.
	Host string `json:"host,omitempty"`
	// Policy is the access policy as the log records it
	// (projector.State.Policy): the policy in force, its loads, and every
	// decision by action, outcome and deciding policy.
	Policy projector.PolicyReport `json:"policy"`
}

// Unconfirmed is one unconfirmed activation with its reasons (at most
// projector.MaxReasons; ReasonsOmitted counts the rest).
type Unconfirmed struct {
	Activation     string   `json:"activation_id"`
	Closed         bool     `json:"closed"`
	Reasons        []string `json:"reasons"`
	ReasonsOmitted int      `json:"reasons_omitted,omitempty"`
}

// Summarize summarises every activation of s, listing at most limit
// unconfirmed ones (zero: DefaultUnconfirmed; All: every one). It only
// reads s: for a State with an Archive, only the activations in memory
// (live.Projection.Summarize adds the stored ones).
func Summarize(s *projector.State, limit int) Summary {
	z := NewSummarizer(s.Applied(), s.Anomalies(), limit)
	z.out.Host, z.out.Policy = s.Host(), s.Policy()
	for _, id := range s.ActivationIDs() {
		v, reasons, omitted := s.Verdict(id)
		_, closed := s.CloseReport(id)
		z.Add(id, v, reasons, omitted, closed)
	}
	return z.Summary()
}

// Summarizer builds a Summary from activations added one by one in
// activation order (the order Summary lists them in), so that a caller
// that reads activations from more than one place (memory and stored
// parts) need not hold them all.
type Summarizer struct {
	out   Summary
	limit int
}

// NewSummarizer starts a Summary of a state that applied events events
// with anomalies, listing at most limit unconfirmed activations (zero:
// DefaultUnconfirmed; All: every one).
func NewSummarizer(events uint64, anomalies projector.Anomalies, limit int) *Summarizer {
	if limit == 0 {
		limit = DefaultUnconfirmed
	}
	return &Summarizer{limit: limit, out: Summary{Events: events,
		Verdicts:    map[string]int{projector.ResultConfirmed: 0, projector.ResultUnconfirmed: 0, projector.ResultUnverified: 0, projector.ResultNeverStarted: 0},
		Unconfirmed: []Unconfirmed{}, Anomalies: anomalies}}
}

// Add counts activation id with its verdict (State.Verdict) and whether a
// close report is retained. Activations must come in increasing id order.
func (z *Summarizer) Add(id, verdict string, reasons []string, omitted int, closed bool) {
	out := &z.out
	out.Activations++
	out.Verdicts[verdict]++
	if verdict != projector.ResultUnconfirmed { // confirmed, unverified (counted apart) or never started: no failure to list
		return
	}
	if !closed {
		out.NotClosed++
	}
	if z.limit > 0 && len(out.Unconfirmed) >= z.limit {
		out.Omitted++
		return
	}
	if reasons == nil {
		reasons = []string{}
	}
	out.Unconfirmed = append(out.Unconfirmed, Unconfirmed{Activation: id, Closed: closed, Reasons: reasons, ReasonsOmitted: omitted})
}

// Summary returns the summary of the activations added so far.
func (z *Summarizer) Summary() Summary { return z.out }

// Collector builds a Summary from activations added in any order: it
// counts every one and keeps only the limit unconfirmed ones with the
// smallest ids (what Summarize lists), so that a reader that settles
// activations as a replay goes needs memory for the listed ones only.
// Its Summary equals Summarize's over the same activations.
type Collector struct {
	z    *Summarizer
	kept unconfirmedHeap // max-heap by id when limited
}

// NewCollector starts a Collector listing at most limit unconfirmed
// activations (zero: DefaultUnconfirmed; All: every one).
func NewCollector(limit int) *Collector {
	return &Collector{z: NewSummarizer(0, projector.Anomalies{}, limit)}
}

// Add counts activation id with its final verdict and whether a close
// report is retained. Each activation is added once.
func (c *Collector) Add(id, verdict string, reasons []string, omitted int, closed bool) {
	out := &c.z.out
	out.Activations++
	out.Verdicts[verdict]++
	if verdict != projector.ResultUnconfirmed {
		return
	}
	if !closed {
		out.NotClosed++
	}
	if reasons == nil {
		reasons = []string{}
	}
	u := Unconfirmed{Activation: id, Closed: closed, Reasons: reasons, ReasonsOmitted: omitted}
	if c.z.limit < 0 || len(c.kept) < c.z.limit {
		heap.Push(&c.kept, u)
		return
	}
	out.Omitted++
	if c.z.limit > 0 && id < c.kept[0].Activation {
		c.kept[0] = u
		heap.Fix(&c.kept, 0)
	}
}

// Summary returns the summary of a state that applied events events with
// anomalies, over the activations added.
func (c *Collector) Summary(events uint64, anomalies projector.Anomalies) Summary {
	out := c.z.out
	out.Events, out.Anomalies = events, anomalies
	out.Unconfirmed = append([]Unconfirmed{}, c.kept...)
	slices.SortFunc(out.Unconfirmed, func(a, b Unconfirmed) int { return strings.Compare(a.Activation, b.Activation) })
	return out
}

type unconfirmedHeap []Unconfirmed

func (h unconfirmedHeap) Len() int           { return len(h) }
func (h unconfirmedHeap) Less(i, j int) bool { return h[i].Activation > h[j].Activation }
func (h unconfirmedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *unconfirmedHeap) Push(x any)        { *h = append(*h, x.(Unconfirmed)) }
func (h *unconfirmedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
