package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ChildEndWait bounds how long a call that failed at the transport level
// waits for the child's guardian session to end before deciding whether
// the request ever reached a live child. A child that crashed or was
// killed ends its session within milliseconds (the guardian reaps it and
// sends its receipt); a transport that broke while the child lives is
// reported as a plain transport failure once the wait expires.
const ChildEndWait = 2 * time.Second

// Error codes go-sdk v1.8.0 uses for its own connection state, not sent by
// a server: its client or server side closing (-32003, -32004) and a
// request its transport refused (-32005). A *jsonrpc.Error with any other
// code came from the server's error response.
const (
	codeClientClosing = -32003
	codeServerClosing = -32004
	codeRejected      = -32005
)

// CallRequest is one tool call the host already authorized: the exact
// runtime tool name and the canonical schema digest it authorized.
type CallRequest struct {
	// Server is the server's name in the config (see ServerID).
	Server string
	Tool   string
	Digest string
	// Arguments are encoded as JSON (a json.RawMessage is sent as is); nil
	// sends {}.
	Arguments any
	// Progress, when set, receives the server's progress notifications for
	// the call: the request then carries a progress token (the call's id),
	// and every notifications/progress the server sends with it is handed
	// to Progress in order, one at a time, from a goroutine of the call;
	// Call returns only after Progress returned for the last one. The
	// connection's reader never waits for it: at most MaxProgressBuffered
	// notifications wait for delivery, later ones are dropped while the
	// buffer is full and counted in Progress.Dropped. Progress should
	// return promptly: Call's return waits for it.
	Progress func(Progress)
	// Meta is the caller's _meta (a gateway passes its client's through),
	// sent with the request; with Progress set, the call's own progress
	// token replaces a "progressToken" key of it. Not recorded.
	Meta map[string]any
}

// callRun is one call through one lease's gate, recorded under the
// calling session (a shared lease serves many).
type callRun struct {
	l       *lease
	session string
	// finishing is the calling session's tracker of outcomes not yet
	// durable (nil when the call was made without a session's state).
	finishing *pendingFacts
	// st is the calling session's state when known (callIn): its access
	// policy decides the call at the gate.
	st   *sessionState
	id   string
	req  CallRequest
	args []byte
	// progress delivers the call's progress notifications (req.Progress set).
	progress *callProgress
	// httpCause is the typed cause of an HTTP call's failed request (nil
	// for other leases); see httpCallCause.
	httpCause *httpCallCause
	// timedOut: the call's budget (lease.callBudget) ended it.
	timedOut bool
	// admitWait, when set, reports the durability of the call's queued
	// call.admitted (an HTTP lease's call: see admit).
	admitWait func() error
}

// callBudget is the budget of one call of l: its server's "callTimeout",
// else the manager's CallTimeout.
func (l *lease) callBudget() time.Duration {
	if l.cfg.CallTimeout > 0 {
		return time.Duration(l.cfg.CallTimeout)
	}
	return l.m.opts.CallTimeout
}

// draft is an event of this call: the lease's activation and server, the
// calling session.
func (c *callRun) draft(p events.Payload) events.Draft {
	return events.Draft{Activation: c.l.activation, Session: c.session, Server: c.l.key.server, Payload: p}
}

// err is a call error of this lease.
func (c *callRun) err(kind, cause error) *LeaseError {
	e := newErr("call", &c.l.key, kind, cause)
	e.Activation = c.l.activation
	return e
}

// call runs one request of session through the gate of l. retry is true
// when the call failed and the child's cleanup facts prove the request
// never reached a live child (see neverReached): the caller may run it
// once more on a fresh lease.
func (l *lease) call(ctx context.Context, session string, req CallRequest, args []byte) (res *mcp.CallToolResult, retry bool, err error) {
	return l.callAs(ctx, session, nil, nil, req, args)
}

// callIn is call for the session st, whose end waits for the call's
// outcome to be durable.
func (l *lease) callIn(ctx context.Context, st *sessionState, req CallRequest, args []byte) (*mcp.CallToolResult, bool, error) {
	return l.callAs(ctx, st.id, st, &st.finishing, req, args)
}

