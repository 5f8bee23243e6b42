package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type settleKind int

const (
	settleNone settleKind = iota
	settleCompleted
	settleCancelled
	settleOwnerEnded
)

// ResourceHandle is one caller-owned client→server request (resources,
// prompts, completion, resource subscriptions; the name stays from when
// it carried only resource requests): bound to its owner
// and to the lease's activation (the client incarnation that runs it). Its
// id is also the request's progress token, which is how the runtime's
// transport learns every wire id the handle uses (the first one, and a
// fresh one per MRTR round) and routes progress notifications to it.
//
// Exactly one of completion, Cancel and the owner's end settles it; the
// settlement is recorded (request.completed or request.cancelled, after
// the wire ids observed so far: request.dispatched, request.continued)
// before Await or Cancel report it. It is safe for concurrent use.
type ResourceHandle struct {
	id       string
	l        *lease
	owner    *Owner
	st       *sessionState
	session  string
	method   events.RequestMethod
	spec     requestSpec
	budget   time.Duration
	progress chan Progress

	// ctx bounds the worker's request (the budget); cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc

	done       chan struct{} // closed once the settlement is recorded
	workerDone chan struct{} // closed when the worker's request returned (or it never ran)
	regDone    chan struct{} // closed when the registration's outcome is known

	// logMu serializes the handle's appends, so its wire ids are recorded
	// in order and nothing follows its settlement; final is set, under
	// it, with the settlement's record.
	logMu       sync.Mutex
	final       bool
	cancelTried bool // a Cancel after completion was recorded (under logMu)

	mu         sync.Mutex
	settle     settleKind
	registered bool // request.registered durable
	wires      []string
	logged     int // wires already recorded
	resBytes   int64
	respWire   string // the wire id of the last result response seen
	gotResult  bool   // the worker's request returned a response (no cancel notification is sent)
	note       cancelNote
	rel        *relatedReq // the start's context, in flight while dispatched (relay.go)
	result     *ResourceResult
	err        error
	taken      bool
	report     *CancelReport
	dropped    int // progress notifications dropped (buffer full)
	closedProg bool

	// subUnlock releases the (lease, uri) a subscribe or unsubscribe
	// holds (set and called by the worker only).
	subUnlock func()
	// subReserved: a subscribe holding one of its session's
	// MaxSubscriptionsPerSession slots until it completes (guarded by
	// Manager.subs.mu).
	subReserved bool
}

// cancelNote is what the transport saw of the go-sdk's
// notifications/cancelled for the handle's current wire id.
type cancelNote struct {
	seen, delivered bool
	ch              chan struct{} // closed once the write returned
}

// ID is the handle's id (events' handle, and the progress token).
func (h *ResourceHandle) ID() string { return h.id }

// Activation is the activation (client incarnation) the request runs on.
func (h *ResourceHandle) Activation() string { return h.l.activation }

// Owner returns the handle's owner.
func (h *ResourceHandle) Owner() *Owner { return h.owner }

// WireIDs returns the JSON-RPC ids the request used so far: the first
// dispatch, then one per MRTR continuation.
func (h *ResourceHandle) WireIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.wires...)
}

// Progress delivers the server's progress notifications for this request
// (at most MaxProgressBuffered buffered; later ones are dropped while the
// buffer is full). It is closed once the handle is settled.
func (h *ResourceHandle) Progress() <-chan Progress { return h.progress }

// ProgressDropped counts progress notifications dropped on a full buffer.
func (h *ResourceHandle) ProgressDropped() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dropped
}

func newHandle(l *lease, o *Owner, st *sessionState, spec requestSpec, budget time.Duration) *ResourceHandle {
	h := &ResourceHandle{id: newHandleID(), l: l, owner: o, st: st, session: st.id, method: spec.method, spec: spec, budget: budget,
		progress: make(chan Progress, MaxProgressBuffered), done: make(chan struct{}), workerDone: make(chan struct{}),
		regDone: make(chan struct{})}
	h.note.ch = make(chan struct{})
	return h
}

func newHandleID() string {
	a := newActivationID() // act-<20 hex>
	return "req-" + a[4:]
}

// draft is an event of this handle: the lease's activation and server,
// the owner's session.
func (h *ResourceHandle) draft(p events.Payload) events.Draft {
	return events.Draft{Activation: h.l.activation, Session: h.session, Server: h.l.key.server, Payload: p}
}

