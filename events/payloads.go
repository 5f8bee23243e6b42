package events

// This file is the catalogue: one Go type per kind. Field names are the JSON
// names in schemas/ and docs/events.md. Durations are integer nanoseconds
// (`_ns`), sizes integer bytes, digests lowercase hex SHA-256. Provider text
// (tool output, error messages from an MCP server) never appears: only its
// size and digest.

// kindList is every payload type, one constructor per kind. Adding a kind
// means adding its type here, its schema in schemas/, an example line in
// examples/events.jsonl and its entry in docs/events.md; tests fail until
// all four exist.
var kindList = []func() Payload{
	func() Payload { return new(LeaseAcquiring) },
	func() Payload { return new(LeaseAcquired) },
	func() Payload { return new(LeaseAcquireFailed) },
	func() Payload { return new(LeaseChildStarted) },
	func() Payload { return new(LeaseListingPinned) },
	func() Payload { return new(LeasePoisoned) },
	func() Payload { return new(LeaseRevoked) },
	func() Payload { return new(LeaseStaleReplaced) },
	func() Payload { return new(LeaseReaped) },
	func() Payload { return new(LeaseTerminated) },
	func() Payload { return new(CallAdmitted) },
	func() Payload { return new(CallRefused) },
	func() Payload { return new(CallFinished) },
	func() Payload { return new(SessionEnded) },
	func() Payload { return new(RequestRegistered) },
	func() Payload { return new(RequestDispatched) },
	func() Payload { return new(RequestContinued) },
	func() Payload { return new(RequestCompleted) },
	func() Payload { return new(RequestAwaitTimedOut) },
	func() Payload { return new(RequestCancelled) },
	func() Payload { return new(RequestOwnerEnded) },
	func() Payload { return new(ConnectionOpened) },
	func() Payload { return new(ConnectionPhase) },
	func() Payload { return new(ConnectionBarrier) },
	func() Payload { return new(ConnectionClosed) },
	func() Payload { return new(GuardianStarted) },
	func() Payload { return new(GuardianSignal) },
	func() Payload { return new(GuardianReaped) },
	func() Payload { return new(GuardianReceipt) },
	func() Payload { return new(GuardianLost) },
	func() Payload { return new(HTTPRegistered) },
	func() Payload { return new(HTTPRedirect) },
	func() Payload { return new(HTTPCompleted) },
	func() Payload { return new(HTTPBarrier) },
	func() Payload { return new(HTTPWorkerDown) },
	func() Payload { return new(HTTPLost) },
}

// ---- lease: session-scoped runtime leases ----

// LeaseAcquiring records the start of a single-flight acquisition for the
// lease key (session or the shared key, server) under a config fingerprint.
type LeaseAcquiring struct {
	KeySession  string `json:"key_session"` // the session, or the shared key for shared servers
	Fingerprint string `json:"fingerprint"` // SHA-256 of the server's canonical config entry
	Shared      bool   `json:"shared"`
}

// Kind implements [Payload].
func (*LeaseAcquiring) Kind() Kind { return "lease.acquiring" }
// Validate implements [Payload].
func (p *LeaseAcquiring) Validate() error {
	return checks{id("key_session", p.KeySession), digest("fingerprint", p.Fingerprint)}.first()
}

// LeaseAcquired records a lease that became ready (child started,
// initialized, listing pinned).
type LeaseAcquired struct {
	Fingerprint string `json:"fingerprint"`
	DurationNS  int64  `json:"duration_ns"`
}

// Kind implements [Payload].
func (*LeaseAcquired) Kind() Kind { return "lease.acquired" }
// Validate implements [Payload].
func (p *LeaseAcquired) Validate() error {
	return checks{digest("fingerprint", p.Fingerprint), nonNegative("duration_ns", p.DurationNS)}.first()
}

// LeaseAcquireFailed records an acquisition that did not produce a lease.
type LeaseAcquireFailed struct {
	Fingerprint string `json:"fingerprint,omitempty"`
	Reason      string `json:"reason"` // machine code, e.g. "config_missing", "spawn_failed", "listing_too_large"
	DurationNS  int64  `json:"duration_ns"`
}