func (l *lease) callAs(ctx context.Context, session string, st *sessionState, finishing *pendingFacts, req CallRequest, args []byte) (res *mcp.CallToolResult, retry bool, err error) {
	c := &callRun{l: l, session: session, st: st, finishing: finishing, req: req, args: args,
		id: l.activation + "-c" + strconv.FormatUint(l.calls.Add(1), 10)}
	if err := c.admit(ctx); err != nil {
		return nil, false, err
	}
	// The server's requests and log messages while the call runs relate
	// to it (PeerRequest.Related; relay.go).
	defer l.untrack(l.track(ctx, session, c.id))
	defer func() {
		if c.progress != nil {
			c.progress.finish()
		}
	}()
	return c.run(ctx)
}

// refuse records a refusal at the gate and returns its error.
func (c *callRun) refuse(ctx context.Context, reason events.RefusalReason, kind error) error {
	c.l.m.keep(c.l.m.emitFact(ctx, c.draft(&events.CallRefused{CallID: c.id, Tool: c.req.Tool, Reason: reason})))
	return c.err(kind, nil)
}

// admit passes the gate: state check, the child still running, exact name
// and digest check, the session's access policy, then the durable
// admission. On success the call is counted in flight.
func (c *callRun) admit(ctx context.Context) error {
	l, m := c.l, c.l.m
	ended := l.childDying() // reads /proc: before the gate lock
	l.mu.Lock()
	switch {
	case l.state == stateRevoked:
		l.mu.Unlock()
		// The refusal is recorded after the revocation it is caused by.
		<-l.revokedLogged
		return c.refuse(ctx, events.RefusedCancelled, ErrRevoked)
	case l.state == statePoisoned:
		l.mu.Unlock()
		return c.refuse(ctx, events.RefusedPoisoned, ErrPoisoned)
	case l.state == stateGone:
		l.mu.Unlock()
		return c.refuse(ctx, events.RefusedTerminated, ErrTerminated)
	case m.isDenied(c.session, l.key):
		l.mu.Unlock()
		return c.refuse(ctx, events.RefusedDenied, ErrDenied)
	case ended || l.childGone():
		// The child ended or is ending while idle (killed from outside,
		// crashed): take the lease out of service and end it; nothing was
		// sent, so the caller acquires a fresh lease (a gone refusal, not
		// recorded as a call: there was none).
		l.state, l.goneReason = stateGone, events.TerminatedChildExited
		l.mu.Unlock()
		if m.removeIf(l) {
			m.keep(l.terminate(ctx, events.TerminatedChildExited))
		}
		return c.err(ErrTerminated, nil)
	}
	pt, ok := l.listing.Tools[c.req.Tool]
	if (!ok || pt.Digest != c.req.Digest) && l.supersededTool(c.req.Tool, c.req.Digest) {
		// Authorized against a listing this lease showed and has since
		// replaced (its server changed its tools): refused, the lease kept.
		l.mu.Unlock()
		return c.refuse(ctx, events.RefusedListingChanged, ErrListingChanged)
	}
	if !ok || pt.Digest != c.req.Digest {
		l.state = statePoisoned
		l.mu.Unlock()
		return c.poison(ctx, ok)
	}
	// The policy decides the exact pinned tool (its annotations are part
	// of the question), under the gate lock so that the tool decided is
	// the one admitted; a cached decision is a map lookup. A denial
	// refuses the call and keeps the lease: nothing is sent.
	var policy AccessDecision
	if c.st != nil {
		var enforced bool
		policy, enforced = c.st.decide(AccessRequest{Action: events.AccessCallTool, Server: c.req.Server,
			Target: c.req.Tool, Tool: pt.Tool})
		if enforced && !policy.Allowed {
			l.mu.Unlock()
			return c.refusePolicy(ctx, policy)
		}
	}
	l.inflight++
	l.admitting.Add(1)
	l.mu.Unlock()

	// The admission is appended detached from the caller's cancellation
	// (bounded by factTimeout): an append abandoned halfway can still
	// become durable (the appender reports it in doubt), and a durable
	// call.admitted must always be followed by its call.finished. A caller
	// that gives up meanwhile sees its call finish as cancelled.
	admitted := &events.CallAdmitted{CallID: c.id, Tool: c.req.Tool, Digest: c.req.Digest}
	admitted.Policies, admitted.PoliciesOmitted = policy.recorded()
	admitted.PolicyDigest = policy.Digest
	var err error
	if hc, ok := l.child.(*httpChild); ok && hc.ev != nil {
		// An HTTP lease registers every request durably (http.registered)
		// before it sends anything, and that registration is appended
		// after this admission: its acknowledgement proves the admission
		// durable too, and a failed admission fails it (a failed append
		// fails every later one), so nothing is sent. Deferred, not
		// awaited here: the registration's append carries it (the same
		// atomic append, one commit), so the call pays one fsync before
		// its request, not two, nor two commits in a row. run awaits it
		// once the call returned.
		c.admitWait, err = m.deferFactsWait(c.draft(admitted))
	} else {
		err = m.emitFact(ctx, c.draft(admitted))
	}
	l.admitting.Done()
	if err != nil {
		// Not durably admitted: do not call. Record nothing further about
		// the call (the ledger is what failed).
		l.release()
		return err
	}
	return nil
}

