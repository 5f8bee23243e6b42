package events

// This file is the catalogue: one Go type per kind. Field names are the JSON
// names in schemas/ and docs/events.md. Durations are integer nanoseconds
// (`_ns`), sizes integer bytes, digests lowercase hex SHA-256. Provider text
// (tool output, error messages from an MCP server) never appears: only its
// size and digest.

// kindList is every payload type, one constructor per kind. Adding a kind
// means adding its type here, its schema in schemas/, an example line in
// examples/events.jsonl and its entry in docs/events.md; tests fail until
// all four exist. Its generated encoder (in X_json.go beside the file X.go
// declaring it) follows with `go test ./events/ -run TestGeneratedEncoders -update`.
var kindList = []func() Payload{
	func() Payload { return new(LeaseAcquiring) },
	func() Payload { return new(LeaseAcquired) },
	func() Payload { return new(LeaseAcquireFailed) },
	func() Payload { return new(LeaseChildStarted) },
	func() Payload { return new(LeaseChildClosed) },
	func() Payload { return new(LeaseListingPinned) },
	func() Payload { return new(LeasePoisoned) },
	func() Payload { return new(LeaseRevoked) },
	func() Payload { return new(LeaseStaleReplaced) },
	func() Payload { return new(LeaseReaped) },
	func() Payload { return new(LeaseTerminated) },
	func() Payload { return new(CallAdmitted) },
	func() Payload { return new(CallRefused) },
	func() Payload { return new(CallFinished) },
	func() Payload { return new(SessionOpened) },
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
	func() Payload { return new(HostBound) },
	func() Payload { return new(ConfigLoaded) },
	func() Payload { return new(RelayCompleted) },
	func() Payload { return new(PolicyLoaded) },
	func() Payload { return new(AccessDecided) },
	func() Payload { return new(LeaseListChanged) },
	func() Payload { return new(SessionLogLevel) },
	func() Payload { return new(SubscriptionStarted) },
	func() Payload { return new(SubscriptionEnded) },
}

// ---- lease: session-scoped runtime leases ----

// SharedSessionKey is the session component of the lease key of servers
// configured "shared": true (LeaseAcquiring.KeySession, and the session of
// their events). It is never a real session's id: the runtime refuses to
// open a session under it. It is part of the vocabulary because readers of
// the log (crash recovery in projector/live) must tell shared leases from
// a session's own without importing the runtime.
const SharedSessionKey = "_shared"

// LeaseAcquiring records the start of a single-flight acquisition for the
// lease key (session or the shared key, server) under a config fingerprint.
type LeaseAcquiring struct {
	KeySession  string `json:"key_session"` // the session, or the shared key for shared servers
	Fingerprint string `json:"fingerprint"` // HMAC-SHA256 of the server's canonical config entry under the manager's key
	Shared      bool   `json:"shared"`
	// ConfigName is the server's name in the host's config when it differs
	// from the envelope's server id (a name such as "my.server" that is not
	// an identifier is recorded under a derived id); omitted when equal.
	ConfigName string `json:"config_name,omitempty"`
}

// Kind implements [Payload].
func (*LeaseAcquiring) Kind() Kind { return "lease.acquiring" }

