package events

// The close vocabulary: a connection's phases, its close obligations, what
// a barrier observed, the status a close report gives each obligation (and
// the rule from one to the other), the close result, and why a lease ended
// or a call was refused. The runtime writes its close reports and the
// projector recomputes them from the log with these same words, so they
// are defined once, here, where both import them.

// Phase is a connection's phase. It only moves forward: active → closing →
// closed. A connection starts active; connection.phase records only the
// later two (see [Phase.Recorded]).
type Phase string

// Phase values, in order.
const (
	PhaseActive  Phase = "active"
	PhaseClosing Phase = "closing"
	PhaseClosed  Phase = "closed"
)

// Valid reports whether v is one of the Phase values.
func (v Phase) Valid() bool {
	switch v {
	case PhaseActive, PhaseClosing, PhaseClosed:
		return true
	}
	return false
}

// Recorded reports whether v may be entered by a connection.phase event:
// closing or closed. Active is where every connection starts, so no event
// enters it; a recorded "active" would be a regression the reducer must not
// have to interpret.
func (v Phase) Recorded() bool { return v == PhaseClosing || v == PhaseClosed }

// values lists the Phase values in catalogue order.
func (Phase) values() []Phase { return []Phase{PhaseActive, PhaseClosing, PhaseClosed} }

// recordedPhase validates a connection.phase's phase ([Phase.Recorded]).
func recordedPhase(field string, v Phase) error {
	if v.Recorded() {
		return nil
	}
	return invalid(field, "want one of "+string(PhaseClosing)+", "+string(PhaseClosed))
}

// Obligation is one of the separately confirmed obligations of a connection close.
type Obligation string

// Obligation values.
const (
	ObligationTransport    Obligation = "transport"
	ObligationWorkers      Obligation = "workers"
	ObligationSupervisor   Obligation = "supervisor"
	ObligationHTTPRequests Obligation = "http_requests"
)

// Valid reports whether v is one of the Obligation values.
func (v Obligation) Valid() bool {
	switch v {
	case ObligationTransport, ObligationWorkers, ObligationSupervisor, ObligationHTTPRequests:
		return true
	}
	return false
}

// CloseObligations returns every close obligation in report order: the
// order the runtime closes them in and both close reports list them in. It
// is an array so that a report indexed by obligation has a fixed size the
// compiler checks.
func CloseObligations() [4]Obligation {
	return [4]Obligation{ObligationTransport, ObligationWorkers, ObligationSupervisor, ObligationHTTPRequests}
}

// values lists the Obligation values in catalogue order.
func (Obligation) values() []Obligation {
	all := CloseObligations()
	return all[:]
}

// BarrierOutcome is what a close barrier observed for one obligation.
type BarrierOutcome string

// BarrierOutcome values.
const (
	BarrierOK          BarrierOutcome = "ok"
	BarrierError       BarrierOutcome = "error"
	BarrierTimeout     BarrierOutcome = "timeout"
	BarrierMissing     BarrierOutcome = "missing"
	BarrierUnsupported BarrierOutcome = "unsupported"
	BarrierPending     BarrierOutcome = "pending"
)

// Valid reports whether v is one of the BarrierOutcome values.
func (v BarrierOutcome) Valid() bool {
	switch v {
	case BarrierOK, BarrierError, BarrierTimeout, BarrierMissing, BarrierUnsupported, BarrierPending:
		return true
	}
	return false
}

// values lists the BarrierOutcome values in catalogue order.
func (BarrierOutcome) values() []BarrierOutcome {
	return []BarrierOutcome{BarrierOK, BarrierError, BarrierTimeout, BarrierMissing, BarrierUnsupported, BarrierPending}
}

// Status is the cleanup status of one owned resource or close obligation.
// It is a verdict, never recorded: the runtime's close report and the
// projector derive it from recorded facts, the obligations' through
// [BarrierOutcome.Status]. Only StatusConfirmed counts towards a confirmed
// result; every other status blocks it.
type Status string

