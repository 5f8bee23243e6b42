package runtime

import (
	"context"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Owned connections: every lease's child is one owned connection of its
// activation. A host may open one explicitly (OpenConnection: a host
// activation id, one-shot), close it explicitly under one budget
// (CloseConnection) and read its retained close report (ConnectionStatus).

// Bounds and versions of owned connections.
const (
	// ConnectionReportVersion is the version of ConnectionReport.
	ConnectionReportVersion = 1
	// DefaultMaxRetainedReports is the default bound on close reports the
	// manager retains (Options.MaxRetainedReports); beyond it the oldest
	// retained report is evicted and counted (EvictedReports).
	DefaultMaxRetainedReports = 1024
	// CloseMargin is added to the guardian's cleanup budget
	// (guardian.Spec.CleanupBudget) to form the default close budget: the
	// one deadline shared by the transport, workers and supervisor steps.
	CloseMargin = time.Second
	// oneShotSweepMin is the size of the one-shot claim table at which
	// claims of ended sessions are swept (then at twice the size left).
	oneShotSweepMin = 256
)

// ConnectionPhase is the phase of an owned connection: it moves active →
// closing → closed only. The phases are events' (events.Phase), the same
// words the projector reports.
type ConnectionPhase = events.Phase

// Connection phases.
const (
	ConnectionActive  = events.PhaseActive
	ConnectionClosing = events.PhaseClosing
	ConnectionClosed  = events.PhaseClosed
)

// ObligationStatus is one close obligation's status in a close report:
// events.BarrierOutcome.Status of its recorded outcome, the rule the
// projector applies to the same record.
type ObligationStatus = events.Status

// Obligation statuses.
const (
	ObligationConfirmed   = events.StatusConfirmed   // outcome ok
	ObligationFailed      = events.StatusFailed      // outcome error or timeout
	ObligationMissing     = events.StatusMissing     // outcome missing
	ObligationPending     = events.StatusPending     // outcome pending
	ObligationUnsupported = events.StatusUnsupported // outcome unsupported
)

// Close report results, as strings: the projector's verdicts
// (events.Result's values), which the host compares them with.
const (
	ResultConfirmed   = string(events.ResultConfirmed)
	ResultUnconfirmed = string(events.ResultUnconfirmed)
	// ResultUnverified: a direct child's close ("cleanup": "direct")
	// where every obligation the host can observe is confirmed and it saw
	// the child exit, but supervisor is unsupported: nothing vouches for
	// the child's release. Never confirmed.
	ResultUnverified = string(events.ResultUnverified)
)

// ObligationReport is what one close obligation observed, as recorded in
// its connection.barrier.
type ObligationReport struct {
	Name      events.Obligation
	Outcome   events.BarrierOutcome
	Status    ObligationStatus
	Detail    string // machine code, when there is one
	ElapsedNS int64  // the step's own time
}

// ConnectionReport is the version-1 report of an owned connection. Before
// the close it says active (or closing, with the budget); once closed it
// holds each obligation's outcome and elapsed time and the result, which
// is confirmed only when every obligation is confirmed and every fact was
// recorded. A closed report is retained by the manager (bounded by
// Options.MaxRetainedReports) and never changes: a repeated close returns
// it as stored.
type ConnectionReport struct {
	Version    int
	Activation string
	Session    string // the lease key's session (SharedSessionKey for shared servers)
	Server     string
	OneShot    bool
	Phase      ConnectionPhase
	// Result is ResultConfirmed, ResultUnconfirmed or (a direct child)
	// ResultUnverified once closed, empty before.
	Result string
	// Retained is false for a close against an activation this manager
	// holds nothing for (its tree already gone, or its report evicted):
	// such a report is unconfirmed.
	Retained bool
	// Reason is why the lease ended (lease.terminated's reason).
	Reason events.TerminationReason
	// BudgetNS is the one close budget; ElapsedNS the time the close
	// steps took (transport + workers + supervisor ≤ budget).
	BudgetNS, ElapsedNS int64
	// Obligations are transport, workers, supervisor and http_requests,
	// in that order.
	Obligations []ObligationReport
	// Lost is the guardian.lost reason when the supervisor step is
	// unconfirmed; empty otherwise.
	Lost events.LostReason
	// Recorded is false when the close facts failed to append: the ledger
	// cannot back the report, so it is unconfirmed.
	Recorded bool
}

// Confirmed reports whether the connection closed with every obligation
// confirmed.
func (r ConnectionReport) Confirmed() bool {
	return r.Phase == ConnectionClosed && r.Result == ResultConfirmed
}

// ConnectionOptions are a host's choices for a connection it opens.
type ConnectionOptions struct {
	// Activation is the host-supplied activation id (events.ValidID); it
	// must not be in use by a live lease nor name a retained report. Empty:
	// one is minted.
	Activation string
	// OneShot: the activation never gets a replacement executable; once
	// its child ended, later calls under it fail with ErrOneShotEnded
	// until the host opens a new connection. A server entry's "oneShot":
	// true does the same for every acquisition.
	OneShot bool
}

// ConnectionRef names a connection to close: by Activation, or by Session
// and Server (the server's lease key: SharedSessionKey as Session for a
// shared server; Server is the config name, as in mcp.json, mapped with
// ServerID like every lookup). With Activation set, Session, when given,
// must be the lease's key session.
type ConnectionRef struct {
	Session, Server, Activation string
}

// connTable is the manager's connection bookkeeping, guarded by
// Manager.mu.
type connTable struct {
	// byAct indexes every lease that may still own a child (mapped,
	// starting, detached) by activation; a lease leaves it when settled.
	byAct map[string]*lease
	// claims holds the one-shot activation of a key: while a claim stands
	// and its lease is gone, acquisitions at the key fail with
	// ErrOneShotEnded. A claim of a session that ended is stale.
	claims  map[leaseKey]oneShotClaim
	sweepAt int
	// reports are the retained closed reports; order is their FIFO.
	reports map[string]*ConnectionReport
	order   []string
	evicted int
}

type oneShotClaim struct {
	st         *sessionState // nil for shared keys
	activation string
}

func (t *connTable) init() {
	if t.byAct == nil {
		t.byAct = make(map[string]*lease)
		t.claims = make(map[leaseKey]oneShotClaim)
		t.reports = make(map[string]*ConnectionReport)
	}
}

// inUse reports whether act names a live lease or a retained report.
func (t *connTable) inUse(act string) bool {
	_, live := t.byAct[act]
	_, kept := t.reports[act]
	return live || kept
}

// claim records key's one-shot activation, sweeping stale claims when the
// table has grown (amortised: the next sweep waits for twice the size).
func (m *Manager) claimLocked(key leaseKey, act string) {
	t := &m.conns
	var st *sessionState
	if key.session != SharedSessionKey {
		if st = m.sessions[key.session]; st == nil {
			return // no session: nobody can call under it again
		}
	}
	if len(t.claims) >= max(t.sweepAt, oneShotSweepMin) {
		for k, c := range t.claims {
			if c.st != nil && m.sessions[k.session] != c.st {
				delete(t.claims, k)
			}
		}
		t.sweepAt = 2 * len(t.claims)
	}
	t.claims[key] = oneShotClaim{st: st, activation: act}
}

// retainReportLocked stores a closed report, evicting the oldest beyond
// the cap.
func (m *Manager) retainReportLocked(r *ConnectionReport) {
	t := &m.conns
	t.init()
	if _, ok := t.reports[r.Activation]; ok {
		return
	}
	t.reports[r.Activation] = r
	t.order = append(t.order, r.Activation)
	for len(t.order) > m.maxReports() {
		delete(t.reports, t.order[0])
		t.order = t.order[1:]
		t.evicted++
	}
}

func (m *Manager) maxReports() int {
	if m.opts.MaxRetainedReports > 0 {
		return m.opts.MaxRetainedReports
	}
	return DefaultMaxRetainedReports
}

// EvictedReports returns how many retained close reports were evicted
// (oldest first) to keep at most Options.MaxRetainedReports.
func (m *Manager) EvictedReports() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conns.evicted
}

