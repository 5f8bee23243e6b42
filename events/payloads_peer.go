package events

// ---- peer: the server→client direction of a lease ----

// Kinds of the server→client direction.
const (
	// KindRelayCompleted is the kind of [RelayCompleted].
	KindRelayCompleted Kind = "relay.completed"
	// KindLeaseListChanged is the kind of [LeaseListChanged].
	KindLeaseListChanged Kind = "lease.list_changed"
	// KindSessionLogLevel is the kind of [SessionLogLevel].
	KindSessionLogLevel Kind = "session.log_level"
)

// RelayCompleted records one server→client request of a lease
// (sampling/createMessage, elicitation/create, roots/list) relayed to the
// session's client, or refused, and how it ended. The envelope names the
// lease's activation and server and the session it was relayed to (or
// refused for). Nothing of the request or its answer is recorded — no
// messages, prompt, form, schema, answers or roots — only the method, the
// related client request, the outcome and the duration.
type RelayCompleted struct {
	Method RelayMethod `json:"method"`
	// Related is the id of the session's client request the server's
	// request belongs to (a call id, or a request handle's id); omitted
	// when none is known.
	Related string       `json:"related,omitempty"`
	Outcome RelayOutcome `json:"outcome"`
	// Mode is the elicitation's mode (form, url); elicitation/create only.
	Mode       ElicitMode `json:"mode,omitempty"`
	DurationNS int64      `json:"duration_ns"`
}

// Kind implements [Payload].
func (*RelayCompleted) Kind() Kind { return KindRelayCompleted }

// Validate implements [Payload].
func (p *RelayCompleted) Validate() error {
	return checks{member("method", p.Method), optID("related", p.Related), member("outcome", p.Outcome),
		optMember("mode", p.Mode), nonNegative("duration_ns", p.DurationNS)}.first()
}

// LeaseListChanged records a list_changed notification a lease's server
// sent (notifications/tools/list_changed, …/prompts/…, …/resources/…).
// For tools the lease then lists again and pins the new listing
// (lease.listing_pinned), or ends (lease.terminated{listing_failed}).
type LeaseListChanged struct {
	List ListKind `json:"list"`
}

// Kind implements [Payload].
func (*LeaseListChanged) Kind() Kind { return KindLeaseListChanged }

// Validate implements [Payload].
func (p *LeaseListChanged) Validate() error { return member("list", p.List) }

// SessionLogLevel records the MCP logging level a session set
// (logging/setLevel): sent to the session's live leases and to every lease
// acquired for it later. Log messages themselves are never recorded.
type SessionLogLevel struct {
	Level LogLevel `json:"level"`
}

// Kind implements [Payload].
func (*SessionLogLevel) Kind() Kind { return KindSessionLogLevel }

// Validate implements [Payload].
func (p *SessionLogLevel) Validate() error { return member("level", p.Level) }

func optID(field, v string) error {
	if v == "" {
		return nil
	}
	return id(field, v)
}

// RelayMethod is the MCP method of a relayed server→client request.
type RelayMethod string

// RelayMethod values.
const (
	RelaySampling  RelayMethod = "sampling/createMessage"
	RelayElicit    RelayMethod = "elicitation/create"
	RelayListRoots RelayMethod = "roots/list"
)

// Valid reports whether v is one of the RelayMethod values.
func (v RelayMethod) Valid() bool {
	switch v {
	case RelaySampling, RelayElicit, RelayListRoots:
		return true
	}
	return false
}

// values lists the RelayMethod values in catalogue order.
func (RelayMethod) values() []RelayMethod {
	return []RelayMethod{RelaySampling, RelayElicit, RelayListRoots}
}

// RelayOutcome is how a relayed request ended.
type RelayOutcome string

// RelayOutcome values.
const (
	// RelayAccepted: the client answered (for elicitation: action accept).
	RelayAccepted RelayOutcome = "accepted"
	// RelayDeclined: the user declined the elicitation (action decline).
	RelayDeclined RelayOutcome = "declined"
	// RelayCancelled: the user cancelled the elicitation (action cancel),
	// or the relay was cancelled (the server cancelled its request, the
	// related client request ended).
	RelayCancelled RelayOutcome = "cancelled"
	// RelayError: the client answered with an error, or the relay failed.
	RelayError RelayOutcome = "error"
	// RelayTimedOut: the relay's deadline passed before an answer.
	RelayTimedOut RelayOutcome = "timed_out"
	// RelayRefused: not relayed (the session's client did not declare the
	// capability, has no peer, or a shared lease could not tell which
	// session the request belongs to).
	RelayRefused RelayOutcome = "refused"
)

// Valid reports whether v is one of the RelayOutcome values.
func (v RelayOutcome) Valid() bool {
	switch v {
	case RelayAccepted, RelayDeclined, RelayCancelled, RelayError, RelayTimedOut, RelayRefused:
		return true
	}
	return false
}

// values lists the RelayOutcome values in catalogue order.
func (RelayOutcome) values() []RelayOutcome {
	return []RelayOutcome{RelayAccepted, RelayDeclined, RelayCancelled, RelayError, RelayTimedOut, RelayRefused}
}

// ElicitMode is an elicitation's mode.
type ElicitMode string

// ElicitMode values.
const (
	ElicitForm ElicitMode = "form"
	ElicitURL  ElicitMode = "url"
)

// Valid reports whether v is one of the ElicitMode values.
func (v ElicitMode) Valid() bool { return v == ElicitForm || v == ElicitURL }

// values lists the ElicitMode values in catalogue order.
func (ElicitMode) values() []ElicitMode { return []ElicitMode{ElicitForm, ElicitURL} }

// ListKind names a server list whose change was notified.
type ListKind string

// ListKind values.
const (
	ListTools     ListKind = "tools"
	ListPrompts   ListKind = "prompts"
	ListResources ListKind = "resources"
)

// Valid reports whether v is one of the ListKind values.
func (v ListKind) Valid() bool { return v == ListTools || v == ListPrompts || v == ListResources }

// values lists the ListKind values in catalogue order.
func (ListKind) values() []ListKind { return []ListKind{ListTools, ListPrompts, ListResources} }

// LogLevel is an MCP logging level (RFC 5424 severities).
type LogLevel string

// LogLevel values, least severe first.
const (
	LogDebug     LogLevel = "debug"
	LogInfo      LogLevel = "info"
	LogNotice    LogLevel = "notice"
	LogWarning   LogLevel = "warning"
	LogError     LogLevel = "error"
	LogCritical  LogLevel = "critical"
	LogAlert     LogLevel = "alert"
	LogEmergency LogLevel = "emergency"
)

// Valid reports whether v is one of the LogLevel values.
func (v LogLevel) Valid() bool {
	switch v {
	case LogDebug, LogInfo, LogNotice, LogWarning, LogError, LogCritical, LogAlert, LogEmergency:
		return true
	}
	return false
}

// values lists the LogLevel values in catalogue order.
func (LogLevel) values() []LogLevel {
	return []LogLevel{LogDebug, LogInfo, LogNotice, LogWarning, LogError, LogCritical, LogAlert, LogEmergency}
}