// Status values.
const (
	// StatusPending: the evidence is not complete yet (no barrier, no
	// observed worker end, a barrier that answered pending).
	StatusPending Status = "pending"
	// StatusConfirmed: the evidence proves release.
	StatusConfirmed Status = "confirmed"
	// StatusFailed: an obligation's barrier returned error or timeout.
	StatusFailed Status = "failed"
	// StatusMissing: evidence was asked for and did not come back complete.
	StatusMissing Status = "missing"
	// StatusUnsupported: release cannot be observed (a barrier that
	// answered unsupported, a best-effort child).
	StatusUnsupported Status = "unsupported"
	// StatusLost: evidence can no longer be obtained (http.lost,
	// guardian.lost, a helper that did not exit 0).
	StatusLost Status = "lost"
)

// Valid reports whether v is one of the Status values.
func (v Status) Valid() bool {
	switch v {
	case StatusPending, StatusConfirmed, StatusFailed, StatusMissing, StatusUnsupported, StatusLost:
		return true
	}
	return false
}

// values lists the Status values in catalogue order.
func (Status) values() []Status {
	return []Status{StatusPending, StatusConfirmed, StatusFailed, StatusMissing, StatusUnsupported, StatusLost}
}

// Status is the rule from a recorded barrier outcome to its obligation's
// status: ok is confirmed, error and timeout are failed, pending and
// unsupported keep their names, and missing (or no outcome at all) is
// missing. The runtime's close report and the projector's both apply it,
// so the two agree by construction; the projector may lower a confirmed
// status further from other evidence (an open child, an unsettled request).
func (v BarrierOutcome) Status() Status {
	switch v {
	case BarrierOK:
		return StatusConfirmed
	case BarrierError, BarrierTimeout:
		return StatusFailed
	case BarrierPending:
		return StatusPending
	case BarrierUnsupported:
		return StatusUnsupported
	}
	return StatusMissing
}

// Result is the verdict of a close report or of an activation's audit.
type Result string

// Result values.
const (
	// ResultConfirmed: every obligation confirmed and every fact recorded.
	ResultConfirmed Result = "confirmed"
	// ResultUnconfirmed: anything else; the reasons say why.
	ResultUnconfirmed Result = "unconfirmed"
	// ResultNeverStarted is the verdict of an activation whose acquisition
	// was refused or failed before anything was started: no resource, so
	// no cleanup to confirm. Only the projector's audit gives it.
	ResultNeverStarted Result = "never_started"
	// ResultUnverified is the verdict of a closed activation whose child
	// the host started itself ("cleanup": "direct"): everything the host
	// could observe closed as it should (every other obligation and
	// resource confirmed, the host's own wait returned), but nothing
	// vouches for the child's release, so it is not confirmed either.
	// It is no failure: an audit counts it apart and does not fail on it.
	ResultUnverified Result = "unverified"
)

// Valid reports whether v is one of the Result values.
func (v Result) Valid() bool {
	switch v {
	case ResultConfirmed, ResultUnconfirmed, ResultNeverStarted, ResultUnverified:
		return true
	}
	return false
}

// values lists the Result values in catalogue order.
func (Result) values() []Result {
	return []Result{ResultConfirmed, ResultUnconfirmed, ResultNeverStarted, ResultUnverified}
}

// TerminationReason is why a lease left the table (lease.terminated).
type TerminationReason string

// TerminationReason values.
const (
	// TerminatedRevoked: the host revoked the lease (the last call out
	// ended the child).
	TerminatedRevoked TerminationReason = "revoked"
	// TerminatedPoisoned: a call named a tool or digest the pinned listing
	// does not have.
	TerminatedPoisoned TerminationReason = "poisoned"
	// TerminatedReaped: the idle reaper ended it.
	TerminatedReaped TerminationReason = "reaped"
	// TerminatedSessionEnded: its session ended.
	TerminatedSessionEnded TerminationReason = "session_ended"
	// TerminatedAll: the manager ended every lease (TerminateAll, Close).
	TerminatedAll TerminationReason = "terminate_all"
	// TerminatedStaleConfig: the server's configuration changed; a new
	// activation replaces it.
	TerminatedStaleConfig TerminationReason = "stale_config"
	// TerminatedChildExited: the child ended on its own.
	TerminatedChildExited TerminationReason = "child_exited"
	// TerminatedTransportError: a call's transport failed while the child
	// was still running.
	TerminatedTransportError TerminationReason = "transport_error"
	// TerminatedAcquireFailed: the acquisition failed after the child
	// started.
	TerminatedAcquireFailed TerminationReason = "acquire_failed"
	// TerminatedWhileStarting: the lease was removed (session end,
	// TerminateAll) while its child was starting.
	TerminatedWhileStarting TerminationReason = "terminated"
	// TerminatedConnectionClosed: the host closed the connection
	// (CloseConnection).
	TerminatedConnectionClosed TerminationReason = "connection_closed"
	// TerminatedHostLost: recorded at recovery for a lease the log left
	// live when the host stopped without ending it.
	TerminatedHostLost TerminationReason = "host_lost"
	// TerminatedWedged: the server let runtime.MaxConsecutiveTimeouts
	// calls in a row run past their budget; the lease was retired.
	TerminatedWedged TerminationReason = "wedged"
	// TerminatedRemoved: a reload of the configuration no longer names
	// the lease's server.
	TerminatedRemoved TerminationReason = "removed"
	// TerminatedListingFailed: the server notified a tool list change and
	// listing its tools again failed (or was too large), so the lease no
	// longer has a listing to admit calls against.
	TerminatedListingFailed TerminationReason = "listing_failed"
)

