package events

import "strings"

// Closed value sets. Every payload field whose values form a closed set has
// a named type here, with one constant per value and a Valid method;
// producers, the projector and the generator use the constants, and the
// payload validators refuse anything else. The JSON form is the plain
// string, so schemas and stored events are unchanged by the types.

// Cleanup is how a child's cleanup is observed: through the guardian's receipt, or best effort.
type Cleanup string

// Cleanup values.
const (
	CleanupVerified   Cleanup = "verified"
	CleanupBestEffort Cleanup = "best_effort"
)

// Valid reports whether v is one of the Cleanup values.
func (v Cleanup) Valid() bool {
	switch v {
	case CleanupVerified, CleanupBestEffort:
		return true
	}
	return false
}

// values lists the Cleanup values in catalogue order.
func (Cleanup) values() []Cleanup { return []Cleanup{CleanupVerified, CleanupBestEffort} }

// PoisonReason is why a lease was poisoned before a call.
type PoisonReason string

// PoisonReason values.
const (
	PoisonNameMismatch   PoisonReason = "name_mismatch"
	PoisonDigestMismatch PoisonReason = "digest_mismatch"
)

// Valid reports whether v is one of the PoisonReason values.
func (v PoisonReason) Valid() bool {
	switch v {
	case PoisonNameMismatch, PoisonDigestMismatch:
		return true
	}
	return false
}

// values lists the PoisonReason values in catalogue order.
func (PoisonReason) values() []PoisonReason {
	return []PoisonReason{PoisonNameMismatch, PoisonDigestMismatch}
}

// CallOutcome is how a tools/call ended.
type CallOutcome string

// CallOutcome values.
const (
	CallOK             CallOutcome = "ok"
	CallToolError      CallOutcome = "tool_error"
	CallTransportError CallOutcome = "transport_error"
	// CallRemoteError: the server answered with a JSON-RPC error; the
	// connection is intact and the lease is kept.
	CallRemoteError CallOutcome = "remote_error"
	CallCancelled   CallOutcome = "cancelled"
	// CallTimeout: the call's budget expired before the server answered;
	// the server was sent notifications/cancelled and may still be running
	// it.
	CallTimeout CallOutcome = "timeout"
)

// Valid reports whether v is one of the CallOutcome values.
func (v CallOutcome) Valid() bool {
	switch v {
	case CallOK, CallToolError, CallTransportError, CallRemoteError, CallCancelled, CallTimeout:
		return true
	}
	return false
}

// values lists the CallOutcome values in catalogue order.
func (CallOutcome) values() []CallOutcome {
	return []CallOutcome{CallOK, CallToolError, CallTransportError, CallRemoteError, CallCancelled, CallTimeout}
}

// RequestMethod is the MCP method of a client→server request handle.
type RequestMethod string

// RequestMethod values.
const (
	MethodListResources         RequestMethod = "resources/list"
	MethodListResourceTemplates RequestMethod = "resources/templates/list"
	MethodReadResource          RequestMethod = "resources/read"
	MethodListPrompts           RequestMethod = "prompts/list"
	MethodGetPrompt             RequestMethod = "prompts/get"
	MethodComplete              RequestMethod = "completion/complete"
	MethodSubscribe             RequestMethod = "resources/subscribe"
	MethodUnsubscribe           RequestMethod = "resources/unsubscribe"
)

// Valid reports whether v is one of the RequestMethod values.
func (v RequestMethod) Valid() bool {
	switch v {
	case MethodListResources, MethodListResourceTemplates, MethodReadResource,
		MethodListPrompts, MethodGetPrompt, MethodComplete, MethodSubscribe, MethodUnsubscribe:
		return true
	}
	return false
}

// values lists the RequestMethod values in catalogue order.
func (RequestMethod) values() []RequestMethod {
	return []RequestMethod{MethodListResources, MethodListResourceTemplates, MethodReadResource,
		MethodListPrompts, MethodGetPrompt, MethodComplete, MethodSubscribe, MethodUnsubscribe}
}

// CompletionRef is the reference type of a completion/complete request.
type CompletionRef string

