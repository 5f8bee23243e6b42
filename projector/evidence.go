package projector

import (
	"strconv"

	"github.com/leaseledger/leaseledger/events"
)

// guardianRef is the reference of the guardian-supervised child target.
func guardianRef(pid int) string { return "guardian:" + strconv.Itoa(pid) }

// childStarted tracks the child a lease acquisition started: a guardian
// child (pending until its receipt) or a best-effort child, whose release
// cannot be observed (unsupported).
func (ev *Evidence) childStarted(activation string, e *event, p *events.LeaseChildStarted) {
	if ev.frozen {
		ev.late++
		return
	}
	if p.Cleanup == events.CleanupVerified {
		r := ev.track(activation, guardianRef(p.PID), ResourceGuardianChild, ScopeGuardian, e.seq)
		r.Facts.TargetPID, r.Facts.GuardianPID, r.Facts.Cleanup = p.PID, p.GuardianPID, p.Cleanup
		if r.Reason == "" {
			r.Reason = "awaiting_receipt"
		}
		return
	}
	ref := "child:" + strconv.Itoa(p.PID)
	r := ev.track(activation, ref, ResourceChild, ScopeChild, e.seq)
	r.Facts.TargetPID, r.Facts.Cleanup = p.PID, p.Cleanup
	r.Status, r.Reason = StatusUnsupported, "best_effort_cleanup"
}

// childClosed records what the host observed closing its best-effort
// child (lease.child_closed): facts only. The child stays unsupported
// (best_effort_cleanup): nothing but the host vouches for them. Facts
// about a child that is not tracked are an anomaly.
func (ev *Evidence) childClosed(e *event, p *events.LeaseChildClosed) {
	if ev.frozen {
		ev.late++
		return
	}
	r := ev.get("child:"+strconv.Itoa(p.PID), e.seq)
	if r == nil {
		return
	}
	f := &r.Facts
	code := p.ExitCode
	f.Reaped, f.ExitCode, f.Signal, f.ReapedAt = p.Reaped, &code, p.Signal, p.ReapedAt
	f.StdinClosedAt, f.StdoutClosedAt, f.StderrClosedAt = p.StdinClosedAt, p.StdoutClosedAt, p.StderrClosedAt
	f.StdoutForced, f.StderrForced = p.StdoutForced, p.StderrForced
	f.TermSentAt, f.KillSentAt = p.TermSentAt, p.KillSentAt
	f.ExitedBeforeClose, f.GroupSignalled, f.Descendants = p.ExitedBeforeClose, p.GroupSignalled, p.Descendants
}

// track returns the open resource ref, creating it pending when absent.
func (ev *Evidence) track(activation, ref, kind, scope string, seq uint64) *Resource {
	if r, ok := ev.open[ref]; ok {
		r.UpdatedSeq = seq
		return r
	}
	if ev.open == nil {
		ev.open = map[string]*Resource{}
	}
	r := ev.spare
	if r == nil {
		r = new(Resource)
	}
	ev.spare = nil
	// Every field is set afresh: the ring's copy of the resource this
	// storage last held keeps its own slices and pointers.
	*r = Resource{ID: ResourceID{Activation: activation, Reference: ref}, Kind: kind, Scope: scope,
		Status: StatusPending, RegisteredSeq: seq, UpdatedSeq: seq}
	ev.open[ref] = r
	return r
}

// get returns the open resource ref, counting an anomaly when it is not
// tracked (never registered, or already confirmed).
func (ev *Evidence) get(ref string, seq uint64) *Resource {
	r, ok := ev.open[ref]
	if !ok {
		ev.anomalies++
		return nil
	}
	r.UpdatedSeq = seq
	return r
}