// Kind implements [Payload].
func (*LeaseAcquireFailed) Kind() Kind { return "lease.acquire_failed" }
// Validate implements [Payload].
func (p *LeaseAcquireFailed) Validate() error {
	return checks{optDigest("fingerprint", p.Fingerprint), code("reason", p.Reason), nonNegative("duration_ns", p.DurationNS)}.first()
}

// LeaseChildStarted records the one child process an acquisition started.
type LeaseChildStarted struct {
	PID         int     `json:"pid"`
	GuardianPID int     `json:"guardian_pid,omitempty"` // 0 when no guardian was used
	Cleanup     Cleanup `json:"cleanup"`                // "verified" (guardian) or "best_effort"
}

// Kind implements [Payload].
func (*LeaseChildStarted) Kind() Kind { return "lease.child_started" }
// Validate implements [Payload].
func (p *LeaseChildStarted) Validate() error {
	return checks{positive("pid", int64(p.PID)), nonNegative("guardian_pid", int64(p.GuardianPID)), member("cleanup", p.Cleanup)}.first()
}

// LeaseListingPinned records the tool listing a lease is pinned to.
type LeaseListingPinned struct {
	ToolCount     int    `json:"tool_count"`
	Pages         int    `json:"pages"`
	ListingBytes  int64  `json:"listing_bytes"`
	ListingDigest string `json:"listing_digest"` // SHA-256 over the sorted (name, schema digest) pairs
}

// Kind implements [Payload].
func (*LeaseListingPinned) Kind() Kind { return "lease.listing_pinned" }
// Validate implements [Payload].
func (p *LeaseListingPinned) Validate() error {
	return checks{nonNegative("tool_count", int64(p.ToolCount)), positive("pages", int64(p.Pages)),
		nonNegative("listing_bytes", p.ListingBytes), digest("listing_digest", p.ListingDigest)}.first()
}

// LeasePoisoned records a lease terminated because a call named a tool or
// schema digest the pinned listing does not have; no tools/call was sent.
type LeasePoisoned struct {
	CallID         string       `json:"call_id"`
	Reason         PoisonReason `json:"reason"` // "name_mismatch" or "digest_mismatch"
	Tool           string       `json:"tool"`
	ExpectedDigest string       `json:"expected_digest"`
}

// Kind implements [Payload].
func (*LeasePoisoned) Kind() Kind { return "lease.poisoned" }
// Validate implements [Payload].
func (p *LeasePoisoned) Validate() error {
	return checks{id("call_id", p.CallID), member("reason", p.Reason),
		toolName("tool", p.Tool), digest("expected_digest", p.ExpectedDigest)}.first()
}

// LeaseRevoked records that the lease was marked cancelled under its call
// gate; no call passes the gate after this event.
type LeaseRevoked struct {
	Reason        string `json:"reason"`
	CallsInFlight int    `json:"calls_in_flight"`
}

// Kind implements [Payload].
func (*LeaseRevoked) Kind() Kind { return "lease.revoked" }
// Validate implements [Payload].
func (p *LeaseRevoked) Validate() error {
	return checks{code("reason", p.Reason), nonNegative("calls_in_flight", int64(p.CallsInFlight))}.first()
}

// LeaseStaleReplaced records that a call found the server's config changed:
// the lease pinned to the old fingerprint is terminated and a new one acquired.
type LeaseStaleReplaced struct {
	OldFingerprint string `json:"old_fingerprint"`
	NewFingerprint string `json:"new_fingerprint"`
	NewActivation  string `json:"new_activation,omitempty"`
}

// Kind implements [Payload].
func (*LeaseStaleReplaced) Kind() Kind { return "lease.stale_replaced" }
// Validate implements [Payload].
func (p *LeaseStaleReplaced) Validate() error {
	c := checks{digest("old_fingerprint", p.OldFingerprint), digest("new_fingerprint", p.NewFingerprint)}
	if p.NewActivation != "" {
		c = append(c, id("new_activation", p.NewActivation))
	}
	return c.first()
}

// LeaseReaped records an idle lease removed by an opportunistic reap pass.
type LeaseReaped struct {
	IdleNS    int64 `json:"idle_ns"`
	IdleMaxNS int64 `json:"idle_max_ns"`
}