// CompletionRef values.
const (
	RefPrompt   CompletionRef = "ref/prompt"
	RefResource CompletionRef = "ref/resource"
)

// Valid reports whether v is one of the CompletionRef values.
func (v CompletionRef) Valid() bool { return v == RefPrompt || v == RefResource }

// values lists the CompletionRef values in catalogue order.
func (CompletionRef) values() []CompletionRef { return []CompletionRef{RefPrompt, RefResource} }

// RequestOutcome is how a resource request ended.
type RequestOutcome string

// RequestOutcome values.
const (
	RequestOK      RequestOutcome = "ok"
	RequestError   RequestOutcome = "error"
	RequestTimeout RequestOutcome = "timeout"
)

// Valid reports whether v is one of the RequestOutcome values.
func (v RequestOutcome) Valid() bool {
	switch v {
	case RequestOK, RequestError, RequestTimeout:
		return true
	}
	return false
}

// values lists the RequestOutcome values in catalogue order.
func (RequestOutcome) values() []RequestOutcome {
	return []RequestOutcome{RequestOK, RequestError, RequestTimeout}
}

// Delivery is whether a message was accepted or delivered, as far as the host can tell.
type Delivery string

// Delivery values.
const (
	DeliveryYes     Delivery = "yes"
	DeliveryNo      Delivery = "no"
	DeliveryUnknown Delivery = "unknown"
)

// Valid reports whether v is one of the Delivery values.
func (v Delivery) Valid() bool {
	switch v {
	case DeliveryYes, DeliveryNo, DeliveryUnknown:
		return true
	}
	return false
}

// values lists the Delivery values in catalogue order.
func (Delivery) values() []Delivery { return []Delivery{DeliveryYes, DeliveryNo, DeliveryUnknown} }

// Remote is what is known of remote execution after a cancel: never a rollback promise.
type Remote string

// Remote values.
const (
	RemoteUnknown Remote = "unknown"
)

// Valid reports whether v is one of the Remote values.
func (v Remote) Valid() bool {
	switch v {
	case RemoteUnknown:
		return true
	}
	return false
}

// values lists the Remote values in catalogue order.
func (Remote) values() []Remote { return []Remote{RemoteUnknown} }

// Transport is a connection's transport.
type Transport string

// Transport values.
const (
	TransportStdio Transport = "stdio"
	TransportHTTP  Transport = "http"
)

// Valid reports whether v is one of the Transport values.
func (v Transport) Valid() bool {
	switch v {
	case TransportStdio, TransportHTTP:
		return true
	}
	return false
}

// values lists the Transport values in catalogue order.
func (Transport) values() []Transport { return []Transport{TransportStdio, TransportHTTP} }

// SessionTransport is the entry point through which a host opened a
// session.
type SessionTransport string

// SessionTransport values.
const (
	// SessionEmbedded: a Go host calling the runtime package directly.
	SessionEmbedded SessionTransport = "embedded"
	// SessionMCPHTTP: an MCP client session of the gateway's Streamable
	// HTTP endpoint.
	SessionMCPHTTP SessionTransport = "mcp_http"
)

// Valid reports whether v is one of the SessionTransport values.
func (v SessionTransport) Valid() bool {
	switch v {
	case SessionEmbedded, SessionMCPHTTP:
		return true
	}
	return false
}

// values lists the SessionTransport values in catalogue order.
func (SessionTransport) values() []SessionTransport {
	return []SessionTransport{SessionEmbedded, SessionMCPHTTP}
}

// Signal is a signal the guardian's cleanup sequence sends.
type Signal string

// Signal values.
const (
	SignalTERM Signal = "TERM"
	SignalKILL Signal = "KILL"
)

// Valid reports whether v is one of the Signal values.
func (v Signal) Valid() bool {
	switch v {
	case SignalTERM, SignalKILL:
		return true
	}
	return false
}

// values lists the Signal values in catalogue order.
func (Signal) values() []Signal { return []Signal{SignalTERM, SignalKILL} }

// LostReason is why a guardian's cleanup evidence is incomplete.
type LostReason string