// OpenConnection opens (or returns) this session's connection to server
// with the host's options: a host-supplied activation id and one-shot. It
// returns the connection's active report. When a connection for the key
// is already live it is returned if compatible (same activation when one
// is given, one-shot when asked), else ErrConnectionOpen. An explicit open
// lifts an ended one-shot connection's refusal: it starts a new
// activation. An invalid activation id, or one used by a live lease or a
// retained report, is ErrInvalidRequest.
func (c LeaseCapability) OpenConnection(ctx context.Context, server string, opts ConnectionOptions) (ConnectionReport, error) {
	if opts.Activation != "" && !events.ValidID(opts.Activation) {
		return ConnectionReport{}, newErr("open_connection", &leaseKey{c.st.id, ""}, ErrInvalidRequest, nil)
	}
	if err := c.m.retain(c.st); err != nil {
		return ConnectionReport{}, err
	}
	defer func() { c.m.keep(c.m.release(ctx, c.st)) }()
	if err := c.m.allowStart(ctx, c.st, server); err != nil {
		return ConnectionReport{}, err
	}
	l, err := c.m.leaseForOpts(ctx, c.st.id, server, acquireOpts{explicit: true, activation: opts.Activation, oneShot: opts.OneShot})
	if err != nil {
		return ConnectionReport{}, err
	}
	return l.activeReport(), nil
}