// refusePolicy records a call the access policy denied
// (call.refused{policy} with the deciding policies and the set's digest)
// and returns ErrAccessDenied; the lease is kept.
func (c *callRun) refusePolicy(ctx context.Context, d AccessDecision) error {
	p := &events.CallRefused{CallID: c.id, Tool: c.req.Tool, Reason: events.RefusedPolicy, PolicyDigest: d.Digest}
	p.Policies, p.PoliciesOmitted = d.recorded()
	err := c.l.m.emitFact(ctx, c.draft(p))
	return c.err(ErrAccessDenied, err)
}

// poison ends a lease whose pinned listing does not have the requested
// tool (digestKnown false) or digest; nothing is sent to the child.
func (c *callRun) poison(ctx context.Context, digestKnown bool) error {
	l, m := c.l, c.l.m
	reason, kind := events.PoisonNameMismatch, ErrNameMismatch
	if digestKnown {
		reason, kind = events.PoisonDigestMismatch, ErrDigestMismatch
	}
	m.removeIf(l)
	m.keep(m.emitFact(ctx, c.draft(&events.CallRefused{CallID: c.id, Tool: c.req.Tool, Reason: reason.Refusal()}),
		l.draft(&events.LeasePoisoned{CallID: c.id, Reason: reason, Tool: c.req.Tool, ExpectedDigest: c.req.Digest})))
	m.keep(l.terminate(ctx, events.TerminatedPoisoned))
	return c.err(kind, nil)
}

// failure is how an admitted call failed, decided from its error.
type failure struct {
	outcome events.CallOutcome
	err     error
	// ends: the connection is broken, so the lease must end.
	ends bool
	// exited: the child's session ended within ChildEndWait of the failure.
	exited bool
}

