package runtime

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resource subscriptions are session state. A session subscribes to a
// resource on the lease of a server (its own, or the shared one) with a
// request handle (Subscribe); once the server answered, the session holds
// the subscription (subscription.started) until it unsubscribes
// (subscription.ended{unsubscribed}), it ends (session_ended) or the
// lease ends under it (lease_ended). Only the URI's digest is recorded.
//
// On a shared lease several sessions may hold the same URI on one server
// connection, where the server keeps a single subscription: an
// unsubscribe reaches the server only when no other session holds the
// URI (otherwise it completes without a wire request), and so does the
// unsubscribe the runtime sends on its own when a session ends holding a
// subscription on a shared lease that still runs. Subscribes and
// unsubscribes of one (lease, URI) run one at a time, from before their
// request until their completion is recorded, so the table and the
// server's state move together.

// Bounds of resource subscriptions.
const (
	// MaxSubscriptionsPerSession bounds the subscriptions a session holds
	// or is subscribing to, over all its leases; a Subscribe beyond it is
	// refused before anything is recorded (ErrTooManySubscriptions).
	MaxSubscriptionsPerSession = 256
	// SessionUnsubscribeTimeout bounds the unsubscribe a session's end
	// sends, best effort, for each subscription it held on a shared lease
	// that still runs (waiting for the URI's turn included).
	SessionUnsubscribeTimeout = 2 * time.Second
)

// Subscribe starts resources/subscribe of uri on the lease of server for
// this session; its result is ResourceResult.Subscribed. Once the server
// answered, the session holds the subscription: subscription.started is
// recorded after the handle's request.completed. A repeated Subscribe of
// the same (session, server, uri) while it is held is sent to the server
// again (subscribing is idempotent there) and records nothing more. A
// session holds at most MaxSubscriptionsPerSession (ErrTooManySubscriptions,
// nothing recorded). A Subscribe cancelled (or whose owner ended) after
// the server saw it leaves the server's state unknown, like every cancel:
// the session does not hold it. See ReadResource for the rest.
func (c LeaseCapability) Subscribe(ctx context.Context, owner *Owner, server, uri string, opts RequestOptions) (*ResourceHandle, error) {
	return c.startRequest(ctx, owner, server, requestSpec{method: events.MethodSubscribe, arg: uri}, opts)
}

// Unsubscribe starts resources/unsubscribe of uri on the lease of server
// for this session; its result is ResourceResult.Unsubscribed. When the
// session held the subscription, subscription.ended{unsubscribed} is
// recorded after the handle's request.completed. When other sessions
// hold uri on the same (shared) lease, no request is sent (the server
// goes on sending its updates, for them) and the handle completes at
// once. See ReadResource for the rest.
func (c LeaseCapability) Unsubscribe(ctx context.Context, owner *Owner, server, uri string, opts RequestOptions) (*ResourceHandle, error) {
	return c.startRequest(ctx, owner, server, requestSpec{method: events.MethodUnsubscribe, arg: uri}, opts)
}

// subKey is one subscribed resource on one lease.
type subKey struct {
	l   *lease
	uri string
}

// subTable is the manager's subscriptions, guarded by mu (a leaf lock:
// nothing else is taken under it, and no I/O).
type subTable struct {
	mu sync.Mutex
	// byLease: a lease's subscribed URIs and the sessions holding each.
	byLease map[*lease]map[string]map[string]struct{}
	// bySession: what each session holds.
	bySession map[string]map[subKey]struct{}
	// pending counts each session's subscribes in flight not holding yet
	// (their reserved slots).
	pending map[string]int
	// turns serialize the subscribes and unsubscribes of one (lease, uri).
	turns map[subKey]*subTurn
}

type subTurn struct {
	ch   chan struct{} // holds one token while taken
	refs int           // holders and waiters, guarded by subTable.mu
}

func (t *subTable) init() {
	if t.byLease == nil {
		t.byLease = map[*lease]map[string]map[string]struct{}{}
		t.bySession = map[string]map[subKey]struct{}{}
		t.pending = map[string]int{}
		t.turns = map[subKey]*subTurn{}
	}
}

// holdsLocked reports whether session holds k; mu is held.
func (t *subTable) holdsLocked(session string, k subKey) bool {
	_, ok := t.bySession[session][k]
	return ok
}