// Validate implements [Payload].
func (p *LeaseAcquiring) Validate() error {
	return checks{id("key_session", p.KeySession), digest("fingerprint", p.Fingerprint), text("config_name", p.ConfigName, false)}.first()
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
// Cause, Target and HTTPStatus are the operator's account of the failure
// (what the runtime observed at its boundary, never the server's text).
type LeaseAcquireFailed struct {
	Fingerprint string `json:"fingerprint,omitempty"`
	Reason      string `json:"reason"` // machine code, e.g. "config_missing", "spawn_failed", "listing_too_large"
	DurationNS  int64  `json:"duration_ns"`
	// Cause is what failed underneath the step the reason names (a refused
	// dial, a DNS failure, a timer, an HTTP status, an exited process);
	// empty when the failure has none (a cap refusal, a denial, the ledger).
	Cause FailureCause `json:"cause,omitempty"`
	// Target is the host:port the failing HTTP request was sent to (the
	// endpoint's, or an allowed redirect origin's), never its scheme,
	// path, query or user info; empty for stdio servers.
	Target string `json:"target,omitempty"`
	// HTTPStatus is the error status the endpoint answered (cause
	// http_status); 0 when none.
	HTTPStatus int `json:"http_status,omitempty"`
}

// Kind implements [Payload].
func (*LeaseAcquireFailed) Kind() Kind { return "lease.acquire_failed" }

// Validate implements [Payload].
func (p *LeaseAcquireFailed) Validate() error {
	c := checks{optDigest("fingerprint", p.Fingerprint), code("reason", p.Reason), nonNegative("duration_ns", p.DurationNS),
		optMember("cause", p.Cause), text("target", p.Target, false)}
	if p.HTTPStatus != 0 {
		c = append(c, between("http_status", int64(p.HTTPStatus), 400, 599))
	}
	return c.first()
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

// DescendantsUnknown is LeaseChildClosed.Descendants: a host that starts
// a child itself cannot tell whether its descendants are gone.
const DescendantsUnknown = "unknown"

// LeaseChildClosed records what the host itself observed when a child it
// started without the guardian (lease.child_started cleanup best_effort:
// an entry's "cleanup": "direct") ended: its own closes of the child's
// pipes, the signals it sent and its own wait status. It is the host's
// account, not a receipt: no helper vouches for it, the child's
// descendants are unknown, and it never confirms the child's release (the
// projector keeps such a child unsupported, best_effort_cleanup).
type LeaseChildClosed struct {
	PID int `json:"pid"`
	// Reaped: the host's own wait for the child returned (within the
	// close budget); ExitCode and Signal are its status.
	Reaped   bool     `json:"reaped"`
	ExitCode int      `json:"exit_code"`        // -1 when killed by a signal or not reaped
	Signal   string   `json:"signal,omitempty"` // the signal that ended it ("KILL"), when one did
	ReapedAt *Instant `json:"reaped_at,omitempty"`
	// ExitedBeforeClose: the child had already exited (crashed, or was
	// killed from outside) when the host began closing it.
	ExitedBeforeClose bool     `json:"exited_before_close,omitempty"`
	StdinClosedAt     *Instant `json:"stdin_closed_at,omitempty"`  // the host closed its write end
	StdoutClosedAt    *Instant `json:"stdout_closed_at,omitempty"` // EOF, or the host's forced close
	StderrClosedAt    *Instant `json:"stderr_closed_at,omitempty"`
	// StdoutForced and StderrForced: the host closed its read end at the
	// pipe deadline (a descendant may still hold the write end).
	StdoutForced bool     `json:"stdout_forced,omitempty"`
	StderrForced bool     `json:"stderr_forced,omitempty"`
	TermSentAt   *Instant `json:"term_sent_at,omitempty"`
	KillSentAt   *Instant `json:"kill_sent_at,omitempty"`
	// GroupSignalled: the signals went to the child's own process group
	// (unix), reaching the descendants that stayed in it.
	GroupSignalled bool `json:"group_signalled,omitempty"`
	// Descendants is always DescendantsUnknown.
	Descendants string `json:"descendants"`
}

// Kind implements [Payload].
func (*LeaseChildClosed) Kind() Kind { return "lease.child_closed" }

// Validate implements [Payload].
func (p *LeaseChildClosed) Validate() error {
	c := checks{positive("pid", int64(p.PID)), between("exit_code", int64(p.ExitCode), -1, 255), text("signal", p.Signal, false),
		instant("reaped_at", p.ReapedAt, false), instant("stdin_closed_at", p.StdinClosedAt, false),
		instant("stdout_closed_at", p.StdoutClosedAt, false), instant("stderr_closed_at", p.StderrClosedAt, false),
		instant("term_sent_at", p.TermSentAt, false), instant("kill_sent_at", p.KillSentAt, false)}
	if p.Descendants != DescendantsUnknown {
		c = append(c, invalid("descendants", `want "unknown"`))
	}
	return c.first()
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
	Reason TerminationReason `json:"reason"`
}

// Kind implements [Payload].
func (*LeaseTerminated) Kind() Kind { return "lease.terminated" }

// Validate implements [Payload].
func (p *LeaseTerminated) Validate() error { return member("reason", p.Reason) }

// ---- call: the per-lease call gate ----

// CallAdmitted records a call that passed the gate and the name/digest check.
type CallAdmitted struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Digest string `json:"digest"`
	// Policies are the ids of the permits that allowed the call, and
	// PolicyDigest the policy set that decided (policy.loaded); both
	// omitted when no policy set is in force. PoliciesOmitted counts
	// deciding policies beyond MaxDecidingPolicies.
	Policies        []string `json:"policies,omitempty"`
	PoliciesOmitted int      `json:"policies_omitted,omitempty"`
	PolicyDigest    string   `json:"policy_digest,omitempty"`
}

// Kind implements [Payload].
func (*CallAdmitted) Kind() Kind { return "call.admitted" }

// Validate implements [Payload].
func (p *CallAdmitted) Validate() error {
	return checks{id("call_id", p.CallID), toolName("tool", p.Tool), digest("digest", p.Digest),
		policyIDs("policies", p.Policies), between("policies_omitted", int64(p.PoliciesOmitted), 0, MaxPolicies),
		optDigest("policy_digest", p.PolicyDigest)}.first()
}

// CallRefused records a call the gate did not let through.
type CallRefused struct {
	CallID string        `json:"call_id"`
	Tool   string        `json:"tool"`
	Reason RefusalReason `json:"reason"`
	// Policies are the ids of the forbids that denied the call (none: no
	// permit applied), and PolicyDigest the policy set that decided
	// (policy.loaded); reason policy only. PoliciesOmitted counts deciding
	// policies beyond MaxDecidingPolicies.
	Policies        []string `json:"policies,omitempty"`
	PoliciesOmitted int      `json:"policies_omitted,omitempty"`
	PolicyDigest    string   `json:"policy_digest,omitempty"`
}

// Kind implements [Payload].
func (*CallRefused) Kind() Kind { return "call.refused" }

// Validate implements [Payload].
func (p *CallRefused) Validate() error {
	c := checks{id("call_id", p.CallID), toolName("tool", p.Tool), member("reason", p.Reason),
		policyIDs("policies", p.Policies), between("policies_omitted", int64(p.PoliciesOmitted), 0, MaxPolicies)}
	if p.Reason == RefusedPolicy {
		c = append(c, digest("policy_digest", p.PolicyDigest))
	} else if p.PolicyDigest != "" || len(p.Policies) > 0 || p.PoliciesOmitted > 0 {
		c = append(c, invalid("policy_digest", "only for reason policy"))
	}
	return c.first()
}

// CallFinished records the end of an admitted call: sizes and digests of
// arguments and result, never their content.
type CallFinished struct {
	CallID         string      `json:"call_id"`
	Tool           string      `json:"tool"`
	Outcome        CallOutcome `json:"outcome"` // ok, tool_error, transport_error, remote_error, cancelled
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

// SessionOpened records that a host opened a session scope: who opened it
// (the access token or tenant name, when the host has one) and through
// which entry point. It precedes every other event of the session.
type SessionOpened struct {
	// Principal is the name of the access token or tenant that opened the
	// session (never a secret); absent when the host has no principal.
	Principal string           `json:"principal,omitempty"`
	Transport SessionTransport `json:"transport"`
}

// Kind implements [Payload].
func (*SessionOpened) Kind() Kind { return "session.opened" }

// Validate implements [Payload].
func (p *SessionOpened) Validate() error {
	var principal error
	if p.Principal != "" {
		principal = id("principal", p.Principal)
	}
	return checks{principal, member("transport", p.Transport)}.first()
}

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