// run sends an admitted call, records its end and leaves the gate.
func (c *callRun) run(ctx context.Context) (*mcp.CallToolResult, bool, error) {
	l, m := c.l, c.l.m
	t0 := m.opts.Now()
	// What neverReached compares with the guardian's facts: the wall-clock
	// instant before the request is written (the helper's reap time is
	// another process's reading of the same CLOCK_REALTIME; not
	// m.opts.Now, which tests move), and the bytes relayed so far.
	sent, relayed := time.Now(), l.wire.written.Load()
	params := &mcp.CallToolParams{Name: c.req.Tool, Arguments: json.RawMessage(c.args)}
	if len(c.req.Meta) > 0 {
		params.Meta = maps.Clone(c.req.Meta)
		delete(params.Meta, "progressToken")
	}
	if c.req.Progress != nil {
		// Routed before the request is written, so no notification of it
		// can arrive unrouted; the callback's drain waits until the call
		// left the gate (see lease.call).
		params.SetProgressToken(c.id)
		c.progress = startProgress(c.req.Progress)
		l.reqs.calls.add(c.id, c.progress)
	}
	budgetCtx, endBudget := context.WithTimeout(ctx, l.callBudget())
	callCtx, hc := l.withHTTPCause(budgetCtx)
	c.httpCause = hc
	res, err := l.cs.CallTool(callCtx, params)
	if c.admitWait != nil {
		if aerr := c.admitWait(); aerr != nil {
			// Never durably admitted: the ledger failed, and with it the
			// request's registration, so nothing was sent. As when the
			// admission fails in admit: nothing further is recorded.
			endBudget()
			if c.progress != nil {
				l.reqs.calls.remove(c.id)
			}
			l.release()
			return nil, false, aerr
		}
	}
	if ctx.Err() == nil {
		// The notifications the server sent before its answer reach the
		// session before the call returns (noteBarrier).
		l.wire.notes.flush(ctx)
	}
	// The budget, not the caller, ended the call: the caller's context is
	// live and the budget's deadline passed (go-sdk sent the server
	// notifications/cancelled when callCtx ended).
	c.timedOut = err != nil && ctx.Err() == nil && errors.Is(budgetCtx.Err(), context.DeadlineExceeded)
	if hc == nil {
		endBudget()
	} else {
		// An HTTP call's response stream may still be read under callCtx
		// after CallTool returned (go-sdk reads an SSE response on the
		// call's context until the server ends it, and a lease's close
		// aborts it as its own): ending the budget now would cut that
		// stream and record it cancelled. It ends on its own deadline (its
		// timer is held at most the budget).
		_ = endBudget
	}
	end := m.opts.Now()
	if c.progress != nil {
		l.reqs.calls.remove(c.id)
	}

	argSum := sha256.Sum256(c.args)
	fin := &events.CallFinished{CallID: c.id, Tool: c.req.Tool, DurationNS: since(end, t0),
		ArgsBytes: int64(len(c.args)), ArgsSHA256: hex.EncodeToString(argSum[:])}
	f := c.classify(ctx, err)
	fin.Outcome = f.outcome
	if err == nil {
		if b, merr := json.Marshal(res); merr == nil {
			s := sha256.Sum256(b)
			fin.ResultBytes, fin.ResultSHA256 = int64(len(b)), hex.EncodeToString(s[:])
		}
	}

	// Leave the gate; the last call out of a revoked lease kills the child.
	reason := events.TerminatedTransportError
	if f.exited {
		reason = events.TerminatedChildExited
	}
	l.mu.Lock()
	l.inflight--
	l.lastUsed = end
	if c.timedOut {
		l.timeouts++
	} else {
		l.timeouts = 0
	}
	wedged := l.timeouts >= MaxConsecutiveTimeouts
	if wedged && !f.ends {
		f.ends, reason = true, events.TerminatedWedged
	}
	killer := l.state == stateRevoked && l.inflight == 0
	ending := f.ends && l.state == stateActive
	if ending {
		l.state, l.goneReason = stateGone, reason
	}
	l.mu.Unlock()
	fin.KilledOnCancel = killer
	if killer {
		<-l.revokedLogged
	}
	if ending {
		// Out of the map before the failure is recorded: no caller finds
		// the dead lease after its call.finished.
		m.removeIf(l)
	}
	// Not awaited: the caller does not wait for its fsync (it usually
	// shares the next call.admitted's), and everything the manager appends
	// later is ordered after it. A crash before it is durable leaves the
	// call admitted with no outcome, which the audit reports as unknown,
	// never a wrong one.
	m.emitFactAsync(ctx, &l.finishing, c.finishing, c.draft(fin))
	switch {
	case killer:
		m.keep(l.terminate(ctx, events.TerminatedRevoked))
	case ending:
		m.keep(l.terminate(ctx, reason))
		if le, ok := f.err.(*LeaseError); ok && le.Cause == events.CauseProcessExited {
			le.Exit = l.exitStatus() // the receipt arrived with the cleanup
		}
	}
	retry := ending && f.exited && l.neverReached(sent, relayed)
	return res, retry, f.err
}

// classify decides a call's outcome from CallTool's error. A transport
// failure waits (bounded by ChildEndWait) for the child's session to end,
// so the lease's end is recorded as the child's exit when it was one.
func (c *callRun) classify(ctx context.Context, err error) failure {
	switch {
	case err == nil:
		return failure{outcome: events.CallOK}
	case ctx.Err() != nil:
		return failure{outcome: events.CallCancelled, err: c.err(ErrCallFailed, ctx.Err())}
	case c.timedOut:
		// The connection is intact: the server was told to cancel and may
		// still be running the call; the lease is kept (see run for
		// MaxConsecutiveTimeouts).
		return failure{outcome: events.CallTimeout, err: c.err(ErrCallFailed, ErrCallTimeout)}
	}
	if code, ok := remoteCode(err); ok {
		// The server answered: the connection is intact and the lease
		// kept. Only the code is kept, never the server's message.
		e := c.err(ErrRemote, nil)
		e.Code = code
		return failure{outcome: events.CallRemoteError, err: e}
	}
	if cause := c.httpCause.get(); cause != nil {
		// One HTTP request failed (a timeout, an oversize body): the call
		// fails with its typed cause. The lease is kept unless go-sdk
		// failed the whole connection for it (a JSON response's read
		// error does; the child is marked lost before the call is
		// retired).
		e := c.err(ErrCallFailed, cause)
		e.setFailure(c.httpCause.failure(), nil)
		f := failure{outcome: events.CallTransportError, err: e}
		if f.ends = c.l.childGone(); f.ends {
			f.exited = true
		}
		return f
	}
	e := c.err(ErrCallFailed, nil)
	f := failure{outcome: events.CallTransportError, err: e}
	var we *jsonrpc.Error
	// A request the transport refused (-32005) leaves the connection up,
	// unless the boundary found the remote session lost meanwhile (a POST
	// left unanswered by a server that no longer listens, confirmed by its
	// probe before the request's error returned).
	f.ends = !errors.As(err, &we) || we.Code != codeRejected || c.l.childGone()
	if f.ends {
		f.exited = c.l.awaitChildEnd(ctx)
	}
	// The operator's account: what the HTTP boundary observed, or a stdio
	// child that ended (its wait status is added once its cleanup ran).
	switch fi := c.httpCause.failure(); {
	case fi.cause != "":
		e.setFailure(fi, nil)
	case f.exited && c.httpCause == nil:
		e.Cause = events.CauseProcessExited
	}
	return f
}

