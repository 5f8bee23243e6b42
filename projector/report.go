package projector

import (
	"strconv"

	"github.com/leaseledger/leaseledger/events"
)

// ActivationReport is everything the projection knows about one
// activation's cleanup, as an auditor reads it: the resources with their
// statuses and facts, the recent receipts and aggregates, the connection
// and its close report, and the verdict with every reason it is not
// confirmed.
type ActivationReport struct {
	Version    int    `json:"version"`
	Activation string `json:"activation_id"`
	Session    string `json:"session,omitempty"`
	Server     string `json:"server,omitempty"`
	FirstSeq   uint64 `json:"first_seq"`
	LastSeq    uint64 `json:"last_seq"`
	Events     uint64 `json:"events"`
	// Verdict is ResultConfirmed, ResultUnconfirmed, ResultUnverified or
	// ResultNeverStarted.
	Verdict        string              `json:"verdict"`
	Reasons        []string            `json:"reasons,omitempty"`
	ReasonsOmitted int                 `json:"reasons_omitted,omitempty"`
	Counts         Counts              `json:"counts"`
	Resources      []Resource          `json:"resources"`
	Recent         []Resource          `json:"recent"`
	Aggregates     []AggregateResource `json:"aggregates"`
	Frozen         bool                `json:"frozen"`
	LateEvents     uint64              `json:"late_events,omitempty"`
	Anomalies      uint64              `json:"anomalies,omitempty"`
	Connection     Connection          `json:"connection"`
	Lease          *Lease              `json:"lease,omitempty"`
	// Relays counts the activation's relays by outcome (relay.completed);
	// omitted when it had none.
	Relays *RelayCounts `json:"relays,omitempty"`
	// Subscriptions counts its resource subscriptions: started, ended by
	// reason, still open (subscriptions end with their session or lease:
	// one open at the close is reported, never a reason); omitted when it
	// had none.
	Subscriptions *SubscriptionCounts `json:"subscriptions,omitempty"`
	// ListChanges counts its lease.list_changed by list; omitted when it
	// had none.
	ListChanges *ListChangeCounts `json:"list_changes,omitempty"`
	// RequestMethods counts its request handles by method (registered,
	// and how they ended); omitted when it had none.
	RequestMethods map[events.RequestMethod]RequestCounts `json:"request_methods,omitempty"`
	// Access counts the decisions of the access policy that name the
	// activation (access.decided, and its tool calls decided under a
	// policy set) by action and outcome and by deciding policy; omitted
	// when it had none.
	Access *AccessCounts `json:"access,omitempty"`
}

// Report builds the report of activation id, from memory or the archive
// (an archive read failure reads as absent: LoadReport tells it).
func (s *State) Report(id string) (ActivationReport, bool) {
	rep, ok, _ := s.LoadReport(id)
	return rep, ok
}

// LoadReport is Report with the archive's error (wrapping ErrArchive).
func (s *State) LoadReport(id string) (ActivationReport, bool, error) {
	a, ok, err := s.find(id)
	if err != nil || !ok {
		return ActivationReport{}, false, err
	}
	ev := &a.Evidence
	rep := ActivationReport{Version: ReportVersion, Activation: a.ID, Session: a.Session, Server: a.Server,
		FirstSeq: a.FirstSeq, LastSeq: a.LastSeq, Events: a.Events, Counts: ev.Counts(),
		Resources: ev.Tracked(), Recent: ev.Recent(), Aggregates: ev.Aggregates(a.ID), Frozen: ev.frozen,
		LateEvents: ev.late, Anomalies: ev.anomalies, Connection: a.Connection, Relays: relayCopy(a.Relays),
		Subscriptions: subscriptionCopy(a.Subscriptions), ListChanges: listChangeCopy(a.ListChanges), RequestMethods: requestsCopy(a.Requests),
		Access: accessCopy(a.Access)}
	rep.Verdict, rep.Reasons, rep.ReasonsOmitted = s.verdict(a)
	if key, ok := s.leaseOf[id]; ok {
		l := *s.leases[key]
		rep.Lease = &l
	}
	return rep, true, nil
}

// Verdict returns the verdict of activation id and every reason (at most
// MaxReasons, then the number omitted) it is not confirmed. An activation
// is confirmed only by its retained close report; without one it is
// unconfirmed ("not_closed"), with the reasons the report would list now —
// unless all it ever recorded is an acquisition refused or failed before
// anything started (a cap refusal, a missing command): that is
// ResultNeverStarted, a fact with no cleanup obligation.
func (s *State) Verdict(id string) (verdict string, reasons []string, omitted int) {
	a, ok, err := s.find(id)
	if err != nil {
		return ResultUnconfirmed, []string{"archive_unreadable: " + err.Error()}, 0
	}
	if !ok {
		return ResultUnconfirmed, []string{"unknown_activation: no event names it"}, 0
	}
	return s.verdict(a)
}

// RetiredVerdict returns the verdict of a retired activation (one read
// from an Archive or listed by Retired): State.Verdict's, which for an
// activation that no lease names depends on the activation alone.
func RetiredVerdict(a *Activation) (verdict string, reasons []string, omitted int) {
	return (&State{}).verdict(a)
}

func (s *State) verdict(a *Activation) (string, []string, int) {
	if a.Reopened {
		return ResultUnconfirmed, []string{"reopened_after_close: the activation started again after its close report was retained; the report does not cover the later lifetime"}, 0
	}
	if r := a.Connection.Report; r != nil {
		return r.Result, append([]string(nil), r.Reasons...), r.Omitted
	}
	if a.Refused == refusedAccessDenied && !a.Started {
		return ResultNeverStarted, []string{"never_started: access.decided denied start_server, nothing was started"}, 0
	}
	if a.Refused != "" && !a.Started {
		return ResultNeverStarted, []string{"never_started: lease.acquire_failed (" + a.Refused + "), nothing was started"}, 0
	}
	var rs reasons
	rs.add("not_closed: no close report retained (phase " + string(a.Connection.Phase) + ")")
	if !a.Connection.Opened {
		rs.add("no_connection: connection.opened not recorded")
	}
	a.obligations(&rs)
	a.evidenceReasons(&rs)
	if running, lost := s.unpairedCalls(a); running+lost > 0 {
		// A call's outcome is recorded after the call returns, and before
		// its lease ends: unpaired while the lease is live, the call may
		// still be running; unpaired when it ended, its outcome is lost.
		rs.add("call_outcome_unknown: " + strconv.Itoa(running+lost) + " admitted call(s) with no call.finished: " +
			strconv.Itoa(running) + " running, " + strconv.Itoa(lost) + " lost (the lease ended before the outcome was recorded; it is unknown, never guessed)")
	}
	return ResultUnconfirmed, rs.list, rs.omitted
}

// unpairedCalls returns a's admitted calls with no call.finished: running
// (its lease is live) and lost (its lease ended first, even when the lease
// has since left the table).
func (s *State) unpairedCalls(a *Activation) (running, lost int) {
	lost = a.CallsLost
	if key, ok := s.leaseOf[a.ID]; ok {
		if l := s.leases[key]; l != nil && l.Activation == a.ID {
			if l.Live() {
				running = l.CallsInFlight
			} else {
				lost = max(lost, l.CallsInFlight) // calls admitted past the gate after the end
			}
		}
	}
	return running, lost
}
