package projector

import "github.com/leaseledger/leaseledger/events"

// SubscriptionCounts counts an activation's resource subscriptions
// (subscription.started, subscription.ended) by how they ended. A
// subscription still open when the activation closes is no cleanup
// failure (a subscription ends with its session or its lease): it is
// reported, never a reason. Only the URI's digest is in the log, and only
// counts are here.
type SubscriptionCounts struct {
	Started uint64 `json:"started,omitempty"`
	// Unsubscribed, SessionEnded and LeaseEnded count the ends by reason.
	Unsubscribed uint64 `json:"unsubscribed,omitempty"`
	SessionEnded uint64 `json:"session_ended,omitempty"`
	LeaseEnded   uint64 `json:"lease_ended,omitempty"`
	// Open counts the subscriptions started and not ended, by (session,
	// uri_sha256).
	Open uint64 `json:"open,omitempty"`
	// Unmatched counts a subscription.started of one already open and a
	// subscription.ended of none open: facts the runtime never records.
	Unmatched uint64 `json:"unmatched,omitempty"`
}

// Ended is the number of subscriptions ended, whatever the reason.
func (c *SubscriptionCounts) Ended() uint64 {
	if c == nil {
		return 0
	}
	return c.Unsubscribed + c.SessionEnded + c.LeaseEnded
}

// openCount is c.Open, 0 for nil.
func (c *SubscriptionCounts) openCount() uint64 {
	if c == nil {
		return 0
	}
	return c.Open
}

// ListChangeCounts counts an activation's lease.list_changed by list.
type ListChangeCounts struct {
	Tools     uint64 `json:"tools,omitempty"`
	Prompts   uint64 `json:"prompts,omitempty"`
	Resources uint64 `json:"resources,omitempty"`
}

// Total is the number of list changes counted.
func (c *ListChangeCounts) Total() uint64 {
	if c == nil {
		return 0
	}
	return c.Tools + c.Prompts + c.Resources
}

// RequestCounts counts an activation's request handles of one method: how
// many were registered and how each ended (its first completion's
// outcome, or its cancellation when it was not completed first). A handle
// whose owner ended before either is counted in neither.
type RequestCounts struct {
	Registered uint64 `json:"registered"`
	OK         uint64 `json:"ok,omitempty"`
	Error      uint64 `json:"error,omitempty"`
	Timeout    uint64 `json:"timeout,omitempty"`
	Cancelled  uint64 `json:"cancelled,omitempty"`
}

// subscriptionKey is the key of an open subscription in an activation:
// the subscribing session and the URI's digest.
func subscriptionKey(session, uri string) string { return session + "/" + uri }

// subscriptionStarted counts a subscription.started of a.
func (a *Activation) subscriptionStarted(session string, p *events.SubscriptionStarted) {
	if a.Subscriptions == nil {
		a.Subscriptions = &SubscriptionCounts{}
	}
	c := a.Subscriptions
	c.Started++
	k := subscriptionKey(session, p.URISHA256)
	if a.subsOpen[k] {
		c.Unmatched++
		return
	}
	if a.subsOpen == nil {
		a.subsOpen = map[string]bool{}
	}
	a.subsOpen[k] = true
	c.Open = uint64(len(a.subsOpen))
}

// subscriptionEnded counts a subscription.ended of a.
func (a *Activation) subscriptionEnded(session string, p *events.SubscriptionEnded) {
	if a.Subscriptions == nil {
		a.Subscriptions = &SubscriptionCounts{}
	}
	c := a.Subscriptions
	switch p.Reason {
	case events.SubscriptionUnsubscribed:
		c.Unsubscribed++
	case events.SubscriptionSessionEnded:
		c.SessionEnded++
	case events.SubscriptionLeaseEnded:
		c.LeaseEnded++
	}
	k := subscriptionKey(session, p.URISHA256)
	if !a.subsOpen[k] {
		c.Unmatched++
		return
	}
	delete(a.subsOpen, k)
	if len(a.subsOpen) == 0 {
		a.subsOpen = nil
	}
	c.Open = uint64(len(a.subsOpen))
}

// listChanged counts a lease.list_changed of a.
func (a *Activation) listChanged(l events.ListKind) {
	if a.ListChanges == nil {
		a.ListChanges = &ListChangeCounts{}
	}
	switch l {
	case events.ListTools:
		a.ListChanges.Tools++
	case events.ListPrompts:
		a.ListChanges.Prompts++
	case events.ListResources:
		a.ListChanges.Resources++
	}
}

// requestCounts returns a's counts of method, created when absent.
func (a *Activation) requestCounts(m events.RequestMethod) *RequestCounts {
	c := a.Requests[m]
	if c == nil {
		if a.Requests == nil {
			a.Requests = map[events.RequestMethod]*RequestCounts{}
		}
		c = &RequestCounts{}
		a.Requests[m] = c
	}
	return c
}

// requestEnded counts the end of a request handle of method m in a:
// completed with outcome o, or cancelled when o is "".
func (a *Activation) requestEnded(m events.RequestMethod, o events.RequestOutcome, cancelled bool) {
	c := a.requestCounts(m)
	switch {
	case cancelled:
		c.Cancelled++
	case o == events.RequestOK:
		c.OK++
	case o == events.RequestError:
		c.Error++
	case o == events.RequestTimeout:
		c.Timeout++
	}
}

// subscriptionCopy returns a copy of c for a report or a snapshot; nil
// when nothing was counted.
func subscriptionCopy(c *SubscriptionCounts) *SubscriptionCounts {
	if c == nil || *c == (SubscriptionCounts{}) {
		return nil
	}
	x := *c
	return &x
}

// listChangeCopy returns a copy of c; nil when nothing was counted.
func listChangeCopy(c *ListChangeCounts) *ListChangeCounts {
	if c.Total() == 0 {
		return nil
	}
	x := *c
	return &x
}

// requestsCopy returns a copy of m by value; nil when empty.
func requestsCopy(m map[events.RequestMethod]*RequestCounts) map[events.RequestMethod]RequestCounts {
	if len(m) == 0 {
		return nil
	}
	out := make(map[events.RequestMethod]RequestCounts, len(m))
	for k, c := range m {
		out[k] = *c
	}
	return out
}

// requestsRestore is requestsCopy's inverse; false when a method is not
// one of events.RequestMethod's.
func requestsRestore(m map[events.RequestMethod]RequestCounts) (map[events.RequestMethod]*RequestCounts, bool) {
	if len(m) == 0 {
		return nil, true
	}
	out := make(map[events.RequestMethod]*RequestCounts, len(m))
	for k, c := range m {
		if !k.Valid() {
			return nil, false
		}
		out[k] = &c
	}
	return out, true
}

// subscriptionsOpenList returns the keys of a's open subscriptions,
// sorted (the snapshot's form); nil when none.
func subscriptionsOpenList(open map[string]bool) []string {
	if len(open) == 0 {
		return nil
	}
	return sortedKeys(open)
}

// subscriptionsOpenRestore is subscriptionsOpenList's inverse.
func subscriptionsOpenRestore(keys []string) map[string]bool {
	if len(keys) == 0 {
		return nil
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out
}
