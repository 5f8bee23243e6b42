package projector

import "github.com/leaseledger/leaseledger/events"

// Lease states.
const (
	LeaseStarting   = "starting"
	LeaseReady      = "ready"
	LeaseCancelled  = "cancelled"
	LeasePoisoned   = "poisoned"
	LeaseTerminated = "terminated"
)

// LeaseKey names a lease: the session (or the shared key) and the server.
type LeaseKey struct {
	Session string
	Server  string
}

// String returns "session/server"; identifiers cannot contain '/'.
func (k LeaseKey) String() string { return k.Session + "/" + k.Server }

// Lease is the projection of one lease lifetime at its key.
type Lease struct {
	KeySession     string         `json:"key_session"`
	Server         string         `json:"server"`
	Shared         bool           `json:"shared,omitempty"`
	Session        string         `json:"session,omitempty"` // the acquiring session
	Activation     string         `json:"activation_id"`
	State          string         `json:"state"`
	Fingerprint    string         `json:"fingerprint"`
	ListingDigest  string         `json:"listing_digest,omitempty"`
	ToolCount      int            `json:"tool_count,omitempty"`
	PID            int            `json:"pid,omitempty"`
	GuardianPID    int            `json:"guardian_pid,omitempty"`
	Cleanup        events.Cleanup `json:"cleanup,omitempty"`
	CallsInFlight  int            `json:"calls_in_flight"`
	CallsAdmitted  uint64         `json:"calls_admitted,omitempty"`
	CallsRefused   uint64         `json:"calls_refused,omitempty"`
	CallsFinished  uint64         `json:"calls_finished,omitempty"`
	KilledOnCancel uint64         `json:"killed_on_cancel,omitempty"`
	// GateViolations counts calls admitted after the lease was cancelled,
	// poisoned or terminated: the gate promises none.
	GateViolations uint64         `json:"gate_violations,omitempty"`
	StartedAt      events.Instant `json:"started_at"`
	ReadyAt        events.Instant `json:"ready_at,omitzero"`
	LastUse        events.Instant `json:"last_use,omitzero"`
	EndedAt        events.Instant `json:"ended_at,omitzero"`
	Reason         string         `json:"reason,omitempty"` // why it left ready: revoke, poison, terminate or failure reason
	PoisonTool     string         `json:"poison_tool,omitempty"`
	ReplacedBy     string         `json:"replaced_by,omitempty"` // new activation after a stale config
	Anomalies      uint64         `json:"anomalies,omitempty"`
	// LogLevel is the MCP logging level its session set (session.log_level)
	// while it was live or before it was acquired: the level the runtime
	// sends it. Absent for a shared lease (never sent one) and when its
	// session set none.
	LogLevel events.LogLevel `json:"log_level,omitempty"`
}

// Key returns the lease's key.
func (l *Lease) Key() LeaseKey { return LeaseKey{Session: l.KeySession, Server: l.Server} }

// Live reports whether the lease is still in the table (not terminated).
func (l *Lease) Live() bool { return l.State != LeaseTerminated }

// Request states.
const (
	RequestRegistered = "registered"
	RequestDispatched = "dispatched"
	RequestCompleted  = "completed"
	RequestCancelled  = "cancelled"
)

// Cancellation is a request's cancellation report: local settlement kept
// apart from transport acceptance and notification delivery.
type Cancellation struct {
	Reason                string          `json:"reason"`
	LocalSettled          bool            `json:"local_settled"`
	TransportAccepted     events.Delivery `json:"transport_accepted"`
	NotificationDelivered events.Delivery `json:"notification_delivered"`
	Remote                events.Remote   `json:"remote"`
	Seq                   uint64          `json:"seq"`
}

// Request is one resource request handle of an owner.
type Request struct {
	Handle         string                `json:"handle"`
	Owner          string                `json:"owner"`
	Activation     string                `json:"activation_id,omitempty"`
	Method         events.RequestMethod  `json:"method"`
	URISHA256      string                `json:"uri_sha256,omitempty"`
	TimeoutNS      int64                 `json:"timeout_ns"`
	State          string                `json:"state"`
	WireIDs        []string              `json:"wire_ids,omitempty"`
	WireIDsDropped int                   `json:"wire_ids_dropped,omitempty"`
	Rounds         int                   `json:"rounds,omitempty"`
	Outcome        events.RequestOutcome `json:"outcome,omitempty"`
	ResultBytes    int64                 `json:"result_bytes,omitempty"`
	Completions    int                   `json:"completions,omitempty"` // more than one is an anomaly: a result is received once
	AwaitTimeouts  int                   `json:"await_timeouts,omitempty"`
	Cancellation   *Cancellation         `json:"cancellation,omitempty"`
	RegisteredSeq  uint64                `json:"registered_seq"`
}

// OwnerSummary counts an ended owner's handles by final state.
type OwnerSummary struct {
	Completed uint64 `json:"completed"`
	Cancelled uint64 `json:"cancelled"`
	// Unsettled counts handles that were neither completed nor cancelled
	// when the owner ended: settled by the owner-end path, with no
	// per-handle report.
	Unsettled uint64 `json:"unsettled"`
}

// Owner is a request owner with its handles. When the owner ends, its
// handles are summarised into Summary and dropped (their detail stays in
// the log), so an ended owner costs one small record.
type Owner struct {
	ID             string              `json:"owner"`
	Handles        map[string]*Request `json:"handles,omitempty"`
	Ended          bool                `json:"ended"`
	EndedSeq       uint64              `json:"ended_seq,omitempty"`
	HandlesSettled int                 `json:"handles_settled,omitempty"` // as the owner_ended fact states
	Summary        *OwnerSummary       `json:"summary,omitempty"`
	Anomalies      uint64              `json:"anomalies,omitempty"`

	// changedSeq is the seq of the owner's last change (never
	// serialised): Evict keeps a retired owner in memory until a snapshot
	// covering it is stored.
	changedSeq uint64
}
