package projector

import "github.com/leaseledger/leaseledger/events"

// phaseRank orders a connection's phases: a phase only moves forward
// (events.Phase). An unknown phase ranks with active.
func phaseRank(p events.Phase) int {
	switch p {
	case events.PhaseClosing:
		return 1
	case events.PhaseClosed:
		return 2
	}
	return 0
}

// Obligations lists the close obligations in report order
// (events.CloseObligations), the order of Connection.Barriers.
var Obligations = events.CloseObligations()

func obligationIndex(name events.Obligation) int {
	for i, o := range Obligations {
		if o == name {
			return i
		}
	}
	return -1
}

// Observation is the last connection.barrier recorded for one obligation.
type Observation struct {
	Outcome      events.BarrierOutcome `json:"outcome,omitempty"` // as recorded
	Detail       string                `json:"detail,omitempty"`
	ElapsedNS    int64                 `json:"elapsed_ns,omitempty"`
	Seq          uint64                `json:"seq,omitempty"`
	Observations int                   `json:"observations,omitempty"`
}

// Connection is the owned connection of an activation.
type Connection struct {
	Opened    bool             `json:"opened"`
	Transport events.Transport `json:"transport,omitempty"`
	Cleanup   events.Cleanup   `json:"cleanup,omitempty"`
	OneShot   bool             `json:"one_shot,omitempty"`
	Phase     events.Phase     `json:"phase"`
	BudgetNS  int64            `json:"budget_ns,omitempty"`
	// Barriers holds the last observation per obligation, in the order of
	// Obligations.
	Barriers [4]Observation `json:"barriers"`
	// Regressions counts phase events that would have moved backwards
	// (ignored) and repeated connection.opened events.
	Regressions uint64 `json:"regressions,omitempty"`
	// Report is the retained close report, set once at the close.
	Report *CloseReport `json:"report,omitempty"`
}

// ObligationReport is one close obligation's verdict in a close report.
type ObligationReport struct {
	Name   events.Obligation `json:"name"`
	Status Status            `json:"status"`
	Reason string            `json:"reason,omitempty"`
	Last   Observation       `json:"last"`
}

// Close report results and verdicts, as the strings the projector's
// reports, maps and JSON carry them in; the values are events.Result's.
const (
	ResultConfirmed   = string(events.ResultConfirmed)
	ResultUnconfirmed = string(events.ResultUnconfirmed)
	// ResultNeverStarted is the verdict of an activation whose acquisition
	// was refused or failed before anything was started: no resource, so
	// no cleanup to confirm.
	ResultNeverStarted = string(events.ResultNeverStarted)
	// ResultUnverified is the verdict of a closed activation whose child
	// the host started itself ("cleanup": "direct"): every obligation and
	// resource the host can observe is confirmed and it saw the child
	// exit, but nothing vouches for the child's release (supervisor and
	// the child unsupported). Counted apart; an audit does not fail on it.
	ResultUnverified = string(events.ResultUnverified)
)

// CloseReport is the retained version-1 result of closing an activation's
// connection. It is built once, when the close is first recorded, from the
// evidence frozen at that moment; later closes observe it unchanged.
type CloseReport struct {
	Version     int                `json:"version"`
	Activation  string             `json:"activation_id"`
	Result      string             `json:"result"`
	Reasons     []string           `json:"reasons,omitempty"`
	Omitted     int                `json:"reasons_omitted,omitempty"`
	Retained    bool               `json:"retained"` // false: a close against an activation with no retained connection state
	Obligations []ObligationReport `json:"obligations"`
	Counts      Counts             `json:"counts"`
	ClosedSeq   uint64             `json:"closed_seq"`
	ClosedAt    events.Instant     `json:"closed_at"`
	ElapsedNS   int64              `json:"elapsed_ns,omitempty"`
	// CloseCalls counts connection.closed events; every one after the
	// first observed this stored report.
	CloseCalls uint64 `json:"close_calls"`
}
