package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type leaseState int

const (
	stateActive   leaseState = iota
	stateRevoked             // cancelled under the gate; the last in-flight call kills the child
	statePoisoned            // a call named a tool or digest the listing does not have
	stateGone                // terminated for another reason (goneReason)
)

// String names the state in test failures and debug output.
func (s leaseState) String() string {
	switch s {
	case stateActive:
		return "serving"
	case stateRevoked:
		return "revoked"
	case statePoisoned:
		return "poisoned"
	default:
		return "gone"
	}
}

// lease is one child MCP server under the lease policy. Fields above ready
// are fixed at creation; err, child, cs, wire and listing are written by
// the acquirer before ready is closed and only read after; the gate fields
// are guarded by mu.
type lease struct {
	m           *Manager
	key         leaseKey
	cfg         ServerConfig
	fingerprint string
	activation  string
	// oneShot: this activation is never replaced (see acquireOpts).
	oneShot bool
	ready   chan struct{}

	err error
	// acquirerCancelled: the acquisition failed while the acquirer's own
	// context had ended (waiters with a live context retry).
	acquirerCancelled bool
	child             child
	cs                *mcp.ClientSession
	wire              wireStats
	listing           *pinnedListing
	// reqs are the lease's resource request handles and their workers.
	reqs reqTable
	// starter is the session whose acquisition started the lease (for a
	// shared lease, not its key's session): the lease's client declares
	// its peer's capabilities and sends its logging level (relay.go).
	starter string
	// peer is the lease's server→client state (relay.go).
	peer peerState
	// subsEnded: the lease's end swept its subscriptions; none is added
	// after (guarded by Manager.subs.mu; subscriptions.go).
	subsEnded bool

	// mu is the per-lease call gate.
	mu         sync.Mutex
	state      leaseState
	goneReason events.TerminationReason
	inflight   int
	lastUsed   time.Time
	// timeouts counts the calls in a row that ran past their budget; at
	// MaxConsecutiveTimeouts the lease is retired as wedged.
	timeouts int
	// admitting counts calls past the gate whose call.admitted is not yet
	// acknowledged or, on an HTTP lease, deferred (deferFactsWait: ordered
	// before everything the manager appends later). Adds happen only under
	// mu while the state is active, so waiting on it after leaving active
	// is race-free; it keeps every admitted event before lease.revoked /
	// lease.terminated.
	admitting sync.WaitGroup
	// finishing counts calls whose call.finished is not yet durable
	// (emitFactAsync); termination waits for them, so the close report
	// never precedes a call's outcome.
	finishing pendingFacts
	// revokedLogged is closed once lease.revoked is durable, so a call
	// completing after revocation records its end after the revocation.
	revokedLogged chan struct{}

	calls atomic.Uint64
	// stderr keeps the child's stderr (stderr.go); the guardian writes it.
	stderr stderrRing

	termOnce sync.Once
	termDone chan struct{}
	cleanup  guardian.CleanupResult
	// termErr is what of the termination failed to record, written before
	// termDone is closed; termErrTaken makes sure one caller reports it.
	termErr      error
	termErrTaken atomic.Bool
	// report is the connection's closing, then closed, report (nil while
	// active); written by the termination.
	report atomic.Pointer[ConnectionReport]
}

func newLease(m *Manager, key leaseKey, cfg ServerConfig, fp, activation string, oneShot bool) *lease {
	return &lease{m: m, key: key, cfg: cfg, fingerprint: fp, activation: activation, oneShot: oneShot,
		ready: make(chan struct{}), revokedLogged: make(chan struct{}), termDone: make(chan struct{})}
}

func (l *lease) draft(p events.Payload) events.Draft {
	return events.Draft{Activation: l.activation, Session: l.key.session, Server: l.key.server, Payload: p}
}

func (l *lease) isReady() bool {
	select {
	case <-l.ready:
		return true
	default:
		return false
	}
}