// remoteCode returns the JSON-RPC error code of a server's error response,
// and false for every other error (including the go-sdk's own codes for a
// closing or refusing connection).
func remoteCode(err error) (int64, bool) {
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return 0, false
	}
	switch we.Code {
	case codeClientClosing, codeServerClosing, codeRejected,
		// The client's own reader fails with these when the server sends
		// a line it cannot parse or a malformed response, and every
		// pending call is retired with that error: a broken stream, not a
		// refusal by a healthy server (our requests are well formed).
		jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
		return 0, false
	}
	return we.Code, true
}

// childDying reports whether the child is known to be exiting before its
// guardian session reports it (a production child whose process has a
// SIGKILL pending or is a zombie; see guardianChild.dying).
func (l *lease) childDying() bool {
	d, ok := l.child.(interface{ dying() bool })
	return ok && d.dying()
}

// awaitChildEnd waits at most ChildEndWait (or until ctx ends) for the
// child's session to end and reports whether it did.
func (l *lease) awaitChildEnd(ctx context.Context) bool {
	t := time.NewTimer(ChildEndWait)
	defer t.Stop()
	select {
	case <-l.child.done():
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return l.childGone()
}

// neverReached reports whether the terminated lease's cleanup receipt (its
// own, correlated) proves that a request written at sent, after relayed
// bytes of the stream, never reached a live child. Either fact proves it:
//
//   - the target, which had no descendants, was reaped before sent (a dead
//     process reads nothing, and no descendant shared its stdin);
//   - the helper dropped at least every byte relayed from relayed on: it
//     drops a suffix (once a write into the target's stdin fails, or a
//     chunk is dropped at the host's hang-up, every later byte is dropped,
//     and cleanup drops what is still queued: guardian/helper's relay
//     guarantees), so
//     none of the request entered the target's stdin. This holds when the
//     kill came just before the request and the helper reaped the target
//     only after it was sent.
//
// Only facts decide: no receipt, or bytes that may have entered the
// target's stdin, mean the request may have been seen.
func (l *lease) neverReached(sent time.Time, relayed int64) bool {
	rc := l.cleanup.Receipt
	if rc == nil || rc.ActivationID != l.activation || rc.TargetPID != l.child.facts().TargetPID {
		return false
	}
	// A reap before the send proves nothing when the target had
	// descendants: one that shares its stdin can read what the helper still
	// relays after the reap. Without descendants, nobody else holds the pipe.
	noDescendants := len(rc.DescendantsSeen) == 0 && rc.DescendantsDropped == 0
	if noDescendants && rc.Reaped && rc.ReapedAt != nil && rc.ReapedAt.Before(sent) {
		return true
	}
	return rc.StdinDroppedBytes >= l.wire.written.Load()-relayed
}

// release leaves the gate after a call that never reached tools/call.
func (l *lease) release() { l.releaseFrom(context.Background()) }

// releaseFrom is release with the context its termination runs under.
func (l *lease) releaseFrom(ctx context.Context) {
	l.mu.Lock()
	l.inflight--
	killer := l.state == stateRevoked && l.inflight == 0
	l.mu.Unlock()
	if killer {
		<-l.revokedLogged
		l.m.keep(l.terminate(ctx, events.TerminatedRevoked))
	}
}

// isGoneRefusal reports a refusal because the lease left service for a
// reason that is not about the call (reaped, replaced, child exited).
func isGoneRefusal(err error) bool {
	le, ok := err.(*LeaseError)
	return ok && le.Err == ErrTerminated && le.Op == "call"
}