// activeReport is the report of a lease whose close has not completed.
func (l *lease) activeReport() ConnectionReport {
	if r := l.report.Load(); r != nil {
		return *r
	}
	return ConnectionReport{Version: ConnectionReportVersion, Activation: l.activation, Session: l.key.session,
		Server: l.key.server, OneShot: l.oneShot, Phase: ConnectionActive}
}

// ConnectionStatus returns the report of activation: the retained close
// report once closed, the active or closing report of a live connection;
// false when the manager holds nothing for it.
func (m *Manager) ConnectionStatus(activation string) (ConnectionReport, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.conns.reports[activation]; r != nil {
		return *r, true
	}
	if l := m.conns.byAct[activation]; l != nil && l.isReady() && l.child != nil {
		return l.activeReport(), true
	}
	return ConnectionReport{}, false
}

// CloseConnection closes the connection ref names under one budget (the
// default close budget when zero; never beyond ctx's deadline): the
// transport report (the MCP client session's close), then the lease's
// workers (their observed exits), then the supervisor (the guardian's
// verified cleanup) — each step gets what is left of the one deadline.
// The lease is taken out of service first; calls in flight fail. Every
// step is recorded (connection.phase, connection.barrier per obligation,
// the guardian facts, connection.closed) and the report is retained.
//
// A repeated close returns the stored report unchanged, with no second
// cleanup (it records connection.closed{repeat}). A close by activation
// that the manager holds nothing for (the tree already dead, the report
// evicted) records the obligations as missing and returns an unconfirmed
// report with Retained false: it is never confirmed by default. A close by
// session and server with no connection there is ErrNoConnection. The
// error joins what failed to record.
func (m *Manager) CloseConnection(ctx context.Context, ref ConnectionRef, budget time.Duration) (ConnectionReport, error) {
	bad := budget < 0 || (ref.Activation != "" && !events.ValidID(ref.Activation)) ||
		(ref.Session != "" && !events.ValidID(ref.Session)) ||
		(ref.Server != "" && !validServerName(ref.Server)) ||
		(ref.Activation == "" && (ref.Session == "" || ref.Server == ""))
	if bad {
		return ConnectionReport{}, newErr("close_connection", nil, ErrInvalidRequest, nil)
	}
	if ref.Server != "" {
		ref.Server = serverID(ref.Server) // the config name, as hosts know it, to the id leases are keyed by
	}
	key := leaseKey{ref.Session, ref.Server}
	m.mu.Lock()
	m.conns.init()
	act := ref.Activation
	if act == "" {
		if l := m.leases[key]; l != nil {
			act = l.activation
		} else if c, ok := m.conns.claims[key]; ok {
			act = c.activation // an ended one-shot: its retained report
		}
	}
	if r := m.conns.reports[act]; r != nil && act != "" {
		m.mu.Unlock()
		rep := *r
		err := m.emitFact(ctx, events.Draft{Activation: rep.Activation, Session: rep.Session, Server: rep.Server,
			Payload: &events.ConnectionClosed{Repeat: true}})
		return rep, err
	}
	l := m.conns.byAct[act]
	if l != nil && ref.Session != "" && l.key.session != ref.Session {
		m.mu.Unlock()
		return ConnectionReport{}, newErr("close_connection", &key, ErrInvalidRequest, nil)
	}
	m.mu.Unlock()
	if l == nil {
		if ref.Activation == "" {
			return ConnectionReport{}, newErr("close_connection", &key, ErrNoConnection, nil)
		}
		return m.closeUnknown(ctx, ref)
	}
	select {
	case <-l.ready: // a ready lease is closed even past the deadline, with the least budget
	default:
		select {
		case <-l.ready:
		case <-ctx.Done():
			return ConnectionReport{}, newErr("close_connection", &l.key, ErrTerminated, ctx.Err())
		}
	}
	if budget == 0 {
		budget = m.closeBudget(l)
	}
	if d, ok := ctx.Deadline(); ok {
		// A deadline already past leaves the smallest positive budget, not
		// zero: zero would mean the default budget to terminateWithin.
		budget = min(budget, max(time.Until(d), time.Nanosecond))
	}
	if l.err != nil && l.child == nil {
		// The acquisition failed before anything started: nothing to close,
		// and recording a termination would make a never-started activation
		// look started (and unconfirmed) to the audit.
		return ConnectionReport{}, newErr("close_connection", &l.key, ErrNoConnection, nil)
	}
	if l.err == nil {
		m.removeIf(l)
		l.markGone(events.TerminatedConnectionClosed)
	}
	err := l.terminateWithin(ctx, events.TerminatedConnectionClosed, budget)
	r := l.report.Load()
	if r == nil || r.Phase != ConnectionClosed {
		// No child was ever started (the acquisition failed first).
		e := newErr("close_connection", &l.key, ErrNoConnection, err)
		e.Activation = l.activation
		return ConnectionReport{}, e
	}
	return *r, err
}