// Kind implements [Payload].
func (*LeaseReaped) Kind() Kind { return "lease.reaped" }
// Validate implements [Payload].
func (p *LeaseReaped) Validate() error {
	return checks{nonNegative("idle_ns", p.IdleNS), positive("idle_max_ns", p.IdleMaxNS)}.first()
}

// LeaseTerminated records that a lease left the table and its child was
// told to stop. Cleanup evidence follows as guardian.* events.
type LeaseTerminated struct {
	Reason string `json:"reason"` // revoked, poisoned, reaped, session_ended, terminate_all, stale_config, child_exited, ...
}

// Kind implements [Payload].
func (*LeaseTerminated) Kind() Kind        { return "lease.terminated" }
// Validate implements [Payload].
func (p *LeaseTerminated) Validate() error { return code("reason", p.Reason) }

// ---- call: the per-lease call gate ----

// CallAdmitted records a call that passed the gate and the name/digest check.
type CallAdmitted struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Digest string `json:"digest"`
}

// Kind implements [Payload].
func (*CallAdmitted) Kind() Kind { return "call.admitted" }
// Validate implements [Payload].
func (p *CallAdmitted) Validate() error {
	return checks{id("call_id", p.CallID), toolName("tool", p.Tool), digest("digest", p.Digest)}.first()
}

// CallRefused records a call the gate did not let through.
type CallRefused struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Reason string `json:"reason"` // cancelled, poisoned, terminated, name_mismatch, digest_mismatch
}

// Kind implements [Payload].
func (*CallRefused) Kind() Kind { return "call.refused" }
// Validate implements [Payload].
func (p *CallRefused) Validate() error {
	return checks{id("call_id", p.CallID), toolName("tool", p.Tool), code("reason", p.Reason)}.first()
}

// CallFinished records the end of an admitted call: sizes and digests of
// arguments and result, never their content.
type CallFinished struct {
	CallID         string      `json:"call_id"`
	Tool           string      `json:"tool"`
	Outcome        CallOutcome `json:"outcome"` // ok, tool_error, transport_error, cancelled
	DurationNS     int64       `json:"duration_ns"`
	ArgsBytes      int64       `json:"args_bytes"`
	ArgsSHA256     string      `json:"args_sha256"`
	ResultBytes    int64       `json:"result_bytes"`
	ResultSHA256   string      `json:"result_sha256,omitempty"`
	KilledOnCancel bool        `json:"killed_on_cancel"` // the call observed revocation and killed the child
}

// Kind implements [Payload].
func (*CallFinished) Kind() Kind { return "call.finished" }
// Validate implements [Payload].
func (p *CallFinished) Validate() error {
	return checks{id("call_id", p.CallID), toolName("tool", p.Tool),
		member("outcome", p.Outcome),
		nonNegative("duration_ns", p.DurationNS), nonNegative("args_bytes", p.ArgsBytes), digest("args_sha256", p.ArgsSHA256),
		nonNegative("result_bytes", p.ResultBytes), optDigest("result_sha256", p.ResultSHA256)}.first()
}

// ---- session ----

// SessionEnded records the release of the last owner of a session scope.
type SessionEnded struct {
	LeasesTerminated int `json:"leases_terminated"`
	SharedSpared     int `json:"shared_spared"`
}

// Kind implements [Payload].
func (*SessionEnded) Kind() Kind { return "session.ended" }
// Validate implements [Payload].
func (p *SessionEnded) Validate() error {
	return checks{nonNegative("leases_terminated", int64(p.LeasesTerminated)), nonNegative("shared_spared", int64(p.SharedSpared))}.first()
}

// ---- request: caller-owned resource request handles ----

// RequestRegistered records a handle registered (and acknowledged) before
// any dispatch.
type RequestRegistered struct {
	Handle    string        `json:"handle"`
	Owner     string        `json:"owner"`
	Method    RequestMethod `json:"method"` // resources/list, resources/templates/list, resources/read
	URISHA256 string        `json:"uri_sha256,omitempty"`
	TimeoutNS int64         `json:"timeout_ns"`
}

// Kind implements [Payload].
func (*RequestRegistered) Kind() Kind { return "request.registered" }
// Validate implements [Payload].
func (p *RequestRegistered) Validate() error {
	return checks{id("handle", p.Handle), id("owner", p.Owner),
		member("method", p.Method),
		optDigest("uri_sha256", p.URISHA256), positive("timeout_ns", p.TimeoutNS)}.first()
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
}