// childGone reports whether the child's session already ended (the child
// exited, or the helper was lost).
func (l *lease) childGone() bool {
	select {
	case <-l.child.done():
		return true
	default:
		return false
	}
}

// markGone moves an active lease out of service under the gate.
func (l *lease) markGone(reason events.TerminationReason) {
	l.mu.Lock()
	if l.state == stateActive {
		l.state, l.goneReason = stateGone, reason
	}
	l.mu.Unlock()
}

// start does the acquisition I/O: one child through the manager's
// launcher, MCP initialize, one listing. Every step is an event; on failure
// the started child is terminated (with its guardian evidence) before
// returning.
func (l *lease) start(ctx context.Context) error {
	m := l.m
	t0 := m.opts.Now()
	ctx, cancel := context.WithTimeout(ctx, m.opts.AcquireTimeout)
	defer cancel()
	// Detached from the caller's cancellation like every record that must
	// be paired with a later one: an append abandoned halfway may still be
	// durable, and a durable lease.acquiring needs its outcome.
	acqErr := m.emitFact(ctx, l.draft(&events.LeaseAcquiring{KeySession: l.key.session, Fingerprint: l.fingerprint, Shared: l.cfg.Shared,
		ConfigName: l.cfg.configName(l.key.server)}))
	// slot receives what the HTTP boundary observes of the acquisition's
	// requests (the go-sdk makes them under ctx), for the failure's cause.
	var slot *httpCallCause
	if l.cfg.isHTTP() {
		slot = &httpCallCause{}
		ctx = context.WithValue(ctx, httpCauseKey{}, slot)
	}
	// fail records the failure with its cause (stepErr: the failed step's
	// error, only ever classified, never recorded) and ends the child.
	fail := func(reason string, kind error, cause, stepErr error) error {
		fi := l.acquireFailure(ctx, slot, reason, stepErr)
		m.keep(m.emitFact(ctx, l.draft(&events.LeaseAcquireFailed{Fingerprint: l.fingerprint, Reason: reason, DurationNS: since(m.opts.Now(), t0),
			Cause: fi.cause, Target: fi.target, HTTPStatus: fi.httpStatus})))
		if l.child != nil {
			m.keep(l.terminate(ctx, events.TerminatedAcquireFailed))
		}
		e := newErr("acquire", &l.key, kind, cause)
		e.Activation = l.activation
		e.setFailure(fi, l.exitStatus())
		return e
	}
	if acqErr != nil {
		return fail("ledger_failed", ErrLedger, nil, nil)
	}
	var tr mcp.Transport
	if l.cfg.isHTTP() {
		// No process: the child is the HTTP session (http.go).
		hc, err := m.launchHTTP(l)
		if err != nil {
			return fail("spawn_failed", ErrSpawn, err, err)
		}
		l.child = hc
		if err := m.emit(ctx, l.draft(&events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupBestEffort, OneShot: l.oneShot})); err != nil {
			return fail("ledger_failed", ErrLedger, nil, nil)
		}
		tr = hc.observed(&l.wire, &l.reqs)
	} else if l.cfg.isDirect() {
		// No helper: the host starts the child itself (direct.go). It is
		// a best-effort child: no guardian.started, no receipt.
		dc, err := m.launchDirect(l)
		if err != nil {
			return fail("spawn_failed", ErrSpawn, err, err) // our own words (directLaunchErr)
		}
		l.child = dc
		if err := m.emit(ctx, l.draft(&events.LeaseChildStarted{PID: dc.pid, Cleanup: events.CleanupBestEffort}),
			l.draft(&events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupBestEffort, OneShot: l.oneShot})); err != nil {
			return fail("ledger_failed", ErrLedger, nil, nil)
		}
		tr = &streamTransport{stream: dc.stream(), wire: &l.wire, reqs: &l.reqs}
	} else {
		c, err := m.launch(ctx, m.launchSpec(l))
		if err != nil {
			// guardian errors are our own words (no child output), so keep them.
			return fail("spawn_failed", ErrSpawn, err, err)
		}
		l.child = c
		f := c.facts()
		if err := m.emit(ctx, guardianStartedDraft(l.activation, l.key.session, l.key.server, f),
			l.draft(&events.LeaseChildStarted{PID: f.TargetPID, GuardianPID: f.HelperPID, Cleanup: events.CleanupVerified}),
			l.draft(&events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupVerified, OneShot: l.oneShot})); err != nil {
			return fail("ledger_failed", ErrLedger, nil, nil)
		}
		tr = &streamTransport{stream: c.stream(), wire: &l.wire, reqs: &l.reqs}
	}
	// The lease's own client: the capabilities of its session's client
	// (relay.go), and that session's logging level right after initialize.
	cs, err := l.newClient().Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		return fail("initialize_failed", ErrInitialize, ctxCause(ctx), err)
	}
	l.cs = cs
	l.applyLogLevel(ctx, m.sessionLogLevel(l.starter))
	listing, err := fetchListing(ctx, cs)
	if err != nil {
		if errors.Is(err, ErrListingTooLarge) {
			return fail("listing_too_large", ErrListingTooLarge, nil, nil)
		}
		return fail("listing_failed", ErrListing, ctxCause(ctx), err)
	}
	l.mu.Lock() // a tool list change may re-pin it from now on (relay.go)
	l.listing = listing
	l.mu.Unlock()
	now := m.opts.Now()
	l.lastUsed = now
	if err := m.emit(ctx,
		l.draft(&events.LeaseListingPinned{ToolCount: len(listing.Tools), Pages: listing.Pages, ListingBytes: listing.Bytes, ListingDigest: listing.Digest}),
		l.draft(&events.LeaseAcquired{Fingerprint: l.fingerprint, DurationNS: since(now, t0)})); err != nil {
		return fail("ledger_failed", ErrLedger, nil, nil)
	}
	return nil
}

