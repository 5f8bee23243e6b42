package runtime

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Evidence of an HTTP lease's requests. Every request is registered
// durably (http.registered) by the goroutine that makes it, before its
// fetch; every redirect hop is recorded (http.redirect) before the next
// request is sent and gets its own barrier; the request's completion
// (http.completed), its barrier (http.barrier, when the body is closed —
// the connection released — or the request aborted) and its owning
// worker's end (http.worker_down) are handed to the activation's one
// sequential cleanup worker, which appends them one request at a time.
// The close waits (under its deadline) for every registered request and
// hop to settle and for the worker to exit, then freezes: later
// completions record nothing.

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
// goroutine that issued the request and released it by closing its body.
const httpWorkerID = "mcp_http_client"

// httpEvidence records one HTTP activation's requests.
type httpEvidence struct {
	emit  func(ctx context.Context, drafts ...events.Draft) error
	draft func(events.Payload) events.Draft

	next atomic.Uint64 // ref counter

	mu     sync.Mutex
	queue  [][]events.Draft // settle batches, in hand-off order
	frozen bool
	// open counts registered requests and hops not yet settled by the
	// worker; failed counts appends that failed.
	open   int
	failed int
	wake   chan struct{} // cap 1: the worker has work or must stop
	idle   chan struct{} // cap 1: open reached zero
	exited chan struct{}
}

func newHTTPEvidence(emit func(context.Context, ...events.Draft) error, draft func(events.Payload) events.Draft) *httpEvidence {
	ev := &httpEvidence{emit: emit, draft: draft, wake: make(chan struct{}, 1), idle: make(chan struct{}, 1), exited: make(chan struct{})}
	go ev.worker()
	return ev
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// register records a request durably before its fetch and returns its
// ref. A frozen activation registers nothing: the request is refused.
func (ev *httpEvidence) register(ctx context.Context, method events.HTTPMethod, scope, origin string) (string, error) {
	ev.mu.Lock()
	if ev.frozen {
		ev.mu.Unlock()
		return "", ErrHTTPDetached
	}
	ev.open++
	ev.mu.Unlock()
	ref := "h-" + strconv.FormatUint(ev.next.Add(1), 10)
	if err := ev.emit(ctx, ev.draft(&events.HTTPRegistered{Ref: ref, Scope: scope, Method: method, Origin: origin})); err != nil {
		ev.settled(1, true)
		return "", ErrHTTPNotRecorded
	}
	return ref, nil
}

// redirect records hop n of ref durably before the next request is sent;
// the hop is its own resource (settled by settleHop).
func (ev *httpEvidence) redirect(ctx context.Context, ref string, hop, status int, origin string, same bool) (string, error) {
	ev.mu.Lock()
	if ev.frozen {
		ev.mu.Unlock()
		return "", ErrHTTPDetached
	}
	ev.open++
	ev.mu.Unlock()
	hopRef := ref + "-" + strconv.Itoa(hop)
	if err := ev.emit(ctx, ev.draft(&events.HTTPRedirect{Ref: ref, Hop: hop, HopRef: hopRef, Status: status, Origin: origin, SameOrigin: same})); err != nil {
		ev.settled(1, true)
		return "", ErrHTTPNotRecorded
	}
	return hopRef, nil
}

// settleHop hands a hop's barrier (its redirect body drained and closed)
// to the worker.
func (ev *httpEvidence) settleHop(hopRef string) {
	ev.handOff(ev.draft(&events.HTTPBarrier{Ref: hopRef, Outcome: events.HTTPBarrierOK}))
}

// settle hands a request's completion, barrier and worker end to the
// worker: the body was closed (or no response came), so its connection is
// released.
func (ev *httpEvidence) settle(ref string, status int, outcome events.HTTPOutcome, bodyBytes int64, detail string) {
	ev.handOff(
		ev.draft(&events.HTTPCompleted{Ref: ref, Status: status, Outcome: outcome, BodyBytes: bodyBytes, Detail: detail}),
		ev.draft(&events.HTTPBarrier{Ref: ref, Outcome: events.HTTPBarrierOK}),
		ev.draft(&events.HTTPWorkerDown{Ref: ref, Worker: httpWorkerID, Reason: "released"}))
}

func (ev *httpEvidence) handOff(drafts ...events.Draft) {
	ev.mu.Lock()
	if ev.frozen {
		ev.mu.Unlock()
		return // a late completion changes nothing
	}
	ev.queue = append(ev.queue, drafts)
	ev.mu.Unlock()
	signal(ev.wake)
}

// settled counts n resources settled (failed: their facts did not append).
func (ev *httpEvidence) settled(n int, failed bool) {
	ev.mu.Lock()
	ev.open -= n
	if failed {
		ev.failed++
	}
	zero := ev.open == 0 && len(ev.queue) == 0
	ev.mu.Unlock()
	if zero {
		signal(ev.idle)
	}
}

// worker is the activation's sequential cleanup worker: it appends each
// handed-off batch, one at a time, until the evidence is frozen.
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
			// Take what is queued, in hand-off order, up to
			// maxSettleBatches: one append keeps the worker abreast of many
			// concurrent requests (each append is a durable commit).
			k := min(len(ev.queue), maxSettleBatches)
			var drafts []events.Draft
			for i := range k {
				drafts = append(drafts, ev.queue[i]...)
				ev.queue[i] = nil
			}
			ev.queue = ev.queue[k:]
			ev.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), factTimeout)
			err := ev.emit(ctx, drafts...)
			cancel()
			ev.settled(k, err != nil)
		}
	}
}

// finish waits until deadline for every registered request and hop to
// settle (their facts appended), then freezes the evidence and waits for
// the worker to exit. It returns the http_requests barrier: ok when all
// settled and recorded, timeout when some did not settle or the worker
// did not exit in time, error when facts failed to append.
func (ev *httpEvidence) finish(deadline time.Time) (events.BarrierOutcome, string) {
	expired := until(deadline)
	for {
		ev.mu.Lock()
		done := ev.open == 0 && len(ev.queue) == 0
		ev.mu.Unlock()
		if done {
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
	ev.frozen = true
	unsettled, failed := ev.open, ev.failed
	ev.mu.Unlock()
	signal(ev.wake)
	select {
	case <-ev.exited:
	case <-until(deadline):
		return events.BarrierTimeout, "cleanup_worker_running"
	}
	switch {
	case unsettled > 0:
		return events.BarrierTimeout, "requests_unsettled"
	case failed > 0:
		return events.BarrierError, "record_failed"
	}
	return events.BarrierOK, ""
}

// stop freezes the evidence and ends the worker without waiting (a lease
// that never got to its close steps).
func (ev *httpEvidence) stop() {
	ev.mu.Lock()
	ev.frozen = true
	ev.mu.Unlock()
	signal(ev.wake)
	<-ev.exited
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
