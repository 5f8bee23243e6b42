package runtime

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Evidence of an HTTP lease's requests. Every request is registered
// durably (http.registered) by the goroutine that makes it, before its
// fetch; every redirect hop is recorded (http.redirect) before the next
// request is sent and gets its own barrier; the request's completion
// (http.completed), its barrier (http.barrier, when the body is closed —
// the connection released — or the request aborted) and its owning
// worker's release of it (http.worker_down{released}: the go-sdk
// goroutine closed the body or the request failed; that goroutine's own
// end is not observed, so it is not claimed) are handed to the activation's one
// sequential cleanup worker, which appends them in hand-off order,
// letting the manager's next append carry them (deferSettled): the worker
// waits for them, a call does not.
//
// The same worker aborts: when the lease ends (its owner's loss — session
// end, revocation, reaping, poisoning, TerminateAll, a lost remote — or
// its close) the requests in flight at that moment, and only those, are
// queued as one abort job; the worker aborts them one at a time (cancel,
// close the body, await the barrier) under the close's one deadline.
// Requests are indexed while unsettled only (live), so neither the abort
// nor the close rescans settled history.
//
// The close waits (under its deadline) for every registered request and
// hop to settle and be recorded and for the worker to exit, then freezes:
// what settled but is not yet appended joins the close's own append, each
// durably registered request still unsettled is recorded http.lost
// {deadline}, and later completions record nothing.

// Scopes of HTTP requests (http.registered's scope, the projector's
// confirmed_history:<scope> aggregates).
const (
	scopeRequest = "request"        // POST: an MCP message and its response
	scopeStream  = "sse"            // GET: the standalone SSE stream
	scopeDelete  = "session_delete" // DELETE: the remote session's end
	scopeOther   = "other"
)

// maxSettleBatches bounds how many requests' settle facts (at most three
// events each) the cleanup worker appends at once, well under the
// ledger's per-append event bound.
const maxSettleBatches = 256

// httpWorkerID is the worker named in http.worker_down: the go-sdk
// goroutine that issued the request. The fact's reason, released, says
// what is observed — it closed the body (or the request failed) — not
// that the goroutine ended.
const httpWorkerID = "mcp_http_client"

// lostDeadline is http.lost's reason for a request whose barrier had not
// returned when the close's deadline froze the evidence.
const lostDeadline = "deadline"

// httpReq is one live (unsettled) request or hop of the activation.
type httpReq struct {
	ref string
	ord uint64 // registration order
	// cancel aborts the request (nil for a hop: its body is already
	// drained and closed when it is recorded).
	cancel context.CancelCauseFunc
	// Guarded by httpEvidence.mu.
	body    *trackedBody // the response body handed to the caller, once there is one
	durable bool         // its http.registered / http.redirect is recorded
	aborted bool         // an abort job cancelled it
	settled chan struct{}
}

// cleanupJob is one item of the worker's queue: settle facts to append,
// or an abort of the requests that were live when it was queued.
type cleanupJob struct {
	drafts []events.Draft
	abort  *abortJob
}

type abortJob struct {
	reqs     []*httpReq
	deadline time.Time
	done     chan struct{}
}

// httpEvidence records one HTTP activation's requests.
type httpEvidence struct {
	emit func(ctx context.Context, drafts ...events.Draft) error
	// deferSettled, when set, defers the worker's settle facts until the
	// manager's next append (a sequential caller's next registration)
	// carries them, so they cost no commit of their own, and returns the
	// wait for their durability; flushSettled appends what is deferred
	// now. Once the evidence is finishing the worker emits at once, and
	// finish flushes, so a close never waits for a linger.
	deferSettled func(drafts ...events.Draft) (wait func() error, err error)
	flushSettled func()
	draft        func(events.Payload) events.Draft

	mu    sync.Mutex
	next  uint64 // registration order of requests and hops
	refs  uint64 // request refs handed out
	live  map[string]*httpReq
	queue []cleanupJob // in hand-off order
	// busy: the worker is appending or aborting what it took off the
	// queue. inIO: it is in I/O that may block — appending (waiting on
	// the ledger) or closing a body it aborts — so finish bounds its wait
	// for the worker's exit by the deadline then.
	busy, inIO bool
	frozen     bool
	// freeze is closed when the evidence is frozen: an abort in progress
	// stops waiting for barriers.
	freeze chan struct{}
	// finishing: finish has begun; settle facts are no longer deferred.
	finishing bool
	// draining: the lease is ending; only the session DELETE may start.
	// closed: nothing may start any more.
	draining, closed bool
	failed           int           // appends that failed
	wake             chan struct{} // cap 1: the worker has work or must stop
	idle             chan struct{} // cap 1: nothing live, queued or in hand
	exited           chan struct{}
}