// LostReason values.
const (
	LostReceipt     LostReason = "receipt_lost"
	LostHelper      LostReason = "helper_lost"
	LostPipesClosed LostReason = "pipes_closed"
	LostDeadline    LostReason = "deadline"
)

// Valid reports whether v is one of the LostReason values.
func (v LostReason) Valid() bool {
	switch v {
	case LostReceipt, LostHelper, LostPipesClosed, LostDeadline:
		return true
	}
	return false
}

// values lists the LostReason values in catalogue order.
func (LostReason) values() []LostReason {
	return []LostReason{LostReceipt, LostHelper, LostPipesClosed, LostDeadline}
}

// HTTPMethod is the method of a tracked HTTP request.
type HTTPMethod string

// HTTPMethod values.
const (
	HTTPGet    HTTPMethod = "GET"
	HTTPPost   HTTPMethod = "POST"
	HTTPDelete HTTPMethod = "DELETE"
	HTTPPut    HTTPMethod = "PUT"
	HTTPPatch  HTTPMethod = "PATCH"
	HTTPHead   HTTPMethod = "HEAD"
)

// Valid reports whether v is one of the HTTPMethod values.
func (v HTTPMethod) Valid() bool {
	switch v {
	case HTTPGet, HTTPPost, HTTPDelete, HTTPPut, HTTPPatch, HTTPHead:
		return true
	}
	return false
}

// values lists the HTTPMethod values in catalogue order.
func (HTTPMethod) values() []HTTPMethod {
	return []HTTPMethod{HTTPGet, HTTPPost, HTTPDelete, HTTPPut, HTTPPatch, HTTPHead}
}

// HTTPOutcome is how a tracked HTTP request completed.
type HTTPOutcome string

// HTTPOutcome values.
const (
	HTTPOK      HTTPOutcome = "ok"
	HTTPError   HTTPOutcome = "error"
	HTTPTimeout HTTPOutcome = "timeout"
	HTTPAborted HTTPOutcome = "aborted"
)

// Valid reports whether v is one of the HTTPOutcome values.
func (v HTTPOutcome) Valid() bool {
	switch v {
	case HTTPOK, HTTPError, HTTPTimeout, HTTPAborted:
		return true
	}
	return false
}

// values lists the HTTPOutcome values in catalogue order.
func (HTTPOutcome) values() []HTTPOutcome {
	return []HTTPOutcome{HTTPOK, HTTPError, HTTPTimeout, HTTPAborted}
}

// HTTPBarrierOutcome is what an HTTP completion barrier observed.
type HTTPBarrierOutcome string

// HTTPBarrierOutcome values.
const (
	HTTPBarrierOK          HTTPBarrierOutcome = "ok"
	HTTPBarrierError       HTTPBarrierOutcome = "error"
	HTTPBarrierTimeout     HTTPBarrierOutcome = "timeout"
	HTTPBarrierUnsupported HTTPBarrierOutcome = "unsupported"
)

// Valid reports whether v is one of the HTTPBarrierOutcome values.
func (v HTTPBarrierOutcome) Valid() bool {
	switch v {
	case HTTPBarrierOK, HTTPBarrierError, HTTPBarrierTimeout, HTTPBarrierUnsupported:
		return true
	}
	return false
}

// values lists the HTTPBarrierOutcome values in catalogue order.
func (HTTPBarrierOutcome) values() []HTTPBarrierOutcome {
	return []HTTPBarrierOutcome{HTTPBarrierOK, HTTPBarrierError, HTTPBarrierTimeout, HTTPBarrierUnsupported}
}

// FailureCause is the operator's account of why an acquisition (or a
// call) failed: what the runtime observed at its own boundary — a socket
// error, a resolver or TLS failure, which of its timers fired, an HTTP
// status, a process that exited — never text from the MCP server.
type FailureCause string

