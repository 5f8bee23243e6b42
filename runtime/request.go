package runtime

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resource requests are caller-owned handles on a lease: a start registers
// the request durably (request.registered) before anything is sent, a
// worker goroutine owned by the handle runs it under the handle's
// end-to-end budget, and exactly one of completion, Cancel or the owner's
// end settles it (see ResourceHandle).

// Bounds and defaults of resource requests.
const (
	// DefaultRequestBudget is the end-to-end budget DefaultRequestOptions
	// gives a handle: from its registration (once durable, not from the
	// start call) to its settlement.
	DefaultRequestBudget = 30 * time.Second
	// MaxRequestBudget bounds a handle's budget; a longer (or infinite)
	// budget is refused with ErrInvalidBudget.
	MaxRequestBudget = 10 * time.Minute
	// DefaultRegisterTimeout bounds the durable registration of a handle
	// (request.registered acknowledged) when RequestOptions.RegisterTimeout
	// is zero; past it the start fails with ErrRegisterTimeout and nothing
	// is sent.
	DefaultRegisterTimeout = 5 * time.Second
	// MaxResourceURIBytes bounds a read's URI; MaxCursorBytes a list
	// cursor (the one sent and the nextCursor received).
	MaxResourceURIBytes = 8 << 10
	MaxCursorBytes      = 4 << 10
	// MaxOwnerHandles bounds the unsettled handles of one owner
	// (ErrTooManyRequests beyond it).
	MaxOwnerHandles = 1024
	// MaxProgressBuffered bounds the progress notifications buffered per
	// handle for its owner; later ones are dropped and counted.
	MaxProgressBuffered = 64
	// CancelObserveWait bounds how long a cancel waits for the handle's
	// worker to exit and for the go-sdk's notifications/cancelled to reach
	// the transport; past it the report says unknown.
	CancelObserveWait = 2 * time.Second
)

// Cancellation reasons recorded in request.cancelled.
const (
	reasonCallerCancelled = "caller_cancelled"
	reasonOwnerEnded      = "owner_ended"
	reasonRegisterTimeout = "register_timeout"
)

// Details recorded in request.completed for outcomes other than ok.
const (
	detailRemote    = "remote_error"
	detailEnvelope  = "bad_envelope"
	detailTransport = "transport_error"
)

// RequestOptions are a handle's bounds. Budget is required: zero,
// negative or beyond MaxRequestBudget is ErrInvalidBudget (no infinite
// request). DefaultRequestOptions returns the documented defaults.
type RequestOptions struct {
	// Budget is the handle's end-to-end budget. When it expires the
	// request is abandoned (the go-sdk sends notifications/cancelled for
	// its current wire id) and it completes with outcome timeout.
	Budget time.Duration
	// RegisterTimeout bounds the durable registration;
	// DefaultRegisterTimeout when zero.
	RegisterTimeout time.Duration
}

// DefaultRequestOptions returns DefaultRequestBudget and
// DefaultRegisterTimeout.
func DefaultRequestOptions() RequestOptions {
	return RequestOptions{Budget: DefaultRequestBudget, RegisterTimeout: DefaultRegisterTimeout}
}

// ResourceResult is a settled request's result, with the server's
// envelope as the go-sdk decoded it (nextCursor, ordered text and blob
// contents, _meta): exactly one field is set, by method.
type ResourceResult struct {
	Resources *mcp.ListResourcesResult
	Templates *mcp.ListResourceTemplatesResult
	Read      *mcp.ReadResourceResult
}

// Progress is one progress notification the server sent for a handle
// (matched by its progress token, the handle id) or for a tool call with
// CallRequest.Progress set. Message is server text: it reaches the owner,
// never an event or an error.
type Progress struct {
	Progress, Total float64
	Message         string
	// Dropped (tool calls only) counts the call's notifications dropped so
	// far on a full buffer, as of this delivery; the last delivery of a
	// call carries its total. Handles count theirs in ProgressDropped.
	Dropped int
}

// ListResources starts resources/list (cursor: "" for the first page) on
// the lease of server for this session, owned by owner. See
// ReadResource.
func (c LeaseCapability) ListResources(ctx context.Context, owner *Owner, server, cursor string, opts RequestOptions) (*ResourceHandle, error) {
	return c.startRequest(ctx, owner, server, events.MethodListResources, cursor, opts)
}

// ListResourceTemplates starts resources/templates/list. See ReadResource.
func (c LeaseCapability) ListResourceTemplates(ctx context.Context, owner *Owner, server, cursor string, opts RequestOptions) (*ResourceHandle, error) {
	return c.startRequest(ctx, owner, server, events.MethodListResourceTemplates, cursor, opts)
}

// ReadResource starts resources/read of uri on the lease of server (its
// config name) for this session — the same lease, pinned to the same
// fingerprint, that calls tools — owned by owner, and returns its handle
// once request.registered is durable; the request is sent after that.
//
// Refused before anything is registered or sent: a nil owner or one of
// another session (ErrInvalidRequest), an ended owner (ErrOwnerEnded), an empty, non-UTF-8 or
// oversize uri or cursor (ErrInvalidRequest), a bad budget
// (ErrInvalidBudget), a revoked, poisoned or terminated lease (ErrRevoked,
// ErrPoisoned, ErrTerminated), a denied server (ErrDenied). A registration
// not acknowledged within RegisterTimeout is ErrRegisterTimeout: nothing
// is sent; the append is still awaited (bounded), and once it becomes
// durable request.cancelled{register_timeout} follows it (nothing is
// recorded when it failed).
func (c LeaseCapability) ReadResource(ctx context.Context, owner *Owner, server, uri string, opts RequestOptions) (*ResourceHandle, error) {
	return c.startRequest(ctx, owner, server, events.MethodReadResource, uri, opts)
}