func newHTTPEvidence(emit func(context.Context, ...events.Draft) error, draft func(events.Payload) events.Draft) *httpEvidence {
	ev := &httpEvidence{emit: emit, draft: draft, live: make(map[string]*httpReq),
		wake: make(chan struct{}, 1), idle: make(chan struct{}, 1), exited: make(chan struct{}), freeze: make(chan struct{})}
	go ev.worker()
	return ev
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// quietLocked: every registered request and hop settled and recorded.
func (ev *httpEvidence) quietLocked() bool {
	return len(ev.live) == 0 && len(ev.queue) == 0 && !ev.busy
}

// trackLocked adds a live request or hop; ev.mu is held.
func (ev *httpEvidence) trackLocked(ref string, cancel context.CancelCauseFunc) *httpReq {
	ev.next++
	r := &httpReq{ref: ref, ord: ev.next, cancel: cancel, settled: make(chan struct{})}
	ev.live[ref] = r
	return r
}

// forgetLocked removes a live request; ev.mu is held. It reports whether
// it was live.
func (ev *httpEvidence) forgetLocked(r *httpReq) bool {
	if ev.live[r.ref] != r {
		return false
	}
	delete(ev.live, r.ref)
	close(r.settled)
	return true
}

// register records a request durably before its fetch; cancel aborts it.
// The append is detached from the request's cancellation (bounded by
// factTimeout): a registration abandoned halfway may still become
// durable, and a durable one must be followed by its settlement. A frozen
// or closed activation registers nothing, nor does a draining one but for
// the session DELETE: the request is refused (ErrHTTPDetached), nothing
// sent.
func (ev *httpEvidence) register(ctx context.Context, method events.HTTPMethod, scope, origin string, cancel context.CancelCauseFunc) (*httpReq, error) {
	ev.mu.Lock()
	if ev.frozen || ev.closed || (ev.draining && method != events.HTTPDelete) {
		ev.mu.Unlock()
		return nil, ErrHTTPDetached
	}
	ev.refs++
	r := ev.trackLocked("h-"+strconv.FormatUint(ev.refs, 10), cancel)
	ev.mu.Unlock()
	if err := ev.record(ctx, &events.HTTPRegistered{Ref: r.ref, Scope: scope, Method: method, Origin: origin}); err != nil {
		ev.fail(r)
		return nil, ErrHTTPNotRecorded
	}
	ev.mu.Lock()
	r.durable = true
	ev.mu.Unlock()
	return r, nil
}

// record appends one fact. emit is the manager's emitFact, which appends
// detached from ctx's cancellation, bounded by factTimeout.
func (ev *httpEvidence) record(ctx context.Context, p events.Payload) error {
	return ev.emit(ctx, ev.draft(p))
}

// fail forgets a request or hop whose record failed.
func (ev *httpEvidence) fail(r *httpReq) {
	ev.mu.Lock()
	ev.forgetLocked(r)
	ev.failed++
	quiet := ev.quietLocked()
	ev.mu.Unlock()
	if quiet {
		signal(ev.idle)
	}
}

// redirect records hop n of req durably before the next request is sent;
// the hop is its own resource (settled by settleHop).
func (ev *httpEvidence) redirect(ctx context.Context, req *httpReq, hop, status int, origin string, same bool) (*httpReq, error) {
	ev.mu.Lock()
	if ev.frozen {
		ev.mu.Unlock()
		return nil, ErrHTTPDetached
	}
	h := ev.trackLocked(req.ref+"-"+strconv.Itoa(hop), nil)
	ev.mu.Unlock()
	if err := ev.record(ctx, &events.HTTPRedirect{Ref: req.ref, Hop: hop, HopRef: h.ref, Status: status, Origin: origin, SameOrigin: same}); err != nil {
		ev.fail(h)
		return nil, ErrHTTPNotRecorded
	}
	ev.mu.Lock()
	h.durable = true
	ev.mu.Unlock()
	return h, nil
}

// settleHop hands a hop's barrier (its redirect body drained and closed)
// to the worker.
func (ev *httpEvidence) settleHop(h *httpReq) {
	ev.handOff(h, ev.draft(&events.HTTPBarrier{Ref: h.ref, Outcome: events.HTTPBarrierOK}))
}

// attach records the response body handed to the caller; a request
// already aborted gets its body closed at once (its connection released).
func (ev *httpEvidence) attach(r *httpReq, b *trackedBody) {
	ev.mu.Lock()
	r.body = b
	aborted := r.aborted
	ev.mu.Unlock()
	if aborted {
		_ = b.Close()
	}
}

// settle hands a request's completion, barrier and worker end to the
// worker: the body was closed (or no response came), so its connection is
// released.
func (ev *httpEvidence) settle(r *httpReq, status int, outcome events.HTTPOutcome, bodyBytes int64, detail string) {
	ev.handOff(r,
		ev.draft(&events.HTTPCompleted{Ref: r.ref, Status: status, Outcome: outcome, BodyBytes: bodyBytes, Detail: detail}),
		ev.draft(&events.HTTPBarrier{Ref: r.ref, Outcome: events.HTTPBarrierOK}),
		ev.draft(&events.HTTPWorkerDown{Ref: r.ref, Worker: httpWorkerID, Reason: "released"}))
}

// handOff moves r out of the live index and queues its facts, unless the
// evidence is frozen: a late completion changes nothing.
func (ev *httpEvidence) handOff(r *httpReq, drafts ...events.Draft) {
	ev.mu.Lock()
	live := ev.forgetLocked(r)
	if ev.frozen || !live {
		ev.mu.Unlock()
		return
	}
	ev.queue = append(ev.queue, cleanupJob{drafts: drafts})
	ev.mu.Unlock()
	signal(ev.wake)
}

// abort queues the abort of every request live now (in registration
// order) under deadline and returns a channel closed once the worker has
// done it. From now on only the session DELETE may start (final: nothing
// may). A frozen activation has no worker: its requests are cancelled at
// once.
func (ev *httpEvidence) abort(deadline time.Time, final bool) <-chan struct{} {
	job := &abortJob{deadline: deadline, done: make(chan struct{})}
	ev.mu.Lock()
	ev.draining = true
	ev.closed = ev.closed || final
	for _, r := range ev.live {
		if r.cancel != nil {
			job.reqs = append(job.reqs, r)
		}
	}
	sort.Slice(job.reqs, func(i, j int) bool { return job.reqs[i].ord < job.reqs[j].ord })
	if ev.frozen || len(job.reqs) == 0 {
		ev.mu.Unlock()
		cancelAll(job.reqs)
		close(job.done)
		return job.done
	}
	ev.queue = append(ev.queue, cleanupJob{abort: job})
	ev.mu.Unlock()
	signal(ev.wake)
	return job.done
}

func cancelAll(rs []*httpReq) {
	for _, r := range rs {
		r.cancel(ErrHTTPDetached)
	}
}

// runAbort aborts a job's requests one at a time: cancel it, close its
// body (releasing the connection), await its barrier (its hand-off) until
// the job's deadline. Past the deadline the rest are only cancelled.
func (ev *httpEvidence) runAbort(job *abortJob) {
	defer close(job.done)
	expired := until(job.deadline)
	for i, r := range job.reqs {
		select {
		case <-expired:
			cancelAll(job.reqs[i:])
			return
		default:
		}
		r.cancel(ErrHTTPDetached)
		ev.mu.Lock()
		if ev.frozen {
			// The close froze the evidence: no further I/O.
			ev.mu.Unlock()
			cancelAll(job.reqs[i+1:])
			return
		}
		r.aborted = true
		b := r.body
		ev.inIO = b != nil
		ev.mu.Unlock()
		if b != nil {
			_ = b.Close()
			ev.mu.Lock()
			ev.inIO = false
			ev.mu.Unlock()
		}
		select {
		case <-r.settled:
		case <-expired:
		case <-ev.freeze:
		}
	}
}

// worker is the activation's sequential cleanup worker: it takes the
// queue in order — consecutive settle facts (up to maxSettleBatches
// requests) as one append, an abort job on its own — until the evidence
// is frozen.
func (ev *httpEvidence) worker() {
	defer close(ev.exited)
	for range ev.wake {
		for {
			ev.mu.Lock()
			if ev.frozen {
				ev.mu.Unlock()
				return
			}
			if len(ev.queue) == 0 {
				ev.mu.Unlock()
				break
			}
			if job := ev.queue[0].abort; job != nil {
				ev.queue[0] = cleanupJob{}
				ev.queue = ev.queue[1:]
				ev.busy = true
				ev.mu.Unlock()
				ev.runAbort(job)
				ev.done(false)
				continue
			}
			// Take the settle facts queued before the next abort job, up
			// to maxSettleBatches: one append keeps the worker abreast of
			// many concurrent requests (each append is a durable commit).
			var drafts []events.Draft
			k := 0
			for k < len(ev.queue) && k < maxSettleBatches && ev.queue[k].abort == nil {
				drafts = append(drafts, ev.queue[k].drafts...)
				ev.queue[k] = cleanupJob{}
				k++
			}
			ev.queue = ev.queue[k:]
			ev.busy, ev.inIO = true, true
			finishing := ev.finishing
			ev.mu.Unlock()
			ev.done(ev.appendSettled(finishing, drafts) != nil)
		}
	}
}

// appendSettled appends settle facts for the worker and waits for their
// durability: deferred (deferSettled) unless the evidence is finishing.
// finish sets finishing and then flushes, and the worker reads finishing
// again after deferring, so a deferral racing finish is flushed by one of
// them and the close never waits for the linger.
func (ev *httpEvidence) appendSettled(finishing bool, drafts []events.Draft) error {
	if finishing || ev.deferSettled == nil {
		ctx, cancel := context.WithTimeout(context.Background(), factTimeout)
		defer cancel()
		return ev.emit(ctx, drafts...)
	}
	wait, err := ev.deferSettled(drafts...)
	if err != nil {
		return err
	}
	ev.mu.Lock()
	finishing = ev.finishing
	ev.mu.Unlock()
	if finishing {
		ev.flushSettled()
	}
	return wait()
}

// done ends the worker's turn (failed: its append failed).
func (ev *httpEvidence) done(failed bool) {
	ev.mu.Lock()
	ev.busy, ev.inIO = false, false
	if failed {
		ev.failed++
	}
	quiet := ev.quietLocked()
	ev.mu.Unlock()
	if quiet {
		signal(ev.idle)
	}
}

// finish waits until deadline for every registered request and hop to
// settle and be recorded, then freezes the evidence and waits (until
// deadline) for the worker to exit. It returns the http_requests barrier —
// ok when all settled and recorded, timeout when some did not settle
// (requests_unsettled) or the worker did not exit (cleanup_worker_running),
// error when facts failed to append (record_failed) — and the facts the
// close must append before its barrier: settle facts queued but not yet
// appended, and http.lost{deadline} for every durably registered request
// or hop that had not settled.
func (ev *httpEvidence) finish(deadline time.Time) (events.BarrierOutcome, string, []events.Draft) {
	expired := until(deadline)
	ev.mu.Lock()
	ev.finishing = true
	ev.mu.Unlock()
	if ev.flushSettled != nil {
		ev.flushSettled()
	}
	for {
		ev.mu.Lock()
		quiet := ev.quietLocked()
		ev.mu.Unlock()
		if quiet {
			break
		}
		select {
		case <-ev.idle:
			continue
		case <-expired:
		}
		break
	}
	ev.mu.Lock()
	ev.frozen, ev.draining, ev.closed = true, true, true
	close(ev.freeze)
	var rest []events.Draft
	var left []*httpReq
	for i, j := range ev.queue {
		if j.abort != nil {
			left = append(left, j.abort.reqs...)
			close(j.abort.done)
		}
		rest = append(rest, j.drafts...)
		ev.queue[i] = cleanupJob{}
	}
	ev.queue = nil
	unsettled := make([]*httpReq, 0, len(ev.live))
	for _, r := range ev.live {
		unsettled = append(unsettled, r)
	}
	sort.Slice(unsettled, func(i, j int) bool { return unsettled[i].ord < unsettled[j].ord })
	for _, r := range unsettled {
		if r.durable {
			rest = append(rest, ev.draft(&events.HTTPLost{Ref: r.ref, Reason: lostDeadline}))
		}
	}
	failed, inIO := ev.failed, ev.inIO
	ev.mu.Unlock()
	cancelAll(left)
	signal(ev.wake)
	if inIO {
		// Appending (waiting on the ledger) or closing a body it aborts
		// (I/O that may block): its exit is awaited until the deadline.
		select {
		case <-ev.exited:
		case <-until(deadline):
			return events.BarrierTimeout, "cleanup_worker_running", rest
		}
	} else {
		// Idle, or in an abort's waits (which end at the freeze): it sees
		// the freeze and exits without starting any I/O.
		<-ev.exited
	}
	switch {
	case len(unsettled) > 0:
		return events.BarrierTimeout, "requests_unsettled", rest
	case failed > 0:
		return events.BarrierError, "record_failed", rest
	}
	return events.BarrierOK, "", rest
}

// methodOf maps a request method to its recorded value and scope.
func methodOf(m string) (events.HTTPMethod, string) {
	switch m {
	case "POST":
		return events.HTTPPost, scopeRequest
	case "GET":
		return events.HTTPGet, scopeStream
	case "DELETE":
		return events.HTTPDelete, scopeDelete
	}
	if v := events.HTTPMethod(m); v.Valid() {
		return v, scopeOther
	}
	return "", ""
}