// apply folds a guardian.* or http.* event into the evidence.
func (ev *Evidence) apply(activation string, e *event) {
	if ev.frozen {
		ev.late++
		return
	}
	switch p := e.payload.(type) {
	case *events.HTTPRegistered:
		if _, dup := ev.open[p.Ref]; dup {
			ev.anomalies++
			return
		}
		r := ev.track(activation, p.Ref, ResourceHTTPRequest, p.Scope, e.seq)
		r.Facts.Method, r.Facts.Origin = string(p.Method), p.Origin
		r.Reason = "awaiting_barrier"
	case *events.HTTPRedirect:
		parent := ev.get(p.Ref, e.seq)
		scope := "http"
		if parent != nil {
			scope = parent.Scope
			if len(parent.Facts.Hops) < events.MaxRedirectHops {
				parent.Facts.Hops = append(parent.Facts.Hops, p.HopRef)
			} else {
				ev.anomalies++
			}
		}
		if _, dup := ev.open[p.HopRef]; dup {
			ev.anomalies++
			return
		}
		hop := ev.track(activation, p.HopRef, ResourceHTTPHop, scope, e.seq)
		same := p.SameOrigin
		hop.Facts.Parent, hop.Facts.Hop, hop.Facts.RedirectStatus = p.Ref, p.Hop, p.Status
		hop.Facts.Origin, hop.Facts.SameOrigin = p.Origin, &same
		hop.Reason = "awaiting_barrier"
		if parent != nil && parent.Facts.WorkerDown {
			hop.Facts.WorkerDown, hop.Facts.Worker, hop.Facts.WorkerReason = true, parent.Facts.Worker, "via_parent"
		}
	case *events.HTTPCompleted:
		if r := ev.get(p.Ref, e.seq); r != nil {
			r.Facts.Completed = true
			r.Facts.CompletionStatus, r.Facts.CompletionResult, r.Facts.BodyBytes = p.Status, string(p.Outcome), p.BodyBytes
		}
	case *events.HTTPBarrier:
		r := ev.get(p.Ref, e.seq)
		if r == nil {
			return
		}
		r.Facts.Barrier = p.Outcome
		r.Facts.Barriers++
		if r.Status == StatusLost || r.Status == StatusUnsupported {
			return // terminal: a later barrier cannot restore lost evidence
		}
		switch p.Outcome {
		case events.HTTPBarrierOK:
			ev.settleHTTP(r, e)
		case events.HTTPBarrierUnsupported:
			r.Status, r.Reason = StatusUnsupported, "barrier_unsupported"
		default: // error, timeout
			r.Status, r.Reason = StatusMissing, "barrier_"+string(p.Outcome)
		}
	case *events.HTTPWorkerDown:
		r := ev.get(p.Ref, e.seq)
		if r == nil {
			return
		}
		r.Facts.WorkerDown, r.Facts.Worker, r.Facts.WorkerReason = true, p.Worker, p.Reason
		// The worker owned the request's hops too (active workers retain
		// all redirect hops): its end is observed for them as well.
		for _, h := range r.Facts.Hops {
			if hop, ok := ev.open[h]; ok && !hop.Facts.WorkerDown {
				hop.Facts.WorkerDown, hop.Facts.Worker, hop.Facts.WorkerReason = true, p.Worker, "via_parent"
				hop.UpdatedSeq = e.seq
				if hop.Facts.Barrier == events.HTTPBarrierOK && hop.Status == StatusPending {
					ev.settleHTTP(hop, e)
				}
			}
		}
		if r.Facts.Barrier == events.HTTPBarrierOK && r.Status == StatusPending {
			ev.settleHTTP(r, e)
		}
	case *events.HTTPLost:
		if r := ev.get(p.Ref, e.seq); r != nil {
			r.Status, r.Reason, r.Facts.LostReason = StatusLost, string(p.Reason), string(p.Reason)
		}
	case *events.GuardianStarted:
		r := ev.track(activation, guardianRef(p.TargetPID), ResourceGuardianChild, ScopeGuardian, e.seq)
		r.Facts.TargetPID, r.Facts.GuardianPID = p.TargetPID, p.GuardianPID
		r.Facts.HelperVersion, r.Facts.PIDFD = p.HelperVersion, p.PIDFD
		if r.Reason == "" {
			r.Reason = "awaiting_receipt"
		}
	case *events.GuardianSignal:
		if r := ev.get(guardianRef(p.TargetPID), e.seq); r != nil {
			if len(r.Facts.Signals) < MaxSignals {
				r.Facts.Signals = append(r.Facts.Signals, string(p.Signal))
			}
		}
	case *events.GuardianReaped:
		if r := ev.get(guardianRef(p.TargetPID), e.seq); r != nil {
			code := p.ExitCode
			r.Facts.Reaped, r.Facts.ExitCode, r.Facts.Signal, r.Facts.ReapedAt = true, &code, p.Signal, p.At
		}
	case *events.GuardianReceipt:
		ev.receipt(activation, e, p)
	case *events.GuardianLost:
		ref := guardianRef(p.TargetPID)
		if p.TargetPID == 0 {
			ref = ev.soleGuardian()
		}
		r := ev.track(activation, ref, ResourceGuardianChild, ScopeGuardian, e.seq)
		r.Status, r.Reason, r.Facts.LostReason = StatusLost, string(p.Reason), string(p.Reason)
		// Partial facts of the unconfirmed cleanup: shown, never confirming
		// (lost is terminal).
		f := &r.Facts
		if p.StdinClosedAt != nil {
			f.StdinClosedAt = p.StdinClosedAt
		}
		if p.StdoutClosedAt != nil {
			f.StdoutClosedAt, f.StdoutForced = p.StdoutClosedAt, p.StdoutForced
		}
		if p.StderrClosedAt != nil {
			f.StderrClosedAt, f.StderrForced = p.StderrClosedAt, p.StderrForced
		}
		if n := len(p.DescendantsSeen) + p.DescendantsDropped; n > 0 {
			f.DescendantsSeen, f.DescendantsKilled = n, len(p.DescendantsKilled)
		}
		f.StdinDroppedBytes = max(f.StdinDroppedBytes, p.StdinDroppedBytes)
	}
}