func (c LeaseCapability) startRequest(ctx context.Context, o *Owner, server string, method events.RequestMethod, arg string, opts RequestOptions) (*ResourceHandle, error) {
	id, err := ServerID(server)
	bad := func(kind error) error {
		e := newErr("request", &leaseKey{c.st.id, id}, kind, nil)
		return e
	}
	switch {
	case err != nil:
		return nil, bad(ErrInvalidRequest)
	case o == nil || o.m != c.m:
		return nil, bad(ErrInvalidRequest)
	case o.session != c.st.id:
		return nil, bad(ErrInvalidRequest)
	case opts.Budget <= 0 || opts.Budget > MaxRequestBudget || opts.RegisterTimeout < 0:
		return nil, bad(ErrInvalidBudget)
	case !utf8.ValidString(arg):
		return nil, bad(ErrInvalidRequest)
	case method == events.MethodReadResource && (arg == "" || len(arg) > MaxResourceURIBytes):
		return nil, bad(ErrInvalidRequest)
	case method != events.MethodReadResource && len(arg) > MaxCursorBytes:
		return nil, bad(ErrInvalidRequest)
	}
	if opts.RegisterTimeout == 0 {
		opts.RegisterTimeout = DefaultRegisterTimeout
	}
	if o.isEnded() {
		return nil, bad(ErrOwnerEnded)
	}
	if err := c.m.retain(c.st); err != nil {
		return nil, err
	}
	var l *lease
	for attempt := 0; ; attempt++ {
		l, err = c.m.leaseFor(ctx, c.st.id, server)
		if err == nil {
			err = l.admitRequest(c.st.id)
		}
		if err != nil && attempt+1 < maxAcquireAttempts && isGoneRefusal(err) {
			continue
		}
		break
	}
	if err != nil {
		c.m.keep(c.m.release(ctx, c.st))
		return nil, err
	}
	h := newHandle(l, o, c.st, method, arg, opts.Budget)
	if err := o.add(h); err != nil {
		l.admitting.Done()
		l.release()
		c.m.keep(c.m.release(ctx, c.st))
		return nil, err
	}
	if err := h.register(ctx, opts.RegisterTimeout, arg); err != nil {
		return nil, err
	}
	return h, nil
}

// admitRequest passes the lease's gate for a resource request: the same
// state checks as a call (no tool to check). On success the request counts
// in flight and as admitting until its registration is recorded.
func (l *lease) admitRequest(session string) error {
	m := l.m
	ended := l.childDying()
	l.mu.Lock()
	fail := func(kind error) error {
		l.mu.Unlock()
		e := newErr("request", &l.key, kind, nil)
		e.Activation = l.activation
		return e
	}
	switch {
	case l.state == stateRevoked:
		return fail(ErrRevoked)
	case l.state == statePoisoned:
		return fail(ErrPoisoned)
	case l.state == stateGone:
		// Refused like a call on a lease gone for a reason not about it
		// (op "call" so the caller re-acquires; see isGoneRefusal).
		l.mu.Unlock()
		e := newErr("call", &l.key, ErrTerminated, nil)
		e.Activation = l.activation
		return e
	case m.isDenied(session, l.key):
		return fail(ErrDenied)
	case ended || l.childGone():
		l.state, l.goneReason = stateGone, events.TerminatedChildExited
		l.mu.Unlock()
		if m.removeIf(l) {
			m.keep(l.terminate(context.Background(), events.TerminatedChildExited))
		}
		e := newErr("call", &l.key, ErrTerminated, nil)
		e.Activation = l.activation
		return e
	}
	l.inflight++
	l.admitting.Add(1)
	l.mu.Unlock()
	return nil
}

// ---- waiting for a handle's result ----

// errorOf builds a request error of h.
func (h *ResourceHandle) errorOf(kind, cause error) *LeaseError {
	e := newErr("request", &h.l.key, kind, cause)
	e.Activation = h.l.activation
	return e
}

// Await returns the handle's result exactly once: the first Await after
// completion receives it (or the request's error: ErrRemote with the
// JSON-RPC code, ErrEnvelope, ErrRequestTimeout when the budget expired,
// ErrRequestFailed), every later one ErrHandleSettled. When ctx ends
// first, Await records request.await_timed_out and returns
// ErrAwaitTimeout: it saw no result and the request stays active, so a
// later Await still receives it. Await on a cancelled handle is
// ErrHandleSettled, on a handle its owner's end settled ErrOwnerEnded.
func (h *ResourceHandle) Await(ctx context.Context) (*ResourceResult, error) {
	select {
	case <-h.done:
	default:
		t0 := time.Now()
		select {
		case <-h.done:
		case <-ctx.Done():
			h.logMu.Lock()
			if !h.final { // not settled in the meantime: record the timeout
				drafts := append(h.wireDraftsLocked(), h.draft(&events.RequestAwaitTimedOut{Handle: h.id, WaitedNS: int64(time.Since(t0))}))
				h.l.m.keep(h.l.m.emitFact(ctx, drafts...))
				h.logMu.Unlock()
				return nil, h.errorOf(ErrAwaitTimeout, ctx.Err())
			}
			h.logMu.Unlock()
			<-h.done
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.settle == settleOwnerEnded:
		return nil, h.errorOf(ErrOwnerEnded, nil)
	case h.settle != settleCompleted || h.taken:
		return nil, h.errorOf(ErrHandleSettled, nil)
	}
	h.taken = true
	res, err := h.result, h.err
	h.result = nil
	return res, err
}

// Done is closed once the handle's settlement is recorded (its result can
// be awaited without waiting, or it was cancelled).
func (h *ResourceHandle) Done() <-chan struct{} { return h.done }

// errorsIsCtx reports a context's own error.
func errorsIsCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