// register records request.registered within timeout (detached from the
// caller's cancellation, like a call's admission), then starts the worker.
// On failure nothing is sent and the handle is settled.
func (h *ResourceHandle) register(ctx context.Context, timeout time.Duration) error {
	l, m := h.l, h.l.m
	reg := &events.RequestRegistered{Handle: h.id, Owner: h.owner.id, Method: h.method, TimeoutNS: int64(h.budget)}
	switch h.method {
	case events.MethodReadResource, events.MethodSubscribe, events.MethodUnsubscribe:
		reg.URISHA256 = sha256Hex(h.spec.arg)
	case events.MethodGetPrompt:
		reg.NameSHA256 = sha256Hex(h.spec.arg)
	case events.MethodComplete:
		ref := h.spec.complete.Ref
		reg.RefType = events.CompletionRef(ref.Type)
		if reg.RefType == events.RefPrompt {
			reg.NameSHA256 = sha256Hex(ref.Name)
		} else {
			reg.URISHA256 = sha256Hex(ref.URI)
		}
	}
	if hook := m.testHookRegister; hook != nil {
		hook(h)
	}
	// The append runs detached, bounded by timeout plus factTimeout: past
	// timeout the start fails (ErrRegisterTimeout, nothing sent), and the
	// append's outcome is still awaited, so the settlement follows a
	// registration that became durable, and nothing is recorded for one
	// that failed (lateRegistration).
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+factTimeout)
	res := make(chan error, 1)
	go func() {
		res <- m.emit(actx, h.draft(reg))
		acancel()
	}()
	t := time.NewTimer(timeout)
	var err error
	select {
	case err = <-res:
		t.Stop()
	case <-t.C:
		h.mu.Lock()
		mine := h.settle == settleNone // else the owner's end is settling it
		if mine {
			h.settle = settleCancelled
			h.report = &CancelReport{Handle: h.id, Reason: reasonRegisterTimeout, Settlement: SettlementNotSent, LocalSettled: true,
				TransportAccepted: events.DeliveryNo, NotificationDelivered: events.DeliveryNo, Remote: events.RemoteUnknown}
		}
		h.mu.Unlock()
		go h.lateRegistration(context.WithoutCancel(ctx), res, mine)
		return h.errorOf(ErrRegisterTimeout, nil)
	}
	if err != nil {
		// The registration failed: nothing to settle in the events.
		h.mu.Lock()
		mine := h.settle == settleNone // else the owner's end is settling it
		if mine {
			h.settle = settleCancelled
			h.report = &CancelReport{Handle: h.id, Reason: reasonRegisterTimeout, Settlement: SettlementNotSent, LocalSettled: true,
				TransportAccepted: events.DeliveryNo, NotificationDelivered: events.DeliveryNo, Remote: events.RemoteUnknown}
		}
		h.mu.Unlock()
		h.notStarted(ctx, mine)
		return h.errorOf(ErrLedger, nil)
	}
	h.ctx, h.cancel = context.WithTimeout(context.Background(), h.budget)
	h.mu.Lock()
	h.registered = true
	started := h.settle == settleNone
	h.mu.Unlock()
	if !started {
		// The owner ended during the registration: its end records the
		// cancellation (nothing was sent).
		m.unreserveSubscription(h)
		l.admitting.Done()
		h.cancel()
		close(h.workerDone)
		close(h.regDone)
		l.release()
		m.keep(m.release(ctx, h.st))
		return nil
	}
	// The worker counts (track) before the admission ends: a termination
	// waiting on admitting then finds it in its workers obligation.
	l.reqs.track(h)
	l.admitting.Done()
	if hook := m.testHookRequestAdmitted; hook != nil {
		hook(h)
	}
	close(h.regDone)
	h.rel = l.track(ctx, h.session, h.id) // untracked once dispatch returns
	go h.run()
	return nil
}

// lateRegistration awaits a registration append that outlived the
// start's RegisterTimeout: once it became durable, the handle's
// settlement (request.cancelled{register_timeout}, when mine) follows it;
// when it failed nothing is recorded (the owner's end, settling it
// otherwise, sees it unregistered).
func (h *ResourceHandle) lateRegistration(ctx context.Context, res <-chan error, mine bool) {
	err := <-res
	if err == nil {
		h.mu.Lock()
		h.registered = true
		h.mu.Unlock()
		if mine {
			h.logMu.Lock()
			h.l.m.keep(h.l.m.emitFact(ctx, h.draft(h.report.payload())))
			h.final = true
			h.logMu.Unlock()
		}
	}
	h.notStarted(ctx, mine)
}

