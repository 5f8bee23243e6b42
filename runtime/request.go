package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Client→server requests (resources, prompts, completion, resource
// subscriptions) are caller-owned handles on a lease: a start registers
// the request durably (request.registered) before anything is sent, a
// worker goroutine owned by the handle runs it under the handle's
// end-to-end budget, and exactly one of completion, Cancel or the owner's
// end settles it (see ResourceHandle).

// Bounds and defaults of client→server requests.
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
	// MaxResourceURIBytes bounds a request's resource URI (read,
	// subscribe, unsubscribe, a completion's ref/resource) and a prompt
	// name (prompts/get, a completion's ref/prompt); MaxCursorBytes a list
	// cursor (the one sent and the nextCursor received).
	MaxResourceURIBytes = 8 << 10
	MaxCursorBytes      = 4 << 10
	// MaxRequestParamsBytes bounds a request's params as encoded for the
	// wire (prompt arguments, a completion's argument and context, the
	// caller's _meta; the handle's progress token aside): beyond it the
	// start is ErrInvalidRequest and nothing is recorded.
	MaxRequestParamsBytes = 64 << 10
	// MaxCompletionValues is MCP's bound on a completion's values; a
	// result with more breaks the envelope (ErrEnvelope).
	MaxCompletionValues = 100
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
	// Meta is the caller's _meta (a gateway passes its client's through),
	// sent with the request beside the handle's progress token: the
	// handle's token replaces a "progressToken" key of Meta. It is copied
	// at the start (the caller may reuse it) and never recorded; its
	// encoding counts toward MaxRequestParamsBytes.
	Meta map[string]any
}

// DefaultRequestOptions returns DefaultRequestBudget and
// DefaultRegisterTimeout.
func DefaultRequestOptions() RequestOptions {
	return RequestOptions{Budget: DefaultRequestBudget, RegisterTimeout: DefaultRegisterTimeout}
}

// ResourceResult is a settled request's result, with the server's
// envelope as the go-sdk decoded it (nextCursor, ordered text and blob
// contents, _meta): exactly one field is set, by method. The name stays
// from when handles carried only resource requests.
type ResourceResult struct {
	Resources *mcp.ListResourcesResult         // resources/list
	Templates *mcp.ListResourceTemplatesResult // resources/templates/list
	Read      *mcp.ReadResourceResult          // resources/read
	Prompts   *mcp.ListPromptsResult           // prompts/list
	Prompt    *mcp.GetPromptResult             // prompts/get
	// Completion is completion/complete's result (at most
	// MaxCompletionValues values).
	Completion *mcp.CompleteResult
	// Subscribed and Unsubscribed mark the empty result of
	// resources/subscribe and resources/unsubscribe (the server answered;
	// the go-sdk keeps nothing of an empty result).
	Subscribed   bool
	Unsubscribed bool
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
	return c.startRequest(ctx, owner, server, requestSpec{method: events.MethodListResources, arg: cursor}, opts)
}

// ListResourceTemplates starts resources/templates/list. See ReadResource.
func (c LeaseCapability) ListResourceTemplates(ctx context.Context, owner *Owner, server, cursor string, opts RequestOptions) (*ResourceHandle, error) {
	return c.startRequest(ctx, owner, server, requestSpec{method: events.MethodListResourceTemplates, arg: cursor}, opts)
}

// ListPrompts starts prompts/list (cursor: "" for the first page); its
// result is ResourceResult.Prompts, every prompt with a name and a
// bounded nextCursor. See ReadResource.
func (c LeaseCapability) ListPrompts(ctx context.Context, owner *Owner, server, cursor string, opts RequestOptions) (*ResourceHandle, error) {
	return c.startRequest(ctx, owner, server, requestSpec{method: events.MethodListPrompts, arg: cursor}, opts)
}

// GetPrompt starts prompts/get of p.Name with p.Arguments (p.Meta is
// ignored: the caller's _meta is opts.Meta); its result is
// ResourceResult.Prompt. The name is required and bounded by
// MaxResourceURIBytes, the encoded params by MaxRequestParamsBytes
// (ErrInvalidRequest, nothing recorded). request.registered records the
// name's SHA-256 (name_sha256), never the name or the arguments. See
// ReadResource.
func (c LeaseCapability) GetPrompt(ctx context.Context, owner *Owner, server string, p *mcp.GetPromptParams, opts RequestOptions) (*ResourceHandle, error) {
	spec := requestSpec{method: events.MethodGetPrompt}
	if p != nil {
		spec.arg = p.Name
		if len(p.Arguments) > 0 {
			spec.args = make(map[string]string, len(p.Arguments))
			for k, v := range p.Arguments {
				spec.args[k] = v
			}
		}
	}
	return c.startRequest(ctx, owner, server, spec, opts)
}

// Complete starts completion/complete; its result is
// ResourceResult.Completion (at most MaxCompletionValues values). p.Ref
// is required: type "ref/prompt" with a name, or "ref/resource" with a
// uri (each bounded by MaxResourceURIBytes); the encoded params are
// bounded by MaxRequestParamsBytes; p.Meta is ignored (opts.Meta is the
// caller's _meta). request.registered records the reference type and the
// SHA-256 of its name (name_sha256) or uri (uri_sha256), never the
// argument's name or value. See ReadResource.
func (c LeaseCapability) Complete(ctx context.Context, owner *Owner, server string, p *mcp.CompleteParams, opts RequestOptions) (*ResourceHandle, error) {
	spec := requestSpec{method: events.MethodComplete}
	if p != nil {
		cp := &mcp.CompleteParams{Argument: p.Argument}
		if p.Ref != nil {
			ref := *p.Ref
			cp.Ref = &ref
		}
		if p.Context != nil {
			cp.Context = &mcp.CompleteContext{}
			if len(p.Context.Arguments) > 0 {
				cp.Context.Arguments = make(map[string]string, len(p.Context.Arguments))
				for k, v := range p.Context.Arguments {
					cp.Context.Arguments[k] = v
				}
			}
		}
		spec.complete = cp
	}
	return c.startRequest(ctx, owner, server, spec, opts)
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
	return c.startRequest(ctx, owner, server, requestSpec{method: events.MethodReadResource, arg: uri}, opts)
}