// Valid reports whether v is one of the TerminationReason values.
func (v TerminationReason) Valid() bool {
	switch v {
	case TerminatedRevoked, TerminatedPoisoned, TerminatedReaped, TerminatedSessionEnded, TerminatedAll,
		TerminatedStaleConfig, TerminatedChildExited, TerminatedTransportError, TerminatedAcquireFailed,
		TerminatedWhileStarting, TerminatedConnectionClosed, TerminatedHostLost, TerminatedWedged, TerminatedRemoved,
		TerminatedListingFailed:
		return true
	}
	return false
}

// values lists the TerminationReason values in catalogue order.
func (TerminationReason) values() []TerminationReason {
	return []TerminationReason{TerminatedRevoked, TerminatedPoisoned, TerminatedReaped, TerminatedSessionEnded,
		TerminatedAll, TerminatedStaleConfig, TerminatedChildExited, TerminatedTransportError,
		TerminatedAcquireFailed, TerminatedWhileStarting, TerminatedConnectionClosed, TerminatedHostLost, TerminatedWedged, TerminatedRemoved,
		TerminatedListingFailed}
}

// RefusalReason is why the call gate refused a call (call.refused).
type RefusalReason string

// RefusalReason values.
const (
	// RefusedCancelled: the lease was revoked.
	RefusedCancelled RefusalReason = "cancelled"
	// RefusedPoisoned: an earlier call poisoned the lease.
	RefusedPoisoned RefusalReason = "poisoned"
	// RefusedTerminated: the lease was taken out of service for another
	// reason (its child ended, its configuration changed, …).
	RefusedTerminated RefusalReason = "terminated"
	// RefusedDenied: the host denied the server to the session.
	RefusedDenied RefusalReason = "denied"
	// RefusedListingChanged: the call named a digest of a listing the
	// lease pinned earlier and has since replaced (its server changed its
	// tools); the lease is kept.
	RefusedListingChanged RefusalReason = "listing_changed"
	// RefusedPolicy: the access policy in force denied the call to the
	// session's principal (call.refused names the deciding policies).
	RefusedPolicy RefusalReason = "policy"
	// RefusedNameMismatch and RefusedDigestMismatch: this call poisons the
	// lease; they are the [PoisonReason] values ([PoisonReason.Refusal]).
	RefusedNameMismatch   RefusalReason = RefusalReason(PoisonNameMismatch)
	RefusedDigestMismatch RefusalReason = RefusalReason(PoisonDigestMismatch)
)

// Valid reports whether v is one of the RefusalReason values.
func (v RefusalReason) Valid() bool {
	switch v {
	case RefusedCancelled, RefusedPoisoned, RefusedTerminated, RefusedDenied, RefusedNameMismatch, RefusedDigestMismatch,
		RefusedListingChanged, RefusedPolicy:
		return true
	}
	return false
}

// values lists the RefusalReason values in catalogue order.
func (RefusalReason) values() []RefusalReason {
	return []RefusalReason{RefusedCancelled, RefusedPoisoned, RefusedTerminated, RefusedDenied,
		RefusedNameMismatch, RefusedDigestMismatch, RefusedListingChanged, RefusedPolicy}
}

// Refusal is the call.refused reason of the call that poisons a lease for
// reason v: a poisoning call is refused with the poison's own name.
func (v PoisonReason) Refusal() RefusalReason { return RefusalReason(v) }