// ctxCause returns ctx's error when it ended (a local cause worth keeping),
// else nil: any other failure's text may come from the server.
func ctxCause(ctx context.Context) error { return ctx.Err() }

// terminate ends the lease once under the default close budget (see
// terminateWithin).
func (l *lease) terminate(ctx context.Context, reason events.TerminationReason) error {
	return l.terminateWithin(ctx, reason, 0)
}

// terminateWithin ends the lease once: lease.terminated and
// connection.phase{closing, budget}, then the close steps under one
// deadline (closeSteps), then one batch with the guardian facts, a
// connection.barrier per obligation and connection.closed; the closed
// report is retained. budget 0 is the default close budget. Concurrent
// callers wait for the first (whose budget applies). The caller has
// already taken the lease out of the map and out of service (or it never
// entered service).
//
// It returns what of the termination failed to record to the first caller
// that asks and nil to every later one, so each failure is reported once;
// a caller with no one to report to hands it to Manager.keep.
func (l *lease) terminateWithin(ctx context.Context, reason events.TerminationReason, budget time.Duration) error {
	if isSelfWorker(ctx, l) {
		// A worker of this lease ending it from its releases waits for
		// the close, run here or by a concurrent caller (Close, a session
		// end), whose workers barrier must not wait for it in turn: each
		// would wait for the other until the deadline.
		l.reqs.park()
		defer l.reqs.unpark()
	}
	l.termOnce.Do(func() {
		m := l.m
		defer close(l.termDone)
		defer m.settled(l) // no longer counts toward the cap, nothing left for Close
		// Admitted events are durable before the termination is recorded,
		// and so are the outcomes of the calls that already finished.
		l.admitting.Wait()
		m.awaitFacts(&l.finishing)
		if budget <= 0 {
			budget = m.closeBudget(l)
		}
		// The subscriptions the lease still carries end with it
		// (subscription.ended{lease_ended}), before its termination.
		first := append(m.endLeaseSubscriptions(l), l.draft(&events.LeaseTerminated{Reason: reason}))
		if l.child != nil {
			first = append(first, l.draft(&events.ConnectionPhase{Phase: events.PhaseClosing, BudgetNS: max(int64(budget), 1)}))
		}
		firstErr := m.emitFact(ctx, first...)
		if l.child == nil {
			l.termErr = firstErr
			return
		}
		rep := l.activeReport()
		rep.Phase, rep.Reason, rep.BudgetNS = ConnectionClosing, reason, int64(budget)
		l.report.Store(&rep)
		facts, closed := l.closeSteps(ctx, budget, rep)
		factErr := m.emitFact(ctx, facts...)
		closed.Recorded = firstErr == nil && factErr == nil
		if !closed.Recorded {
			closed.Result = ResultUnconfirmed
		}
		l.termErr = errors.Join(firstErr, factErr)
		m.mu.Lock()
		m.retainReportLocked(&closed)
		m.mu.Unlock()
		l.report.Store(&closed)
	})
	<-l.termDone
	if l.termErrTaken.Swap(true) {
		return nil
	}
	return l.termErr
}

