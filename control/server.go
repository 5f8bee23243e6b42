package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/live"
)

// Runtime is what the control API acts on: the lease manager together
// with the MCP gateway that owns the sessions and the configuration they
// serve. Its errors wrap ErrInvalid, ErrNotFound, ErrUnavailable or
// ErrConfigNotLoaded where those apply (see the errors).
type Runtime interface {
	// Revoke revokes (with req.Deny: denies) the session's own lease, or
	// with req.Shared the shared lease, of req.Server with req.Reason, and
	// says how many leases it revoked. The request is valid (checked by
	// the handler). Finding nothing to act on is ErrNotFound, as is
	// denying a session that is not open.
	Revoke(ctx context.Context, req RevokeRequest) (int, error)
	// Allow lifts a denial; allowing what is not denied is not an error.
	Allow(ctx context.Context, req AllowRequest) error
	// EndSession ends a session (ErrNotFound when there is no such open
	// session).
	EndSession(ctx context.Context, session string) error
	// ReapIdle reaps the leases idle for at least idleMax (0: the
	// runtime's own bound) and says how many; a non-nil error with them
	// says what of their ending could not be recorded.
	ReapIdle(ctx context.Context, idleMax time.Duration) (int, error)
	// Reload reads the server configuration again, puts it in force and
	// says what changed (Added and Removed sorted; the handler cuts them
	// to MaxReloadNames). An error means nothing was put in force:
	// ErrConfigNotLoaded when the configuration failed to load (its
	// cause, which may name an entry, is the Runtime's to log: the
	// refusal's text is static). A configuration put in force but not
	// all recorded is a reply with RecordFailed, not an error.
	Reload(ctx context.Context) (ReloadReply, error)
}

// ProjectionServices returns the projection API's services (bus.AccessRead)
// answering from p: the lease table, one activation's audit (folded from
// p's ledger) and the audit summary (of p's live state).
func ProjectionServices(p *live.Projection) []bus.Service {
	h := &projection{p: p, maxEvents: MaxActivationEvents}
	return []bus.Service{
		{Subject: LeasesSubject, Access: bus.AccessRead, Timeout: ProjectionTimeout, Handle: bus.JSON(h.leases)},
		{Subject: ActivationSubject, Access: bus.AccessRead, Timeout: ProjectionTimeout, Handle: bus.JSON(h.activation)},
		{Subject: AuditSubject, Access: bus.AccessRead, Timeout: ProjectionTimeout, Handle: bus.JSON(h.audit)},
	}
}

// RuntimeServices returns the control API's services (bus.AccessControl):
// revoke, allow, end a session, reap and reload through rt, and the live leases from p.
// rt must be usable from the first request on (build it before the bus).
func RuntimeServices(rt Runtime, p *live.Projection) []bus.Service {
	pr := &projection{p: p, maxEvents: MaxActivationEvents}
	h := &runtimeHandlers{rt: rt}
	return []bus.Service{
		{Subject: LiveLeasesSubject, Access: bus.AccessControl, Timeout: ProjectionTimeout, Handle: bus.JSON(
			func(ctx context.Context, caller string, r *LiveLeasesRequest) (*LeasesReply, error) {
				return pr.leases(ctx, caller, &LeasesRequest{After: r.After, Limit: r.Limit, Session: r.Session, Live: true})
			})},
		{Subject: RevokeSubject, Access: bus.AccessControl, Timeout: RuntimeTimeout, Handle: bus.JSON(h.revoke)},
		{Subject: AllowSubject, Access: bus.AccessControl, Timeout: RuntimeTimeout, Handle: bus.JSON(h.allow)},
		{Subject: EndSessionSubject, Access: bus.AccessControl, Timeout: RuntimeTimeout, Handle: bus.JSON(h.endSession)},
		{Subject: ReapSubject, Access: bus.AccessControl, Timeout: RuntimeTimeout, Handle: bus.JSON(h.reap)},
		{Subject: ReloadSubject, Access: bus.AccessControl, Timeout: RuntimeTimeout, Handle: bus.JSON(h.reload)},
	}
}

func badRequest(text string) error { return bus.Refuse(busclient.CodeBadRequest, text) }

// unavailable is the refusal when the projection has failed.
var unavailable = bus.Refuse(CodeUnavailable, "the projection has failed: see the server's log")

type runtimeHandlers struct{ rt Runtime }

// runtimeError refuses with the code a Runtime error asks for, or passes
// the error on (answered "request failed", logged by the bus).
func runtimeError(err error) error { return runtimeErrorNotFound(err, "no such session") }