// Kind implements [Payload].
func (*RequestCompleted) Kind() Kind { return "request.completed" }
// Validate implements [Payload].
func (p *RequestCompleted) Validate() error {
	return checks{id("handle", p.Handle), member("outcome", p.Outcome), nonNegative("result_bytes", p.ResultBytes)}.first()
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

// ---- connection: owned connections and close reports ----

// ConnectionOpened records an owned connection of an activation.
type ConnectionOpened struct {
	Transport Transport `json:"transport"` // stdio, http
	Cleanup   Cleanup   `json:"cleanup"`   // verified, best_effort
	OneShot   bool      `json:"one_shot"`
}

// Kind implements [Payload].
func (*ConnectionOpened) Kind() Kind { return "connection.opened" }
// Validate implements [Payload].
func (p *ConnectionOpened) Validate() error {
	return checks{member("transport", p.Transport), member("cleanup", p.Cleanup)}.first()
}

// ConnectionPhase records a phase change: active → closing → closed.
type ConnectionPhase struct {
	Phase    Phase `json:"phase"` // closing, closed
	BudgetNS int64 `json:"budget_ns,omitempty"`
}

// Kind implements [Payload].
func (*ConnectionPhase) Kind() Kind { return "connection.phase" }
// Validate implements [Payload].
func (p *ConnectionPhase) Validate() error {
	return checks{member("phase", p.Phase), nonNegative("budget_ns", p.BudgetNS)}.first()
}

// ConnectionBarrier records what one close obligation observed.
type ConnectionBarrier struct {
	Obligation Obligation     `json:"obligation"` // transport, workers, supervisor, http_requests
	Outcome    BarrierOutcome `json:"outcome"`    // ok, error, timeout, missing, unsupported, pending
	Detail     string         `json:"detail,omitempty"`
	ElapsedNS  int64          `json:"elapsed_ns"`
}

// Kind implements [Payload].
func (*ConnectionBarrier) Kind() Kind { return "connection.barrier" }
// Validate implements [Payload].
func (p *ConnectionBarrier) Validate() error {
	return checks{member("obligation", p.Obligation),
		member("outcome", p.Outcome),
		optCode("detail", p.Detail), nonNegative("elapsed_ns", p.ElapsedNS)}.first()
}

// ConnectionClosed records a close call's end. Repeated closes record this
// again with repeat=true; the projector keeps the first outcome.
type ConnectionClosed struct {
	ElapsedNS int64 `json:"elapsed_ns"`
	Repeat    bool  `json:"repeat"`
}

// Kind implements [Payload].
func (*ConnectionClosed) Kind() Kind        { return "connection.closed" }
// Validate implements [Payload].
func (p *ConnectionClosed) Validate() error { return nonNegative("elapsed_ns", p.ElapsedNS) }

// ---- guardian: verified stdio ----

// GuardianStarted records the guardian helper and its direct child.
type GuardianStarted struct {
	GuardianPID   int    `json:"guardian_pid"`
	TargetPID     int    `json:"target_pid"`
	HelperVersion string `json:"helper_version"`
	PIDFD         bool   `json:"pidfd"` // the helper signals through a pidfd
}

// Kind implements [Payload].
func (*GuardianStarted) Kind() Kind { return "guardian.started" }
// Validate implements [Payload].
func (p *GuardianStarted) Validate() error {
	return checks{positive("guardian_pid", int64(p.GuardianPID)), positive("target_pid", int64(p.TargetPID)), text("helper_version", p.HelperVersion, true)}.first()
}

// GuardianSignal records a signal the guardian sent to its unreaped child.
type GuardianSignal struct {
	TargetPID int      `json:"target_pid"`
	Signal    Signal   `json:"signal"` // TERM, KILL
	At        *Instant `json:"at"`
	Alive     bool     `json:"alive"` // waitid(WNOWAIT) said the child had not exited before the signal
}

// Kind implements [Payload].
func (*GuardianSignal) Kind() Kind { return "guardian.signal" }
// Validate implements [Payload].
func (p *GuardianSignal) Validate() error {
	return checks{positive("target_pid", int64(p.TargetPID)), member("signal", p.Signal), instant("at", p.At, true)}.first()
}

// GuardianReaped records the direct child's wait status.
type GuardianReaped struct {
	TargetPID int      `json:"target_pid"`
	ExitCode  int      `json:"exit_code"` // -1 when killed by a signal
	Signal    string   `json:"signal,omitempty"`
	At        *Instant `json:"at"`
}

// Kind implements [Payload].
func (*GuardianReaped) Kind() Kind { return "guardian.reaped" }
// Validate implements [Payload].
func (p *GuardianReaped) Validate() error {
	return checks{positive("target_pid", int64(p.TargetPID)), between("exit_code", int64(p.ExitCode), -1, 255),
		text("signal", p.Signal, false), instant("at", p.At, true)}.first()
}

// GuardianReceipt is the correlated receipt the helper hands back, plus the
// helper's own exit status as observed by the host.
type GuardianReceipt struct {
	HelperVersion     string   `json:"helper_version"`
	TargetPID         int      `json:"target_pid"`
	Reaped            bool     `json:"reaped"`
	ExitCode          int      `json:"exit_code"` // -1 when killed by a signal or not reaped
	Signal            string   `json:"signal,omitempty"`
	StdinClosedAt     *Instant `json:"stdin_closed_at,omitempty"`
	StdoutClosedAt    *Instant `json:"stdout_closed_at,omitempty"`
	StderrClosedAt    *Instant `json:"stderr_closed_at,omitempty"`
	EOFGraceNS        int64    `json:"eof_grace_ns"`
	TermSentAt        *Instant `json:"term_sent_at,omitempty"`
	KillSentAt        *Instant `json:"kill_sent_at,omitempty"`
	DescendantsSeen   []int    `json:"descendants_seen,omitempty"`
	DescendantsKilled []int    `json:"descendants_killed,omitempty"`
	// DescendantsDropped counts descendants seen beyond the listed ones.
	DescendantsDropped int `json:"descendants_dropped,omitempty"`
	// StdoutForced and StderrForced say the helper closed its read end at
	// the pipe deadline (a descendant still held the write end) rather than
	// seeing EOF: a real close, but not the target's own.
	StdoutForced bool `json:"stdout_forced,omitempty"`
	StderrForced bool `json:"stderr_forced,omitempty"`
	// StdinDroppedBytes counts bytes relayed for the target's stdin that the
	// helper dropped (the target stopped reading while cleanup began).
	StdinDroppedBytes int64 `json:"stdin_dropped_bytes,omitempty"`
	HelperExitCode    int   `json:"helper_exit_code"` // -1 when the helper did not exit normally
}

// Kind implements [Payload].
func (*GuardianReceipt) Kind() Kind { return "guardian.receipt" }
// Validate implements [Payload].
func (p *GuardianReceipt) Validate() error {
	return checks{text("helper_version", p.HelperVersion, true), positive("target_pid", int64(p.TargetPID)),
		between("exit_code", int64(p.ExitCode), -1, 255), text("signal", p.Signal, false),
		instant("stdin_closed_at", p.StdinClosedAt, false), instant("stdout_closed_at", p.StdoutClosedAt, false),
		instant("stderr_closed_at", p.StderrClosedAt, false), instant("term_sent_at", p.TermSentAt, false),
		instant("kill_sent_at", p.KillSentAt, false),
		nonNegative("eof_grace_ns", p.EOFGraceNS), pids("descendants_seen", p.DescendantsSeen),
		pids("descendants_killed", p.DescendantsKilled), nonNegative("descendants_dropped", int64(p.DescendantsDropped)),
		nonNegative("stdin_dropped_bytes", p.StdinDroppedBytes), between("helper_exit_code", int64(p.HelperExitCode), -1, 255)}.first()
}

// GuardianLost records cleanup whose evidence is incomplete: the receipt was
// lost, the helper died, its pipes closed early, or the deadline expired.
type GuardianLost struct {
	Reason    LostReason `json:"reason"` // receipt_lost, helper_lost, pipes_closed, deadline
	TargetPID int        `json:"target_pid,omitempty"`
}

// Kind implements [Payload].
func (*GuardianLost) Kind() Kind { return "guardian.lost" }
// Validate implements [Payload].
func (p *GuardianLost) Validate() error {
	return checks{member("reason", p.Reason), nonNegative("target_pid", int64(p.TargetPID))}.first()
}

// ---- http: HTTP resources ----

// HTTPRegistered records an HTTP allocation registered before the request
// begins. Ref is the resource reference within the activation.
type HTTPRegistered struct {
	Ref    string     `json:"ref"`
	Scope  string     `json:"scope"` // aggregate scope, e.g. "request", "sse", "jwks"
	Method HTTPMethod `json:"method"`
	Origin string     `json:"origin"`
}

// Kind implements [Payload].
func (*HTTPRegistered) Kind() Kind { return "http.registered" }
// Validate implements [Payload].
func (p *HTTPRegistered) Validate() error {
	return checks{id("ref", p.Ref), code("scope", p.Scope), member("method", p.Method), text("origin", p.Origin, true)}.first()
}

// MaxRedirectHops is the number of 307 hops a request may follow.
const MaxRedirectHops = 3

// HTTPRedirect records one redirect hop; the hop is its own tracked resource.
type HTTPRedirect struct {
	Ref        string `json:"ref"`
	Hop        int    `json:"hop"`
	HopRef     string `json:"hop_ref"`
	Status     int    `json:"status"`
	Origin     string `json:"origin"`
	SameOrigin bool   `json:"same_origin"`
}

// Kind implements [Payload].
func (*HTTPRedirect) Kind() Kind { return "http.redirect" }
// Validate implements [Payload].
func (p *HTTPRedirect) Validate() error {
	return checks{id("ref", p.Ref), between("hop", int64(p.Hop), 1, MaxRedirectHops), id("hop_ref", p.HopRef),
		between("status", int64(p.Status), 300, 399), text("origin", p.Origin, true)}.first()
}

// HTTPCompleted records the response the request ended with.
type HTTPCompleted struct {
	Ref       string      `json:"ref"`
	Status    int         `json:"status"`  // 0 when no response arrived
	Outcome   HTTPOutcome `json:"outcome"` // ok, error, timeout, aborted
	BodyBytes int64       `json:"body_bytes"`
}

// Kind implements [Payload].
func (*HTTPCompleted) Kind() Kind { return "http.completed" }
// Validate implements [Payload].
func (p *HTTPCompleted) Validate() error {
	return checks{id("ref", p.Ref), between("status", int64(p.Status), 0, 599),
		member("outcome", p.Outcome), nonNegative("body_bytes", p.BodyBytes)}.first()
}

// HTTPBarrier records what a request-completion barrier returned. Ref names
// the resource it settles: a request's Ref, or a redirect hop's HopRef
// (every hop is its own tracked resource and needs its own barrier).
type HTTPBarrier struct {
	Ref     string             `json:"ref"`
	Outcome HTTPBarrierOutcome `json:"outcome"` // ok, error, timeout, unsupported
}

// Kind implements [Payload].
func (*HTTPBarrier) Kind() Kind { return "http.barrier" }
// Validate implements [Payload].
func (p *HTTPBarrier) Validate() error {
	return checks{id("ref", p.Ref), member("outcome", p.Outcome)}.first()
}

// HTTPWorkerDown records the owning worker's observed end.
type HTTPWorkerDown struct {
	Ref    string `json:"ref"`
	Worker string `json:"worker"`
	Reason string `json:"reason"`
}

// Kind implements [Payload].
func (*HTTPWorkerDown) Kind() Kind { return "http.worker_down" }
// Validate implements [Payload].
func (p *HTTPWorkerDown) Validate() error {
	return checks{id("ref", p.Ref), id("worker", p.Worker), code("reason", p.Reason)}.first()
}

// HTTPLost records evidence that can no longer be obtained for a resource.
type HTTPLost struct {
	Ref    string `json:"ref"`
	Reason string `json:"reason"`
}

// Kind implements [Payload].
func (*HTTPLost) Kind() Kind { return "http.lost" }
// Validate implements [Payload].
func (p *HTTPLost) Validate() error {
	return checks{id("ref", p.Ref), code("reason", p.Reason)}.first()
}