// soleGuardian returns the reference of the activation's one open guardian
// child, for a guardian.lost that names no pid.
func (ev *Evidence) soleGuardian() string {
	found := ""
	for _, k := range sortedKeys(ev.open) {
		if ev.open[k].Kind == ResourceGuardianChild {
			if found != "" {
				return "guardian:unknown"
			}
			found = k
		}
	}
	if found == "" {
		return "guardian:unknown"
	}
	return found
}

// receipt applies the guardian's correlated receipt. Confirmation needs
// real facts: the child reaped, a close fact for stdin, stdout and stderr,
// and the helper's own exit status 0 (a nonzero target exit still confirms).
func (ev *Evidence) receipt(activation string, e *event, p *events.GuardianReceipt) {
	r := ev.track(activation, guardianRef(p.TargetPID), ResourceGuardianChild, ScopeGuardian, e.seq)
	if r.Status == StatusLost {
		ev.anomalies++ // a receipt after the evidence was declared lost
		return
	}
	f := &r.Facts
	f.Receipt, f.HelperVersion, f.TargetPID = true, p.HelperVersion, p.TargetPID
	f.Reaped = f.Reaped || p.Reaped
	code, helper := p.ExitCode, p.HelperExitCode
	f.ExitCode, f.HelperExitCode = &code, &helper
	if p.Signal != "" {
		f.Signal = p.Signal
	}
	f.StdinClosedAt, f.StdoutClosedAt, f.StderrClosedAt = p.StdinClosedAt, p.StdoutClosedAt, p.StderrClosedAt
	f.TermSentAt, f.KillSentAt = p.TermSentAt, p.KillSentAt
	f.DescendantsSeen, f.DescendantsKilled = len(p.DescendantsSeen)+p.DescendantsDropped, len(p.DescendantsKilled)
	f.StdoutForced, f.StderrForced, f.StdinDroppedBytes = p.StdoutForced, p.StderrForced, p.StdinDroppedBytes
	switch {
	case p.HelperExitCode != 0:
		r.Status, r.Reason, f.LostReason = StatusLost, string(events.LostHelper), string(events.LostHelper)
	case !p.Reaped:
		r.Status, r.Reason = StatusMissing, "not_reaped"
	case p.StdinClosedAt == nil:
		r.Status, r.Reason = StatusMissing, "stdin_close_missing"
	case p.StdoutClosedAt == nil:
		r.Status, r.Reason = StatusMissing, "stdout_close_missing"
	case p.StderrClosedAt == nil:
		r.Status, r.Reason = StatusMissing, "stderr_close_missing"
	default:
		ev.confirm(r, e)
	}
}