// runtimeErrorNotFound is runtimeError with notFound the text of
// CodeNotFound.
func runtimeErrorNotFound(err error, notFound string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return bus.Refuse(CodeNotFound, notFound)
	case errors.Is(err, ErrInvalid):
		return badRequest("the runtime refused the request as invalid")
	case errors.Is(err, ErrUnavailable):
		return bus.Refuse(CodeUnavailable, "the runtime is closed")
	}
	return err
}

func (h *runtimeHandlers) revoke(ctx context.Context, _ string, r *RevokeRequest) (*RevokeReply, error) {
	if err := checkKey(r.Session, r.Shared, r.Server); err != nil {
		return nil, err
	}
	if !events.ValidCode(r.Reason) {
		return nil, badRequest("reason: want [a-z0-9_]{1,64}")
	}
	n, err := h.rt.Revoke(ctx, *r)
	if err := runtimeErrorNotFound(err, "no such lease, configured server or open session"); err != nil {
		return nil, err
	}
	return &RevokeReply{Done: true, Revoked: n}, nil
}

func (h *runtimeHandlers) allow(ctx context.Context, _ string, r *AllowRequest) (*Done, error) {
	if err := checkKey(r.Session, r.Shared, r.Server); err != nil {
		return nil, err
	}
	if err := runtimeError(h.rt.Allow(ctx, *r)); err != nil {
		return nil, err
	}
	return &Done{Done: true}, nil
}

// checkKey checks a revoke's or allow's lease key.
func checkKey(session string, shared bool, server string) error {
	switch {
	case shared == (session != ""):
		return badRequest("give exactly one of session and shared")
	case session != "" && (!events.ValidID(session) || session == sharedKey):
		return badRequest("session: want " + events.IDRule + ", not " + sharedKey)
	case !validServer(server):
		return badRequest(fmt.Sprintf("server: want a configured name or server id, UTF-8, 1 to MaxServerBytes=%d bytes", MaxServerBytes))
	}
	return nil
}

func (h *runtimeHandlers) endSession(ctx context.Context, _ string, r *EndSessionRequest) (*Done, error) {
	if !events.ValidID(r.Session) || r.Session == sharedKey {
		return nil, badRequest("session: want " + events.IDRule + ", not " + sharedKey)
	}
	if err := runtimeError(h.rt.EndSession(ctx, r.Session)); err != nil {
		return nil, err
	}
	return &Done{Done: true}, nil
}

func (h *runtimeHandlers) reap(ctx context.Context, _ string, r *ReapRequest) (*ReapReply, error) {
	if r.IdleMaxNS < 0 {
		return nil, badRequest("idle_max_ns is negative")
	}
	n, err := h.rt.ReapIdle(ctx, time.Duration(r.IdleMaxNS))
	if err != nil && n == 0 {
		return nil, runtimeError(err)
	}
	return &ReapReply{Reaped: n, RecordFailed: err != nil}, nil
}

func (h *runtimeHandlers) reload(ctx context.Context, _ string, _ *ReloadRequest) (*ReloadReply, error) {
	r, err := h.rt.Reload(ctx)
	switch {
	case errors.Is(err, ErrConfigNotLoaded):
		return nil, bus.Refuse(CodeConfigNotLoaded, "the configuration failed to load and the previous one stays in force: see serve's log")
	case err != nil:
		return nil, runtimeError(err)
	}
	for _, n := range slices.Concat(r.Added, r.Removed) {
		if !validServer(n) {
			// Not reached with serve (its names are the gateway's).
			return nil, errors.New("control: the runtime reported a server name that is not UTF-8 of 1 to MaxServerBytes bytes")
		}
	}
	r.Added, r.AddedOmitted = cutNames(r.Added, r.AddedOmitted)
	r.Removed, r.RemovedOmitted = cutNames(r.Removed, r.RemovedOmitted)
	return &r, nil
}

// cutNames keeps at most MaxReloadNames of names (never nil) and adds
// the names left out to omitted. With names of at most MaxServerBytes,
// a ReloadReply fits MaxReplyBytes (reloadReplyMax).
func cutNames(names []string, omitted int) ([]string, int) {
	if len(names) > MaxReloadNames {
		omitted += len(names) - MaxReloadNames
		names = names[:MaxReloadNames]
	}
	return nonNil(names), omitted
}

