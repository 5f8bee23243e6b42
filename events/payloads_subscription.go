package events

// ---- subscription: resource subscriptions as session state ----

// Kinds of the subscription family.
const (
	KindSubscriptionStarted Kind = "subscription.started"
	KindSubscriptionEnded   Kind = "subscription.ended"
)

// SubscriptionStarted records a resource subscription a session holds on
// a lease (the envelope's activation, session and server): the server
// answered the subscribe request Handle. Only the URI's digest is kept.
type SubscriptionStarted struct {
	Handle    string `json:"handle"`     // the resources/subscribe request handle
	URISHA256 string `json:"uri_sha256"` // SHA-256 of the subscribed URI
}

// Kind implements [Payload].
func (*SubscriptionStarted) Kind() Kind { return KindSubscriptionStarted }

// Validate implements [Payload].
func (p *SubscriptionStarted) Validate() error {
	return checks{id("handle", p.Handle), digest("uri_sha256", p.URISHA256)}.first()
}

// SubscriptionEnded records the end of a subscription.started of the same
// (activation, session, server, uri_sha256).
type SubscriptionEnded struct {
	URISHA256 string                `json:"uri_sha256"`
	Reason    SubscriptionEndReason `json:"reason"` // unsubscribed, session_ended, lease_ended
	// Handle is the resources/unsubscribe request handle (reason
	// unsubscribed); omitted otherwise.
	Handle string `json:"handle,omitempty"`
	// Unsubscribe is the outcome of the unsubscribe the runtime sent on
	// its own at the session's end (reason session_ended, on a shared
	// lease still running); omitted when none was sent.
	Unsubscribe RequestOutcome `json:"unsubscribe,omitempty"`
}

// Kind implements [Payload].
func (*SubscriptionEnded) Kind() Kind { return KindSubscriptionEnded }

// Validate implements [Payload].
func (p *SubscriptionEnded) Validate() error {
	var handle error
	if p.Handle != "" {
		handle = id("handle", p.Handle)
	}
	return checks{digest("uri_sha256", p.URISHA256), member("reason", p.Reason),
		handle, optMember("unsubscribe", p.Unsubscribe)}.first()
}

// SubscriptionEndReason is why a subscription ended.
type SubscriptionEndReason string

// SubscriptionEndReason values.
const (
	// SubscriptionUnsubscribed: the session unsubscribed and the server
	// answered.
	SubscriptionUnsubscribed SubscriptionEndReason = "unsubscribed"
	// SubscriptionSessionEnded: the session ended holding it.
	SubscriptionSessionEnded SubscriptionEndReason = "session_ended"
	// SubscriptionLeaseEnded: the lease (its server's connection) ended
	// under it.
	SubscriptionLeaseEnded SubscriptionEndReason = "lease_ended"
)

// Valid reports whether v is one of the SubscriptionEndReason values.
func (v SubscriptionEndReason) Valid() bool {
	switch v {
	case SubscriptionUnsubscribed, SubscriptionSessionEnded, SubscriptionLeaseEnded:
		return true
	}
	return false
}

// values lists the SubscriptionEndReason values in catalogue order.
func (SubscriptionEndReason) values() []SubscriptionEndReason {
	return []SubscriptionEndReason{SubscriptionUnsubscribed, SubscriptionSessionEnded, SubscriptionLeaseEnded}
}