// addLocked records session holding k; mu is held.
func (t *subTable) addLocked(session string, k subKey) {
	uris := t.byLease[k.l]
	if uris == nil {
		uris = map[string]map[string]struct{}{}
		t.byLease[k.l] = uris
	}
	ss := uris[k.uri]
	if ss == nil {
		ss = map[string]struct{}{}
		uris[k.uri] = ss
	}
	ss[session] = struct{}{}
	mine := t.bySession[session]
	if mine == nil {
		mine = map[subKey]struct{}{}
		t.bySession[session] = mine
	}
	mine[k] = struct{}{}
}

// removeLocked forgets session holding k; mu is held.
func (t *subTable) removeLocked(session string, k subKey) {
	if ss := t.byLease[k.l][k.uri]; ss != nil {
		delete(ss, session)
		if len(ss) == 0 {
			delete(t.byLease[k.l], k.uri)
			if len(t.byLease[k.l]) == 0 {
				delete(t.byLease, k.l)
			}
		}
	}
	if mine := t.bySession[session]; mine != nil {
		delete(mine, k)
		if len(mine) == 0 {
			delete(t.bySession, session)
		}
	}
}

// subscribers returns the ids of the sessions holding a subscription to
// uri (exactly; a notification about a sub-resource names its own uri)
// on lease l, sorted; nil when none. It takes one leaf lock and does no
// I/O: a notification handler may call it.
func (m *Manager) subscribers(l *lease, uri string) []string {
	t := &m.subs
	t.mu.Lock()
	defer t.mu.Unlock()
	ss := t.byLease[l][uri]
	if len(ss) == 0 {
		return nil
	}
	out := make([]string, 0, len(ss))
	for s := range ss {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// othersSubscribed reports whether a session other than session holds
// uri on l.
func (m *Manager) othersSubscribed(l *lease, session, uri string) bool {
	t := &m.subs
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := range t.byLease[l][uri] {
		if s != session {
			return true
		}
	}
	return false
}

// reserveSubscription reserves one of the session's slots for a subscribe
// handle that does not hold its uri yet; ErrTooManySubscriptions when the
// session holds or reserved MaxSubscriptionsPerSession.
func (m *Manager) reserveSubscription(h *ResourceHandle) error {
	if h.method != events.MethodSubscribe {
		return nil
	}
	t := &m.subs
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	if t.holdsLocked(h.session, subKey{h.l, h.spec.arg}) {
		return nil
	}
	if len(t.bySession[h.session])+t.pending[h.session] >= MaxSubscriptionsPerSession {
		e := h.errorOf(ErrTooManySubscriptions, nil)
		e.Count = MaxSubscriptionsPerSession
		return e
	}
	t.pending[h.session]++
	h.subReserved = true
	return nil
}

// unreserveSubscription gives up h's reserved slot, if it still has one.
func (m *Manager) unreserveSubscription(h *ResourceHandle) {
	t := &m.subs
	t.mu.Lock()
	t.unreserveLocked(h)
	t.mu.Unlock()
}

func (t *subTable) unreserveLocked(h *ResourceHandle) {
	if !h.subReserved {
		return
	}
	h.subReserved = false
	if t.pending[h.session]--; t.pending[h.session] <= 0 {
		delete(t.pending, h.session)
	}
}

// subscriptionSettled updates the table for a subscribe or unsubscribe
// handle completed ok and returns the events of the change, recorded
// after its request.completed: subscription.started for a subscription
// the session did not hold (followed by subscription.ended{lease_ended}
// when the lease's end already swept its subscriptions),
// subscription.ended{unsubscribed} for one it held; none otherwise.
func (m *Manager) subscriptionSettled(h *ResourceHandle) []events.Draft {
	if h.method != events.MethodSubscribe && h.method != events.MethodUnsubscribe {
		return nil
	}
	t := &m.subs
	k := subKey{h.l, h.spec.arg}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	t.unreserveLocked(h)
	digest := sha256Hex(k.uri)
	held := t.holdsLocked(h.session, k)
	switch {
	case h.method == events.MethodUnsubscribe:
		if !held {
			return nil
		}
		t.removeLocked(h.session, k)
		return []events.Draft{h.draft(&events.SubscriptionEnded{URISHA256: digest, Reason: events.SubscriptionUnsubscribed, Handle: h.id})}
	case held:
		return nil
	case h.l.subsEnded:
		return []events.Draft{h.draft(&events.SubscriptionStarted{Handle: h.id, URISHA256: digest}),
			h.draft(&events.SubscriptionEnded{URISHA256: digest, Reason: events.SubscriptionLeaseEnded})}
	}
	t.addLocked(h.session, k)
	return []events.Draft{h.draft(&events.SubscriptionStarted{Handle: h.id, URISHA256: digest})}
}

// lockSubscription waits for the turn of (l, uri) until ctx ends; it
// returns the release of the turn, or nil when ctx ended first.
func (m *Manager) lockSubscription(ctx context.Context, l *lease, uri string) func() {
	t := &m.subs
	k := subKey{l, uri}
	t.mu.Lock()
	t.init()
	turn := t.turns[k]
	if turn == nil {
		turn = &subTurn{ch: make(chan struct{}, 1)}
		t.turns[k] = turn
	}
	turn.refs++
	t.mu.Unlock()
	drop := func() {
		t.mu.Lock()
		if turn.refs--; turn.refs == 0 {
			delete(t.turns, k)
		}
		t.mu.Unlock()
	}
	select {
	case turn.ch <- struct{}{}:
		return func() {
			<-turn.ch
			drop()
		}
	case <-ctx.Done():
		drop()
		return nil
	}
}

// endLeaseSubscriptions sweeps the subscriptions lease l carries at its
// end and returns their subscription.ended{lease_ended}; none is added
// after (a subscribe completing later records its start and end
// together).
func (m *Manager) endLeaseSubscriptions(l *lease) []events.Draft {
	t := &m.subs
	t.mu.Lock()
	defer t.mu.Unlock()
	l.subsEnded = true
	var out []events.Draft
	uris := t.byLease[l]
	for _, uri := range slices.Sorted(maps.Keys(uris)) {
		sessions := slices.Sorted(maps.Keys(uris[uri]))
		digest := sha256Hex(uri)
		for _, s := range sessions {
			t.removeLocked(s, subKey{l, uri})
			out = append(out, events.Draft{Activation: l.activation, Session: s, Server: l.key.server,
				Payload: &events.SubscriptionEnded{URISHA256: digest, Reason: events.SubscriptionLeaseEnded}})
		}
	}
	return out
}

// endSessionSubscriptions ends every subscription session still holds, at
// its end: on a shared lease that still runs, where no other session
// holds the uri, the server is sent resources/unsubscribe first (best
// effort, in parallel, each bounded by SessionUnsubscribeTimeout, through
// the lease's gate); then subscription.ended{session_ended} is recorded
// for each (with the unsubscribe's outcome when one was sent). It returns
// what failed to record.
func (m *Manager) endSessionSubscriptions(ctx context.Context, session string) error {
	t := &m.subs
	t.mu.Lock()
	var keys []subKey
	for k := range t.bySession[session] {
		keys = append(keys, k)
	}
	for _, k := range keys {
		t.removeLocked(session, k)
	}
	t.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, func(a, b subKey) int {
		if c := strings.Compare(a.l.activation, b.l.activation); c != 0 {
			return c
		}
		return strings.Compare(a.uri, b.uri)
	})
	ctx = context.WithoutCancel(ctx)
	outcomes := make([]events.RequestOutcome, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		if k.l.key.session == SharedSessionKey {
			wg.Go(func() { outcomes[i] = m.unsubscribeAtEnd(ctx, session, k) })
		}
	}
	wg.Wait()
	drafts := make([]events.Draft, len(keys))
	for i, k := range keys {
		drafts[i] = events.Draft{Activation: k.l.activation, Session: session, Server: k.l.key.server,
			Payload: &events.SubscriptionEnded{URISHA256: sha256Hex(k.uri), Reason: events.SubscriptionSessionEnded, Unsubscribe: outcomes[i]}}
	}
	return m.emitFact(ctx, drafts...)
}

// unsubscribeAtEnd sends resources/unsubscribe for a subscription an
// ending session held on a shared lease, unless another session holds
// the uri or the lease is out of service; "" when nothing was sent.
func (m *Manager) unsubscribeAtEnd(ctx context.Context, session string, k subKey) events.RequestOutcome {
	ctx, cancel := context.WithTimeout(ctx, SessionUnsubscribeTimeout)
	defer cancel()
	unlock := m.lockSubscription(ctx, k.l, k.uri)
	if unlock == nil {
		return events.RequestTimeout
	}
	defer unlock()
	if m.othersSubscribed(k.l, session, k.uri) {
		return ""
	}
	if k.l.admitRequest(session) != nil {
		return "" // revoked, poisoned or gone: its end sweeps the rest
	}
	k.l.admitting.Done()
	defer k.l.release()
	err := k.l.cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: k.uri})
	switch {
	case err == nil:
		return events.RequestOK
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return events.RequestTimeout
	}
	return events.RequestError
}