// reloadReplyMax bounds a ReloadReply's JSON: two lists of MaxReloadNames
// names of MaxServerBytes bytes, each byte escaped at worst as \u00XX,
// and 256 bytes for the rest.
const reloadReplyMax = 2*MaxReloadNames*(6*MaxServerBytes+3) + 256

const _ = uint(MaxReplyBytes - reloadReplyMax)

// sharedKey is the key session of shared leases.
const sharedKey = events.SharedSessionKey

func validServer(s string) bool { return s != "" && len(s) <= MaxServerBytes && utf8.ValidString(s) }

type projection struct {
	p         *live.Projection
	maxEvents uint64 // MaxActivationEvents (smaller in tests)

	// summarize is audit.Summarize (a slower one in tests).
	summarize func(*projector.State, int) audit.Summary

	// computing is held by the one summary computation at a time: a
	// request finding it held and no fresh summary is refused busy rather
	// than queued behind it.
	computing sync.Mutex
	mu        sync.Mutex // guards summary and at
	summary   audit.Summary
	at        time.Time // when summary was computed (zero: never)
}

func (h *projection) leases(_ context.Context, _ string, r *LeasesRequest) (*LeasesReply, error) {
	switch {
	case r.Limit < 0 || r.Limit > MaxLeasesPage:
		return nil, badRequest(fmt.Sprintf("limit: want 0 to MaxLeasesPage=%d", MaxLeasesPage))
	case len(r.After) > MaxCursorBytes:
		return nil, badRequest(fmt.Sprintf("after: longer than MaxCursorBytes=%d", MaxCursorBytes))
	case r.Session != "" && !events.ValidID(r.Session):
		return nil, badRequest("session: want " + events.IDRule)
	}
	limit := r.Limit
	if limit == 0 {
		limit = DefaultLeasesPage
	}
	out := &LeasesReply{Leases: []projector.Lease{}}
	after := 0 // matching rows after the cursor
	// The page is selected in one pass over the table under the read lock
	// (appends wait on it): the limit smallest keys after the cursor are
	// kept in a sorted list, no key string is built and only the page's
	// rows are copied — never a sort of the whole table.
	page := make([]*projector.Lease, 0, min(limit, 64))
	err := h.p.View(func(s *projector.State) {
		out.Seq = s.Seq()
		for l := range s.AllLeases() {
			if r.Session != "" && l.KeySession != r.Session || r.Live && !l.Live() {
				continue
			}
			out.Total++
			if cmpKey(l.KeySession, l.Server, r.After) <= 0 {
				continue
			}
			after++
			if len(page) == limit && lessLease(page[limit-1], l) {
				continue
			}
			i, _ := slices.BinarySearchFunc(page, l, cmpLease)
			page = slices.Insert(page, i, l)
			if len(page) > limit {
				page = page[:limit]
			}
		}
		for _, l := range page {
			out.Leases = append(out.Leases, *l)
		}
	})
	if err != nil {
		return nil, unavailable
	}
	if err := fitLeases(out, after, MaxReplyBytes); err != nil {
		return nil, err
	}
	return out, nil
}

// cmpKey compares the lease key "<session>/<server>" with key (a cursor)
// as strings, without building the lease's key.
func cmpKey(session, server, key string) int {
	n := len(session)
	if len(key) < n {
		if c := strings.Compare(session[:len(key)], key); c != 0 {
			return c
		}
		return 1 // key is a proper prefix
	}
	if c := strings.Compare(session, key[:n]); c != 0 {
		return c
	}
	rest := key[n:]
	if rest == "" {
		return 1
	}
	if rest[0] != '/' {
		return cmp.Compare('/', rest[0])
	}
	return strings.Compare(server, rest[1:])
}

// cmpLease orders leases by key ("<session>/<server>" as a string: not
// the order of the (session, server) pairs, '/' sorts after '-' and '.').
func cmpLease(a, b *projector.Lease) int {
	if a.KeySession == b.KeySession {
		return strings.Compare(a.Server, b.Server)
	}
	// Different sessions: the first byte where "<a>/" and "<b>/" differ
	// decides, within the shorter session plus its '/'.
	as, bs := a.KeySession, b.KeySession
	for i := 0; ; i++ {
		ac, bc := byte('/'), byte('/')
		if i < len(as) {
			ac = as[i]
		}
		if i < len(bs) {
			bc = bs[i]
		}
		if ac != bc {
			return cmp.Compare(ac, bc)
		}
	}
}

func lessLease(a, b *projector.Lease) bool { return cmpLease(a, b) < 0 }