// FailureCause values.
const (
	// CauseConnectionRefused: the dial to the endpoint was refused
	// (nothing listens there).
	CauseConnectionRefused FailureCause = "connection_refused"
	// CauseConnectionReset: the connection was reset or closed by the peer
	// before a response (ECONNRESET, EPIPE, an unexpected EOF).
	CauseConnectionReset FailureCause = "connection_reset"
	// CauseHostUnreachable: no route to the endpoint's network or host.
	CauseHostUnreachable FailureCause = "host_unreachable"
	// CauseDNS: the endpoint's host name did not resolve.
	CauseDNS FailureCause = "dns"
	// CauseTLS: the TLS handshake failed (certificate, protocol, alert).
	CauseTLS FailureCause = "tls"
	// CauseConnectTimeout: dialing (TCP and TLS) outlived the connect
	// timeout.
	CauseConnectTimeout FailureCause = "connect_timeout"
	// CauseReceiveTimeout: no response byte, or no body bytes, within the
	// receive timeout.
	CauseReceiveTimeout FailureCause = "receive_timeout"
	// CauseRequestTimeout: a request outlived the whole-request timeout.
	CauseRequestTimeout FailureCause = "request_timeout"
	// CauseAcquireTimeout: the acquisition's budget expired (the step is
	// the reason: initialize_failed, listing_failed).
	CauseAcquireTimeout FailureCause = "acquire_timeout"
	// CauseHTTPStatus: the endpoint answered with an HTTP error status
	// (http_status holds it).
	CauseHTTPStatus FailureCause = "http_status"
	// CauseRedirectRefused: the endpoint redirected where the runtime does
	// not follow (a status other than 307, another origin, too many hops,
	// a bad Location).
	CauseRedirectRefused FailureCause = "redirect_refused"
	// CauseResponseTooLarge: a response body exceeded its bound.
	CauseResponseTooLarge FailureCause = "response_too_large"
	// CauseProtocol: the transport worked but the MCP exchange did not (an
	// error or malformed answer to initialize or tools/list).
	CauseProtocol FailureCause = "protocol"
	// CauseProcessExited: the server's process ended before it answered
	// (its wait status is in the activation's guardian facts).
	CauseProcessExited FailureCause = "process_exited"
	// CauseSpawnFailed: the guardian ran but could not start the command.
	CauseSpawnFailed FailureCause = "spawn_failed"
	// CauseHelperUnavailable: the guardian helper is missing, could not
	// start, or speaks another version.
	CauseHelperUnavailable FailureCause = "helper_unavailable"
	// CauseCancelled: the caller's context ended first.
	CauseCancelled FailureCause = "cancelled"
	// CauseTransport: another transport failure (none of the above).
	CauseTransport FailureCause = "transport"
)

// Valid reports whether v is one of the FailureCause values.
func (v FailureCause) Valid() bool {
	switch v {
	case CauseConnectionRefused, CauseConnectionReset, CauseHostUnreachable, CauseDNS, CauseTLS,
		CauseConnectTimeout, CauseReceiveTimeout, CauseRequestTimeout, CauseAcquireTimeout,
		CauseHTTPStatus, CauseRedirectRefused, CauseResponseTooLarge, CauseProtocol,
		CauseProcessExited, CauseSpawnFailed, CauseHelperUnavailable, CauseCancelled, CauseTransport:
		return true
	}
	return false
}

// values lists the FailureCause values in catalogue order.
func (FailureCause) values() []FailureCause {
	return []FailureCause{CauseConnectionRefused, CauseConnectionReset, CauseHostUnreachable, CauseDNS, CauseTLS,
		CauseConnectTimeout, CauseReceiveTimeout, CauseRequestTimeout, CauseAcquireTimeout,
		CauseHTTPStatus, CauseRedirectRefused, CauseResponseTooLarge, CauseProtocol,
		CauseProcessExited, CauseSpawnFailed, CauseHelperUnavailable, CauseCancelled, CauseTransport}
}

// optMember is member for an optional field: empty is absent.
func optMember[T interface {
	~string
	Valid() bool
	values() []T
}](field string, v T) error {
	if v == "" {
		return nil
	}
	return member(field, v)
}

// member validates that v is a member of its closed set; the message lists
// the set from its constants.
func member[T interface {
	~string
	Valid() bool
	values() []T
}](field string, v T) error {
	if v.Valid() {
		return nil
	}
	var b strings.Builder
	b.WriteString("want one of ")
	for i, x := range v.values() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(x))
	}
	return invalid(field, b.String())
}
