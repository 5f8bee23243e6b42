package audit

import "github.com/leaseledger/leaseledger/projector"

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
// reads s.
func Summarize(s *projector.State, limit int) Summary {
	if limit == 0 {
		limit = DefaultUnconfirmed
	}
	out := Summary{Events: s.Applied(),
		Verdicts:    map[string]int{projector.ResultConfirmed: 0, projector.ResultUnconfirmed: 0, projector.ResultNeverStarted: 0},
		Unconfirmed: []Unconfirmed{}, Anomalies: s.Anomalies()}
	for _, id := range s.ActivationIDs() {
		out.Activations++
		v, reasons, omitted := s.Verdict(id)
		out.Verdicts[v]++
		if v != projector.ResultUnconfirmed { // confirmed, or never started: no cleanup owed
			continue
		}
		_, closed := s.CloseReport(id)
		if !closed {
			out.NotClosed++
		}
		if limit > 0 && len(out.Unconfirmed) >= limit {
			out.Omitted++
			continue
		}
		if reasons == nil {
			reasons = []string{}
		}
		out.Unconfirmed = append(out.Unconfirmed, Unconfirmed{Activation: id, Closed: closed, Reasons: reasons, ReasonsOmitted: omitted})
	}
	return out
}