// settleHTTP confirms an HTTP resource whose barrier returned ok once its
// owning worker's end is observed; until then it stays pending.
func (ev *Evidence) settleHTTP(r *Resource, e *event) {
	if !r.Facts.WorkerDown {
		r.Status, r.Reason = StatusPending, "awaiting_worker_down"
		return
	}
	ev.confirm(r, e)
}

// confirm moves r out of the tracked set into the recent window; when the
// window is full its oldest receipt is folded into its scope's aggregate.
func (ev *Evidence) confirm(r *Resource, e *event) {
	delete(ev.open, r.ID.Reference)
	r.Status, r.Reason = StatusConfirmed, ""
	r.ConfirmedSeq, r.ConfirmedAt = e.seq, events.Instant{Time: e.time}
	if ev.ringLen == RecentReceipts {
		oldest := &ev.ring[ev.ringStart]
		if ev.aggregates == nil {
			ev.aggregates = map[string]uint64{}
		}
		ev.aggregates[oldest.Scope]++
		*oldest = *r
		ev.ringStart = (ev.ringStart + 1) % RecentReceipts
	} else {
		ev.ring[(ev.ringStart+ev.ringLen)%RecentReceipts] = *r
		ev.ringLen++
	}
	ev.confirmed++
	ev.spare = r // no longer referenced: open dropped it, the ring holds a copy
}

// ---- close ----

// close freezes the activation's evidence and builds its retained close
// report. retained is false for a close recorded against an activation
// with no retained connection state (never opened here, or a repeat close
// with nothing stored): such a report is unconfirmed.
func (a *Activation) close(e *event, elapsed int64, retained bool) {
	ev := &a.Evidence
	ev.frozen, ev.frozenSeq = true, e.seq
	rep := &CloseReport{Version: ReportVersion, Activation: a.ID, Retained: retained,
		Counts: ev.Counts(), ClosedSeq: e.seq, ClosedAt: events.Instant{Time: e.time}, ElapsedNS: elapsed}
	var rs reasons
	if !retained {
		rs.add("no_retained_report: close recorded against an activation with no retained connection report")
	}
	rep.Obligations = a.obligations(&rs)
	a.evidenceReasons(&rs)
	rep.Reasons, rep.Omitted = rs.list, rs.omitted
	rep.Result = ResultConfirmed
	if rs.n() > 0 {
		rep.Result = ResultUnconfirmed
		if retained && a.onlyUnverified(rep.Obligations) {
			rep.Result = ResultUnverified
		}
	}
	a.Connection.Report = rep
}

// onlyUnverified reports whether all that keeps a close from confirmed is
// a best-effort child's release nobody can vouch for: the connection's
// cleanup is best_effort, every obligation but supervisor is confirmed,
// supervisor is unsupported, there is no anomaly, and every unconfirmed
// resource is a best-effort child (at least one) that is unsupported and
// whose exit the host observed (lease.child_closed with reaped). A child
// whose exit the host did not see may still run: that close is
// unconfirmed.
func (a *Activation) onlyUnverified(obs []ObligationReport) bool {
	ev := &a.Evidence
	if a.Connection.Cleanup != events.CleanupBestEffort || ev.anomalies > 0 || len(ev.open) == 0 {
		return false
	}
	for _, o := range obs {
		want := StatusConfirmed
		if o.Name == events.ObligationSupervisor {
			want = StatusUnsupported
		}
		if o.Status != want {
			return false
		}
	}
	for _, r := range ev.open {
		if r.Kind != ResourceChild || r.Status != StatusUnsupported || !r.Facts.Reaped {
			return false
		}
	}
	return true
}