// notStarted ends a handle whose request is never sent: its registration
// outcome is known, the settlement (when mine) is done, and the
// admission, the lease's gate and the session are released.
func (h *ResourceHandle) notStarted(ctx context.Context, mine bool) {
	h.l.m.unreserveSubscription(h)
	close(h.workerDone)
	close(h.regDone)
	if mine {
		h.mu.Lock()
		h.closeProgressLocked()
		h.mu.Unlock()
		close(h.done)
		h.owner.remove(h)
	}
	h.l.admitting.Done()
	h.l.release()
	h.l.m.keep(h.l.m.release(ctx, h.st))
}

// run is the handle's worker: the request under its budget, then, when
// completion settles it, the record of that. Its exit is what the
// connection close's workers obligation observes.
func (h *ResourceHandle) run() {
	l, m := h.l, h.l.m
	defer func() {
		// After the handle's own work: the lease's gate and the session,
		// then the worker's exit — it counts until its releases (which
		// may record session.ended and end leases) returned. Either
		// release may end this lease, whose close waits for the workers:
		// while this worker waits for that close, whoever runs it, the
		// close does not wait for this worker (reqTable.park).
		if hook := m.testHookWorkerReleasing; hook != nil {
			hook(h)
		}
		ctx := context.WithValue(context.Background(), selfWorkerKey{}, l)
		l.releaseFrom(ctx)
		m.keep(m.release(ctx, h.st))
		l.reqs.workerExit()
	}()
	// A subscribe not completed gives up its session's slot; a subscribe
	// or unsubscribe holds its (lease, uri) from before its request until
	// its completion is recorded (subscriptions.go).
	defer m.unreserveSubscription(h)
	defer func() {
		if h.subUnlock != nil {
			h.subUnlock()
		}
	}()
	res, err := h.dispatch()
	if h.ctx.Err() == nil {
		l.wire.notes.flush(h.ctx) // as for a call (noteBarrier)
	}
	l.untrack(h.rel)
	expired := errors.Is(h.ctx.Err(), context.DeadlineExceeded)
	h.cancel() // the budget's timer ends with the request
	h.mu.Lock()
	win := h.settle == settleNone
	if win {
		h.settle = settleCompleted
	}
	h.gotResult = err == nil || !errorsIsCtx(err)
	h.mu.Unlock()
	close(h.workerDone)
	if win {
		h.complete(res, err, expired)
	}
}