// closeSteps runs the close obligations of the activation's connection in
// order under one deadline (now + budget), each step getting only what is
// left of it: transport (the MCP client session's close, run by a worker
// goroutine the lease owns), workers (that goroutine's observed exit; the
// session's own goroutines end inside its close), supervisor (the
// guardian's verified cleanup of the child, whose context carries the
// same deadline). It returns the facts to record and the closed report.
func (l *lease) closeSteps(ctx context.Context, budget time.Duration, rep ConnectionReport) ([]events.Draft, ConnectionReport) {
	t0 := time.Now()
	deadline := t0.Add(budget)
	l.mu.Lock()
	busy := l.inflight > 0
	l.mu.Unlock()
	hc, isHTTP := l.child.(*httpChild)
	switch {
	case isHTTP:
		// The lease's end — its owner's loss (session end, revocation,
		// reaping, poisoning, TerminateAll, a lost remote) or its close:
		// its own requests in flight, and no other lease's, are aborted by
		// its cleanup worker one at a time under this deadline, and only
		// the session DELETE may start from now on. Calls in flight fail
		// now (their reads end), as for stdio below.
		hc.abortOwned(deadline, busy)
	case busy:
		// Calls are still in flight (TerminateAll, Close or CloseConnection
		// on a lease whose calls hang): the client session's Close would
		// wait for them. Detach the stream first, which unblocks the
		// connection's reads and writes, so those calls fail now; the
		// child's cleanup below is unchanged.
		_ = l.child.stream().Close()
	}
	// 1. transport
	closed := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		if l.cs != nil {
			closed <- l.cs.Close()
			return
		}
		closed <- l.child.stream().Close() // never initialized: detach the stream
	}()
	transport, transportDetail := events.BarrierOK, ""
	closeBy := deadline
	if isHTTP {
		// The session DELETE is best effort: it gets half the budget, then
		// it is aborted so the rest of the close keeps its share.
		closeBy = t0.Add(budget / 2)
	}
	select {
	case err := <-closed:
		switch {
		case err == nil || errors.Is(err, mcp.ErrConnectionClosed):
		case isHTTP:
			// The session closed locally; only its DELETE failed, which is
			// best effort (the remote session may already be gone).
			transportDetail = "session_delete_failed"
		default:
			transport = events.BarrierError
		}
	case <-until(closeBy):
		if !isHTTP {
			transport = events.BarrierTimeout
			break
		}
		hc.rt.detach(true) // cancel the DELETE (and anything left): the worker returns
		select {
		case <-closed:
			transportDetail = "session_delete_aborted"
		case <-until(deadline):
			transport = events.BarrierTimeout
		}
	}
	if transport == events.BarrierOK && late(deadline) {
		transport, transportDetail = events.BarrierTimeout, detailAfterDeadline
	}
	if isHTTP && hc.lost() != "" {
		// The remote session was lost before the close (its DELETE, if
		// sent, could not succeed): say how it was detected.
		transportDetail = "remote_lost_" + hc.lost()
	}
	tTransport := time.Since(t0)
	// 2. workers: the transport worker's observed exit, then every
	// resource request worker (and its budget timer) the lease's handles
	// own — their actual exits, not an assumption.
	t1 := time.Now()
	workers, workersDetail := events.BarrierOK, ""
	select {
	case <-exited:
		if l.reqs.awaitWorkers(deadline) > 0 {
			workers, workersDetail = events.BarrierTimeout, "request_workers_running"
		}
	case <-until(deadline):
		workers, workersDetail = events.BarrierTimeout, "transport_worker_running"
	}
	if workers == events.BarrierOK && late(deadline) {
		workers, workersDetail = events.BarrierTimeout, detailAfterDeadline
	}
	tWorkers := time.Since(t1)
	// 3. supervisor
	t2 := time.Now()
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	l.cleanup = l.child.close(cctx)
	supervisorLate := late(deadline)
	l.flushStderr() // the session's reader is gone: no more stderr
	cancel()
	tSupervisor := time.Since(t2)
	// 4. http_requests: a stdio connection owns no HTTP request (no
	// barrier; the projector confirms it as none owned). An HTTP one waits
	// for every request and hop to settle and its cleanup worker to exit,
	// then its evidence is frozen (httpevidence.go).
	// What settled but was not yet appended, and http.lost for what did
	// not settle, lead the close's facts.
	httpObs := ObligationReport{Name: events.ObligationHTTPRequests, Status: ObligationConfirmed, Detail: "none_owned"}
	var facts []events.Draft
	if isHTTP {
		t3 := time.Now()
		out, detail, rest := hc.ev.finish(deadline)
		if out == events.BarrierOK && late(deadline) {
			out, detail = events.BarrierTimeout, detailAfterDeadline
		}
		facts = rest
		httpObs = ObligationReport{Name: events.ObligationHTTPRequests, Outcome: out, Detail: detail, ElapsedNS: int64(time.Since(t3))}
	}
	elapsed := time.Since(t0)

	supervisor, supervisorDetail := events.BarrierOK, ""
	if dc, isDirect := l.child.(*directChild); isDirect {
		// The host's own account (lease.child_closed), never a receipt:
		// verified cleanup is unsupported for this child. A child whose
		// exit the host did not see within the budget is a timeout.
		facts = append(facts, directCloseDraft(l, dc))
		switch {
		case !dc.res.Reaped:
			supervisor, supervisorDetail = events.BarrierTimeout, "direct_not_reaped"
		case supervisorLate:
			supervisor, supervisorDetail = events.BarrierTimeout, detailAfterDeadline
		default:
			supervisor, supervisorDetail = events.BarrierUnsupported, "direct_child"
		}
	} else if isHTTP {
		// No local process: nothing to supervise. The remote session's
		// end is the transport step's DELETE, a best-effort fact.
		supervisorDetail = "no_local_process"
	} else {
		var receipted bool
		facts, receipted = guardianCleanupFacts(l.activation, l.key.session, l.key.server, l.cleanup)
		switch {
		case receipted && supervisorLate:
			// The receipt's facts are recorded; they came too late to
			// confirm the close.
			supervisor, supervisorDetail = events.BarrierTimeout, detailAfterDeadline
		case receipted:
		case l.cleanup.Reason == guardian.ReasonDeadline:
			supervisor = events.BarrierTimeout
		default:
			supervisor = events.BarrierError
		}
		if !receipted {
			rep.Lost = lostReason(l.cleanup, l.activation)
		}
	}
	obs := []ObligationReport{
		{Name: events.ObligationTransport, Outcome: transport, Detail: transportDetail, ElapsedNS: int64(tTransport)},
		{Name: events.ObligationWorkers, Outcome: workers, Detail: workersDetail, ElapsedNS: int64(tWorkers)},
		{Name: events.ObligationSupervisor, Outcome: supervisor, Detail: supervisorDetail, ElapsedNS: int64(tSupervisor)},
		httpObs,
	}
	rep.Phase, rep.Result, rep.ElapsedNS = ConnectionClosed, ResultConfirmed, int64(elapsed)
	rep.Retained = true
	for i := range obs {
		o := &obs[i]
		if o.Outcome == "" {
			continue // not observed by a barrier (see above)
		}
		o.Status = o.Outcome.Status()
		if o.Status != ObligationConfirmed {
			rep.Result = ResultUnconfirmed
		}
		facts = append(facts, l.draft(&events.ConnectionBarrier{Obligation: o.Name, Outcome: o.Outcome, Detail: o.Detail, ElapsedNS: o.ElapsedNS}))
	}
	rep.Obligations = obs
	if _, isDirect := l.child.(*directChild); isDirect && rep.Result == ResultUnconfirmed && onlySupervisorUnsupported(obs) {
		// Everything the host observed closed as it should; the child's
		// release is not verified (the projector's verdict, too).
		rep.Result = ResultUnverified
	}
	facts = append(facts, l.draft(&events.ConnectionClosed{ElapsedNS: int64(elapsed)}))
	return facts, rep
}