// reasons collects at most MaxReasons reasons and counts the rest.
type reasons struct {
	list    []string
	omitted int
}

func (r *reasons) add(s string) {
	if len(r.list) < MaxReasons {
		r.list = append(r.list, s)
	} else {
		r.omitted++
	}
}

func (r *reasons) n() int { return len(r.list) + r.omitted }

// obligations derives each close obligation's status from its recorded
// barrier and, for supervisor and http_requests, from the evidence: a
// barrier that says ok cannot confirm an obligation whose own resources
// are not all confirmed.
func (a *Activation) obligations(rs *reasons) []ObligationReport {
	c := &a.Connection
	ev := &a.Evidence
	var guardianOpen, httpOpen []*Resource
	guardianConfirmed := ev.ConfirmedCount(ScopeGuardian) > 0
	httpSeen := false
	for _, k := range sortedKeys(ev.open) {
		r := ev.open[k]
		switch r.Kind {
		case ResourceGuardianChild, ResourceChild:
			guardianOpen = append(guardianOpen, r)
		default:
			httpOpen = append(httpOpen, r)
			httpSeen = true
		}
	}
	for scope, n := range ev.aggregates {
		if scope != ScopeGuardian && scope != ScopeChild && n > 0 {
			httpSeen = true
		}
	}
	for i := range ev.ringLen {
		if r := &ev.ring[(ev.ringStart+i)%RecentReceipts]; r.Kind == ResourceHTTPRequest || r.Kind == ResourceHTTPHop {
			httpSeen = true
		}
	}
	out := make([]ObligationReport, len(Obligations))
	for i, name := range Obligations {
		o := ObligationReport{Name: name, Last: c.Barriers[i]}
		if outcome := c.Barriers[i].Outcome; outcome == "" {
			o.Status, o.Reason = StatusMissing, "no_barrier_observed"
		} else if o.Status = outcome.Status(); o.Status != StatusConfirmed { // the runtime's close report applies the same rule
			o.Reason = "barrier_" + string(outcome)
		}
		switch name {
		case events.ObligationSupervisor:
			if o.Status == StatusConfirmed && len(guardianOpen) > 0 {
				o.Status, o.Reason = guardianOpen[0].Status, "child_evidence_"+string(guardianOpen[0].Status)
			}
			if o.Status == StatusConfirmed && c.Cleanup == events.CleanupVerified && !guardianConfirmed {
				o.Status, o.Reason = StatusMissing, "no_guardian_receipt"
			}
		case events.ObligationHTTPRequests:
			if c.Barriers[i].Outcome == "" && !httpSeen {
				o.Status, o.Reason = StatusConfirmed, "none_owned"
			}
			if o.Status == StatusConfirmed && len(httpOpen) > 0 {
				o.Status, o.Reason = httpOpen[0].Status, "request_evidence_"+string(httpOpen[0].Status)
			}
		}
		if o.Status != StatusConfirmed {
			rs.add("obligation " + string(name) + ": " + string(o.Status) + " (" + o.Reason + ")")
		}
		out[i] = o
	}
	return out
}

// evidenceReasons lists every tracked resource that is not confirmed and
// the evidence anomalies.
func (a *Activation) evidenceReasons(rs *reasons) {
	ev := &a.Evidence
	for _, k := range sortedKeys(ev.open) {
		r := ev.open[k]
		rs.add("resource " + r.ID.String() + ": " + string(r.Status) + " (" + r.Reason + ")")
	}
	if ev.anomalies > 0 {
		rs.add("evidence_anomalies: " + strconv.FormatUint(ev.anomalies, 10) + " event(s) about unknown or duplicate references")
	}
}