// closeUnknown closes an activation the manager holds nothing for: each
// obligation is recorded missing and the close as a repeat, so the
// projector too reports it unconfirmed (no retained report).
func (m *Manager) closeUnknown(ctx context.Context, ref ConnectionRef) (ConnectionReport, error) {
	rep := &ConnectionReport{Version: ConnectionReportVersion, Activation: ref.Activation, Session: ref.Session,
		Server: ref.Server, Phase: ConnectionClosed, Result: ResultUnconfirmed}
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: ref.Activation, Session: ref.Session, Server: ref.Server, Payload: p}
	}
	var drafts []events.Draft
	for _, o := range closeObligations {
		rep.Obligations = append(rep.Obligations, ObligationReport{Name: o, Outcome: events.BarrierMissing,
			Status: ObligationMissing, Detail: noRetainedReport})
		drafts = append(drafts, d(&events.ConnectionBarrier{Obligation: o, Outcome: events.BarrierMissing, Detail: noRetainedReport}))
	}
	drafts = append(drafts, d(&events.ConnectionClosed{Repeat: true}))
	err := m.emitFact(ctx, drafts...)
	rep.Recorded = err == nil
	m.mu.Lock()
	if r := m.conns.reports[ref.Activation]; r != nil { // a concurrent close won
		rep = r
	} else {
		m.retainReportLocked(rep)
	}
	m.mu.Unlock()
	return *rep, err
}

const noRetainedReport = "no_retained_report"

// closeObligations are the obligations of a connection's close, in
// report order.
var closeObligations = events.CloseObligations()

// closeBudget is the default close budget of a lease.
func (m *Manager) closeBudget(l *lease) time.Duration {
	return m.launchSpec(l).CleanupBudget() + CloseMargin
}