// onlySupervisorUnsupported reports whether every obligation is confirmed
// but supervisor, which is unsupported (a direct child's close).
func onlySupervisorUnsupported(obs []ObligationReport) bool {
	for _, o := range obs {
		want := ObligationConfirmed
		if o.Name == events.ObligationSupervisor {
			want = ObligationUnsupported
		}
		if o.Status != want {
			return false
		}
	}
	return true
}

// detailAfterDeadline is a close step's barrier detail when the step's
// report was observed at or past the close's deadline.
const detailAfterDeadline = "after_deadline"

// late reports whether the close's deadline has passed. A step whose report
// is observed then records timeout, not ok: a deadline's expiry leaves the
// close unconfirmed. Without it the outcome would be a coin toss whenever a
// step's report and the deadline are both ready, since select picks either
// (and so does the guardian's own wait under the same deadline).
func late(deadline time.Time) bool { return !time.Now().Before(deadline) }

// until returns a channel that is ready at t (at once when t has passed).
// The timer is collected once fired or unreferenced (Go 1.23 timers).
func until(t time.Time) <-chan time.Time {
	return time.After(max(time.Until(t), 0))
}

// revoke marks the lease cancelled under the gate. After the state change
// no call passes; lease.revoked is appended after every call already past
// the gate has its admission recorded. The error joins what failed to
// record: lease.revoked and, when revoke ends the child itself, its
// termination.
func (l *lease) revoke(ctx context.Context, reason string) error {
	l.mu.Lock()
	switch l.state {
	case stateActive:
	case stateRevoked:
		// Revoked by a concurrent caller: return, like it, only once
		// lease.revoked is durable.
		l.mu.Unlock()
		if h := l.m.testHookRevokeWaiting; h != nil {
			h()
		}
		select {
		case <-l.revokedLogged:
			return nil
		case <-ctx.Done():
			return newErr("revoke", &l.key, ErrTerminated, ctx.Err())
		}
	default:
		l.mu.Unlock()
		return nil
	}
	l.state = stateRevoked
	inflight := l.inflight
	l.mu.Unlock()
	l.m.removeIf(l)
	l.admitting.Wait()
	err := l.m.emitFact(ctx, l.draft(&events.LeaseRevoked{Reason: reason, CallsInFlight: inflight}))
	close(l.revokedLogged)
	if inflight == 0 {
		// Nobody will complete a call on it: end the child now.
		err = errors.Join(err, l.terminate(ctx, events.TerminatedRevoked))
	}
	return err
}