// fitLeases keeps out within max bytes: the rows that do not fit are the
// next page's (after counts the matching rows after the request's cursor,
// on this page and beyond), and Next is set when there are any.
func fitLeases(out *LeasesReply, after, max int) error {
	rows := nonNil(out.Leases)
	out.Leases = []projector.Lease{}
	base, err := jsonSize(out)
	out.Leases = rows
	if err != nil {
		return err
	}
	sizes, err := jsonSizes(rows)
	if err != nil {
		return err
	}
	keep := prefix(base+nextRoom, sizes, max)
	if keep == 0 && len(rows) > 0 {
		return bus.Refuse(CodeTooLarge, "one lease row exceeds MaxReplyBytes")
	}
	out.Leases = rows[:keep]
	if keep > 0 && keep < after {
		out.Next = rows[keep-1].Key().String()
	}
	return nil
}

// nextRoom is what LeasesReply.Next may add to a reply: `,"next":"…"`
// around a cursor (lease keys need no escaping).
const nextRoom = len(`,"next":""`) + MaxCursorBytes

func (h *projection) activation(ctx context.Context, _ string, r *ActivationRequest) (*audit.Activation, error) {
	switch {
	case !events.ValidID(r.Activation):
		return nil, badRequest("activation: want " + events.IDRule)
	case r.Timeline < 0 || r.Timeline > MaxTimeline:
		return nil, badRequest(fmt.Sprintf("timeline: want 0 to MaxTimeline=%d", MaxTimeline))
	}
	if h.p.Err() != nil {
		return nil, unavailable
	}
	f := audit.NewFold(r.Activation, audit.Options{Timeline: r.Timeline})
	err := h.p.Ledger().Scan(ctx, ledger.Query{Activation: r.Activation}, func(_ ledger.Seq, raw []byte) error {
		if f.Events() == h.maxEvents {
			return errTooManyEvents
		}
		return f.AddRaw(raw)
	})
	switch {
	case errors.Is(err, errTooManyEvents):
		return nil, bus.Refuse(CodeTooLarge, fmt.Sprintf("the activation has more than MaxActivationEvents=%d events: use leaseledger audit", MaxActivationEvents))
	case err != nil:
		return nil, err
	}
	a, err := f.Result()
	if errors.Is(err, audit.ErrNoEvents) {
		return nil, bus.Refuse(CodeNotFound, "no events for this activation")
	} else if err != nil {
		return nil, err
	}
	if err := fitActivation(&a, MaxReplyBytes); err != nil {
		return nil, err
	}
	return &a, nil
}

var errTooManyEvents = errors.New("too many events")

// fitActivation keeps a within max bytes: the oldest timeline events go
// first (counted in timeline_omitted; the replay API has them all), then
// the last HTTP request timelines (http_requests_omitted), then the last
// resource request timelines (requests_omitted). A list is only cut once
// every list after it in that order is empty.
func fitActivation(a *audit.Activation, max int) error {
	// Lists are never null in the reply (audit's stable output).
	reqs, httpReqs, timeline := nonNil(a.Requests), nonNil(a.HTTPRequests), nonNil(a.Timeline)
	// The base size is that of the empty lists with the omitted counts
	// at their largest, so that the counts the cut adds cannot overflow.
	counts := [3]int{a.RequestsOmitted, a.HTTPRequestsOmitted, int(a.TimelineOmitted)}
	a.Requests, a.HTTPRequests, a.Timeline = []audit.Request{}, []audit.HTTPRequest{}, []audit.Event{}
	a.RequestsOmitted += len(reqs)
	a.HTTPRequestsOmitted += len(httpReqs)
	a.TimelineOmitted += uint64(len(timeline))
	base, err := jsonSize(a)
	a.Requests, a.HTTPRequests, a.Timeline = reqs, httpReqs, timeline
	a.RequestsOmitted, a.HTTPRequestsOmitted, a.TimelineOmitted = counts[0], counts[1], uint64(counts[2])
	if err != nil {
		return err
	}
	if base > max {
		return bus.Refuse(CodeTooLarge, "the activation's report exceeds MaxReplyBytes: use leaseledger audit")
	}
	reqSizes, err := jsonSizes(reqs)
	if err != nil {
		return err
	}
	httpSizes, err := jsonSizes(httpReqs)
	if err != nil {
		return err
	}
	tlSizes, err := jsonSizes(timeline)
	if err != nil {
		return err
	}
	slices.Reverse(tlSizes) // the newest events first: the timeline keeps its end
	cut := false
	size := base
	// keep returns how many of sizes fit after what is kept so far, none
	// once an earlier list was cut.
	keep := func(sizes []int) int {
		if cut {
			return 0
		}
		k := prefix(size, sizes, max)
		size += listSize(sizes[:k])
		cut = k < len(sizes)
		return k
	}
	k := keep(reqSizes)
	a.RequestsOmitted += len(reqs) - k
	a.Requests = reqs[:k]
	k = keep(httpSizes)
	a.HTTPRequestsOmitted += len(httpReqs) - k
	a.HTTPRequests = httpReqs[:k]
	k = keep(tlSizes)
	a.TimelineOmitted += uint64(len(timeline) - k)
	a.Timeline = timeline[len(timeline)-k:]
	return nil
}

