package events

// ---- request: caller-owned resource request handles ----

// RequestRegistered records a handle registered (and acknowledged) before
// any dispatch.
type RequestRegistered struct {
	Handle string        `json:"handle"`
	Owner  string        `json:"owner"`
	Method RequestMethod `json:"method"` // resources/*, prompts/list, prompts/get, completion/complete
	// URISHA256 is the SHA-256 of the request's resource URI (resources/read,
	// resources/subscribe, resources/unsubscribe, and completion/complete
	// with a ref/resource reference); the URI is never recorded.
	URISHA256 string `json:"uri_sha256,omitempty"`
	// NameSHA256 is the SHA-256 of the prompt name (prompts/get, and
	// completion/complete with a ref/prompt reference): provider-defined
	// text, never recorded. Prompt arguments and completion values never
	// are either.
	NameSHA256 string `json:"name_sha256,omitempty"`
	// RefType is the reference type of a completion/complete request.
	RefType   CompletionRef `json:"ref_type,omitempty"`
	TimeoutNS int64         `json:"timeout_ns"`
}

// Kind implements [Payload].
func (*RequestRegistered) Kind() Kind { return "request.registered" }

// Validate implements [Payload].
func (p *RequestRegistered) Validate() error {
	return checks{id("handle", p.Handle), id("owner", p.Owner),
		member("method", p.Method),
		optDigest("uri_sha256", p.URISHA256), optDigest("name_sha256", p.NameSHA256),
		optMember("ref_type", p.RefType), positive("timeout_ns", p.TimeoutNS)}.first()
}

// RequestDispatched records the first wire request of a handle.
type RequestDispatched struct {
	Handle string `json:"handle"`
	WireID string `json:"wire_id"`
}

// Kind implements [Payload].
func (*RequestDispatched) Kind() Kind { return "request.dispatched" }

// Validate implements [Payload].
func (p *RequestDispatched) Validate() error {
	return checks{id("handle", p.Handle), text("wire_id", p.WireID, true)}.first()
}

// RequestContinued records an MRTR continuation: the same logical handle on
// a fresh wire ID.
type RequestContinued struct {
	Handle string `json:"handle"`
	WireID string `json:"wire_id"`
	Round  int    `json:"round"`
}

// Kind implements [Payload].
func (*RequestContinued) Kind() Kind { return "request.continued" }

// Validate implements [Payload].
func (p *RequestContinued) Validate() error {
	return checks{id("handle", p.Handle), text("wire_id", p.WireID, true), between("round", int64(p.Round), 1, 10)}.first()
}

// RequestCompleted records the operation's end as seen by the client.
type RequestCompleted struct {
	Handle      string         `json:"handle"`
	Outcome     RequestOutcome `json:"outcome"` // ok, error, timeout
	ResultBytes int64          `json:"result_bytes"`
	// Detail says what kind of error ended it (outcome error or timeout):
	// remote_error (a JSON-RPC error response; Code holds its code),
	// bad_envelope (a result that breaks the method's envelope),
	// transport_error (the connection failed or the lease ended under it).
	Detail string `json:"detail,omitempty"`
	// Code is the JSON-RPC error code of a remote_error (never its message).
	Code int64 `json:"code,omitempty"`
}

// Kind implements [Payload].
func (*RequestCompleted) Kind() Kind { return "request.completed" }

// Validate implements [Payload].
func (p *RequestCompleted) Validate() error {
	return checks{id("handle", p.Handle), member("outcome", p.Outcome), nonNegative("result_bytes", p.ResultBytes),
		optCode("detail", p.Detail)}.first()
}

// RequestAwaitTimedOut records an await that observed no result; the
// operation stays active.
type RequestAwaitTimedOut struct {
	Handle   string `json:"handle"`
	WaitedNS int64  `json:"waited_ns"`
}

// Kind implements [Payload].
func (*RequestAwaitTimedOut) Kind() Kind { return "request.await_timed_out" }

// Validate implements [Payload].
func (p *RequestAwaitTimedOut) Validate() error {
	return checks{id("handle", p.Handle), nonNegative("waited_ns", p.WaitedNS)}.first()
}

// RequestCancelled is a cancellation report: local settlement kept apart
// from transport acceptance and notification delivery. Remote rollback is
// never promised: "remote" is always "unknown".
type RequestCancelled struct {
	Handle                string   `json:"handle"`
	Reason                string   `json:"reason"`
	LocalSettled          bool     `json:"local_settled"`
	TransportAccepted     Delivery `json:"transport_accepted"`     // yes, no, unknown
	NotificationDelivered Delivery `json:"notification_delivered"` // yes, no, unknown
	Remote                Remote   `json:"remote"`                 // unknown
}

// Kind implements [Payload].
func (*RequestCancelled) Kind() Kind { return "request.cancelled" }

// Validate implements [Payload].
func (p *RequestCancelled) Validate() error {
	return checks{id("handle", p.Handle), code("reason", p.Reason),
		member("transport_accepted", p.TransportAccepted),
		member("notification_delivered", p.NotificationDelivered),
		member("remote", p.Remote)}.first()
}

// RequestOwnerEnded records an owner's end and how many of its handles were
// settled through the same path as cancellation.
type RequestOwnerEnded struct {
	Owner          string `json:"owner"`
	HandlesSettled int    `json:"handles_settled"`
}

// Kind implements [Payload].
func (*RequestOwnerEnded) Kind() Kind { return "request.owner_ended" }

// Validate implements [Payload].
func (p *RequestOwnerEnded) Validate() error {
	return checks{id("owner", p.Owner), nonNegative("handles_settled", int64(p.HandlesSettled))}.first()
}