// requestSpec is what a handle sends: its method, the text its
// registration digests (a cursor, a uri or a prompt name) and the rest of
// its params, copied from the caller's at the start.
type requestSpec struct {
	method   events.RequestMethod
	arg      string              // cursor (lists), uri (read, subscribe, unsubscribe), prompt name (prompts/get)
	args     map[string]string   // prompts/get arguments
	complete *mcp.CompleteParams // completion/complete (without _meta)
	meta     map[string]any      // the caller's _meta, a deep copy (nil when none)
}

// valid checks the spec's own bounds: the method's required text, UTF-8
// everywhere, the uri, name and cursor bounds.
func (s *requestSpec) valid() bool {
	if !utf8.ValidString(s.arg) {
		return false
	}
	switch s.method {
	case events.MethodListResources, events.MethodListResourceTemplates, events.MethodListPrompts:
		return len(s.arg) <= MaxCursorBytes
	case events.MethodReadResource, events.MethodSubscribe, events.MethodUnsubscribe:
		return s.arg != "" && len(s.arg) <= MaxResourceURIBytes
	case events.MethodGetPrompt:
		if s.arg == "" || len(s.arg) > MaxResourceURIBytes {
			return false
		}
		return validStrings(s.args)
	case events.MethodComplete:
		p := s.complete
		if p == nil || p.Ref == nil {
			return false
		}
		r := p.Ref
		switch events.CompletionRef(r.Type) {
		case events.RefPrompt:
			if r.Name == "" || r.URI != "" || len(r.Name) > MaxResourceURIBytes || !utf8.ValidString(r.Name) {
				return false
			}
		case events.RefResource:
			if r.URI == "" || r.Name != "" || len(r.URI) > MaxResourceURIBytes || !utf8.ValidString(r.URI) {
				return false
			}
		default:
			return false
		}
		if !utf8.ValidString(p.Argument.Name) || !utf8.ValidString(p.Argument.Value) {
			return false
		}
		return p.Context == nil || validStrings(p.Context.Arguments)
	}
	return false
}

func validStrings(m map[string]string) bool {
	for k, v := range m {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// params builds the request's go-sdk params (a fresh value, with a copy
// of the caller's _meta; no progress token).
func (s *requestSpec) params() mcp.Params {
	var p mcp.Params
	switch s.method {
	case events.MethodListResources:
		p = &mcp.ListResourcesParams{Cursor: s.arg}
	case events.MethodListResourceTemplates:
		p = &mcp.ListResourceTemplatesParams{Cursor: s.arg}
	case events.MethodListPrompts:
		p = &mcp.ListPromptsParams{Cursor: s.arg}
	case events.MethodGetPrompt:
		p = &mcp.GetPromptParams{Name: s.arg, Arguments: s.args}
	case events.MethodComplete:
		cp := *s.complete
		p = &cp
	case events.MethodSubscribe:
		p = &mcp.SubscribeParams{URI: s.arg}
	case events.MethodUnsubscribe:
		p = &mcp.UnsubscribeParams{URI: s.arg}
	default:
		p = &mcp.ReadResourceParams{URI: s.arg}
	}
	if s.meta != nil {
		p.SetMeta(copyMeta(s.meta))
	}
	return p
}

// copyMeta returns a deep copy of a _meta decoded from JSON (maps,
// slices, strings, numbers, booleans).
func copyMeta(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = copyJSONValue(v)
	}
	return out
}

func copyJSONValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return copyMeta(x)
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = copyJSONValue(y)
		}
		return out
	}
	return v
}

// prepare copies the caller's _meta into the spec (through its JSON
// encoding, so nothing of the caller's map is kept and only what can be
// sent is) and checks the encoded params' bound.
func (s *requestSpec) prepare(meta map[string]any) bool {
	if len(meta) > 0 {
		b, err := json.Marshal(meta)
		if err != nil || len(b) > MaxRequestParamsBytes {
			return false
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // numbers are sent as the caller gave them
		if dec.Decode(&s.meta) != nil {
			return false
		}
	}
	b, err := json.Marshal(s.params())
	return err == nil && len(b) <= MaxRequestParamsBytes
}

func (c LeaseCapability) startRequest(ctx context.Context, o *Owner, server string, spec requestSpec, opts RequestOptions) (*ResourceHandle, error) {
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
	case !spec.valid() || !spec.prepare(opts.Meta):
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
	// The policy decides before any lease is acquired: a denied read,
	// prompt or completion starts nothing.
	err = c.m.allowStart(ctx, c.st, server)
	if ar, ok := spec.requestAction(server); ok && err == nil {
		err = c.m.allowAction(ctx, c.st, ar)
	}
	if err != nil {
		c.m.keep(c.m.release(ctx, c.st))
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
	h := newHandle(l, o, c.st, spec, opts.Budget)
	err = c.m.reserveSubscription(h)
	if err == nil {
		if err = o.add(h); err != nil {
			c.m.unreserveSubscription(h)
		}
	}
	if err != nil {
		l.admitting.Done()
		l.release()
		c.m.keep(c.m.release(ctx, c.st))
		return nil, err
	}
	if err := h.register(ctx, opts.RegisterTimeout); err != nil {
		return nil, err
	}
	return h, nil
}

// admitRequest passes the lease's gate for a client→server request: the same
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