// dispatch sends the request through the lease's go-sdk session, with
// the caller's _meta and the handle id as its progress token (which
// replaces a caller's progressToken).
func (h *ResourceHandle) dispatch() (*ResourceResult, error) {
	cs := h.l.cs
	p := h.spec.params()
	meta := p.GetMeta()
	if meta == nil {
		meta = map[string]any{}
	}
	meta["progressToken"] = h.id
	p.SetMeta(meta)
	if h.method == events.MethodSubscribe || h.method == events.MethodUnsubscribe {
		if h.subUnlock = h.l.m.lockSubscription(h.ctx, h.l, h.spec.arg); h.subUnlock == nil {
			return nil, h.ctx.Err() // the budget expired, or a cancel, before its turn
		}
	}
	switch p := p.(type) {
	case *mcp.ListResourcesParams:
		r, err := cs.ListResources(h.ctx, p)
		return &ResourceResult{Resources: r}, err
	case *mcp.ListResourceTemplatesParams:
		r, err := cs.ListResourceTemplates(h.ctx, p)
		return &ResourceResult{Templates: r}, err
	case *mcp.ListPromptsParams:
		r, err := cs.ListPrompts(h.ctx, p)
		return &ResourceResult{Prompts: r}, err
	case *mcp.GetPromptParams:
		r, err := cs.GetPrompt(h.ctx, p)
		return &ResourceResult{Prompt: r}, err
	case *mcp.CompleteParams:
		r, err := cs.Complete(h.ctx, p)
		return &ResourceResult{Completion: r}, err
	case *mcp.SubscribeParams:
		err := cs.Subscribe(h.ctx, p)
		return &ResourceResult{Subscribed: err == nil}, err
	case *mcp.UnsubscribeParams:
		if h.l.m.othersSubscribed(h.l, h.session, p.URI) {
			// Other sessions hold the uri on this (shared) lease: the
			// server keeps sending its updates, for them; this session
			// stops holding it without a request on the wire.
			return &ResourceResult{Unsubscribed: true}, nil
		}
		err := cs.Unsubscribe(h.ctx, p)
		return &ResourceResult{Unsubscribed: err == nil}, err
	default:
		r, err := cs.ReadResource(h.ctx, p.(*mcp.ReadResourceParams))
		return &ResourceResult{Read: r}, err
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// complete records the completion and makes the result available.
func (h *ResourceHandle) complete(res *ResourceResult, err error, expired bool) {
	fin := &events.RequestCompleted{Handle: h.id, Outcome: events.RequestOK}
	var rerr error
	switch {
	case err == nil:
		if !res.wellFormed() {
			fin.Outcome, fin.Detail, rerr = events.RequestError, detailEnvelope, h.errorOf(ErrEnvelope, nil)
		}
	case expired:
		fin.Outcome, rerr = events.RequestTimeout, h.errorOf(ErrRequestTimeout, context.DeadlineExceeded)
	default:
		if code, ok := remoteCode(err); ok {
			fin.Outcome, fin.Detail, fin.Code = events.RequestError, detailRemote, code
			e := h.errorOf(ErrRemote, nil)
			e.Code = code
			rerr = e
		} else if h.responded() {
			// A result arrived for the current wire id and the go-sdk could
			// not decode it into the method's result: a broken envelope.
			fin.Outcome, fin.Detail, rerr = events.RequestError, detailEnvelope, h.errorOf(ErrEnvelope, nil)
		} else {
			fin.Outcome, fin.Detail, rerr = events.RequestError, detailTransport, h.errorOf(ErrRequestFailed, nil)
		}
	}
	if rerr != nil {
		res = nil
	}
	h.mu.Lock()
	fin.ResultBytes = h.resBytes
	h.mu.Unlock()
	var subs []events.Draft
	if rerr == nil {
		subs = h.l.m.subscriptionSettled(h) // subscription.started or .ended, when the session's holding changed
	}
	h.logMu.Lock()
	drafts := append(append(h.wireDraftsLocked(), h.draft(fin)), subs...)
	h.l.m.keep(h.l.m.emitFact(context.Background(), drafts...))
	h.final = true
	h.logMu.Unlock()
	h.mu.Lock()
	h.result, h.err = res, rerr
	h.closeProgressLocked()
	h.mu.Unlock()
	h.l.reqs.untrack(h)
	close(h.done)
	h.owner.remove(h)
}

// wireDraftsLocked returns the wire ids observed and not yet recorded, as
// request.dispatched (the first) and request.continued (each MRTR round);
// logMu is held.
func (h *ResourceHandle) wireDraftsLocked() []events.Draft {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []events.Draft
	for ; h.logged < len(h.wires); h.logged++ {
		w := h.wires[h.logged]
		if h.logged == 0 {
			out = append(out, h.draft(&events.RequestDispatched{Handle: h.id, WireID: w}))
		} else if h.logged <= 10 {
			out = append(out, h.draft(&events.RequestContinued{Handle: h.id, WireID: w, Round: h.logged}))
		}
	}
	return out
}

func (h *ResourceHandle) closeProgressLocked() {
	if !h.closedProg {
		h.closedProg = true
		close(h.progress)
	}
}

// wellFormed checks the envelope a method's result must have: every listed
// resource with uri and name, every template with uriTemplate and name,
// every read content with its uri, every prompt with its name, every
// prompt message present, at most MaxCompletionValues completion values,
// a bounded nextCursor.
func (r *ResourceResult) wellFormed() bool {
	switch {
	case r.Subscribed || r.Unsubscribed:
	case r.Prompts != nil:
		if len(r.Prompts.NextCursor) > MaxCursorBytes {
			return false
		}
		for _, x := range r.Prompts.Prompts {
			if x == nil || x.Name == "" {
				return false
			}
		}
	case r.Prompt != nil:
		for _, x := range r.Prompt.Messages {
			if x == nil || x.Content == nil {
				return false
			}
		}
	case r.Completion != nil:
		if len(r.Completion.Completion.Values) > MaxCompletionValues {
			return false
		}
	case r.Resources != nil:
		if len(r.Resources.NextCursor) > MaxCursorBytes {
			return false
		}
		for _, x := range r.Resources.Resources {
			if x == nil || x.URI == "" || x.Name == "" {
				return false
			}
		}
	case r.Templates != nil:
		if len(r.Templates.NextCursor) > MaxCursorBytes {
			return false
		}
		for _, x := range r.Templates.ResourceTemplates {
			if x == nil || x.URITemplate == "" || x.Name == "" {
				return false
			}
		}
	case r.Read != nil:
		for _, x := range r.Read.Contents {
			if x == nil || x.URI == "" {
				return false
			}
		}
	default:
		return false
	}
	return true
}

// responded reports whether a result response arrived for the handle's
// current wire id (seen by the transport).
func (h *ResourceHandle) responded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.respWire != "" && len(h.wires) > 0 && h.respWire == h.wires[len(h.wires)-1]
}