// fitSummary keeps s within max bytes: the last unconfirmed activations
// listed go first (counted in unconfirmed_omitted).
func fitSummary(s *audit.Summary, max int) error {
	list := nonNil(s.Unconfirmed)
	s.Unconfirmed = []audit.Unconfirmed{}
	s.Omitted += len(list) // at its largest (see fitActivation)
	base, err := jsonSize(s)
	s.Omitted -= len(list)
	s.Unconfirmed = list
	if err != nil {
		return err
	}
	sizes, err := jsonSizes(list)
	if err != nil {
		return err
	}
	keep := prefix(base, sizes, max)
	s.Omitted += len(list) - keep
	s.Unconfirmed = list[:keep]
	return nil
}

// nonNil returns list, or an empty list for nil (which encodes as null).
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

// prefix is the largest k such that a JSON document of base bytes with
// an empty list fits max bytes once the list holds the elements of sizes[:k].
func prefix(base int, sizes []int, max int) int {
	total := base
	for k, n := range sizes {
		if k > 0 {
			n++ // the comma
		}
		if total+n > max {
			return k
		}
		total += n
	}
	return len(sizes)
}

// listSize is what the elements of sizes add to an empty JSON list.
func listSize(sizes []int) int {
	total := 0
	for _, n := range sizes {
		total += n
	}
	return total + max(len(sizes)-1, 0)
}

// jsonSizes is the JSON size of each element of list.
func jsonSizes[T any](list []T) ([]int, error) {
	out := make([]int, len(list))
	for i := range list {
		n, err := jsonSize(&list[i])
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

func (h *projection) audit(ctx context.Context, _ string, r *AuditRequest) (*audit.Summary, error) {
	if r.Limit < 0 || r.Limit > MaxUnconfirmed {
		return nil, badRequest(fmt.Sprintf("limit: want 0 to MaxUnconfirmed=%d", MaxUnconfirmed))
	}
	limit := r.Limit
	if limit == 0 {
		limit = audit.DefaultUnconfirmed
	}
	out, ok := h.cached()
	if !ok {
		// The walk of every activation holds the projection's read lock,
		// which appends wait on (hundreds of milliseconds at 200k
		// activations): one at a time, at most once per SummaryMaxAge,
		// and a request arriving meanwhile is refused busy.
		if !h.computing.TryLock() {
			return nil, bus.Refuse(bus.CodeBusy, "an audit summary is being computed: retry later")
		}
		defer h.computing.Unlock()
		if out, ok = h.cached(); !ok {
			var err error
			if summarize := h.summarize; summarize != nil {
				err = h.p.View(func(st *projector.State) { out = summarize(st, MaxUnconfirmed) })
			} else {
				// The live activations and the retired ones stored as
				// snapshot parts (those without the read lock).
				out, err = h.p.Summarize(ctx, MaxUnconfirmed)
			}
			if err != nil {
				return nil, unavailable
			}
			h.mu.Lock()
			h.summary, h.at = out, time.Now()
			h.mu.Unlock()
		}
	}
	if len(out.Unconfirmed) > limit {
		out.Omitted += len(out.Unconfirmed) - limit
		out.Unconfirmed = out.Unconfirmed[:limit]
	}
	if err := fitSummary(&out, MaxReplyBytes); err != nil {
		return nil, err
	}
	return &out, nil
}

// cached returns the last summary while it is younger than SummaryMaxAge
// (its listed entries are shared, read-only).
func (h *projection) cached() (audit.Summary, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.summary, !h.at.IsZero() && time.Since(h.at) < SummaryMaxAge
}

// jsonSize is the length of v's JSON as the reply encodes it.
func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b), err
}
