package projector

import (
	"iter"

	"github.com/leaseledger/leaseledger/events"
)

// Bounds of the projection. Each one keeps a single activation, lease or
// owner from costing memory proportional to its history.
const (
	// RecentReceipts is the number of most recent confirmed receipts an
	// activation keeps individually; older ones are folded into the
	// per-scope aggregate resources.
	RecentReceipts = 64
	// MaxWireIDs bounds the wire IDs kept per request handle (the first
	// dispatch plus at most 10 MRTR continuations fit); further ones are
	// counted in Request.WireIDsDropped.
	MaxWireIDs = 16
	// MaxSignals bounds the signal names kept per guardian resource.
	MaxSignals = 8
	// MaxReasons bounds the reasons a close report or verdict lists; the
	// rest are counted in ReasonsOmitted.
	MaxReasons = 32
	// ReportVersion is the version of close reports and activation reports.
	ReportVersion = 1
)

// Status is the cleanup status of one owned resource or close obligation;
// its values, and the rule from a barrier outcome to an obligation's, are
// events' (events.Status, events.BarrierOutcome.Status), shared with the
// runtime's close report. Only StatusConfirmed counts towards a confirmed
// result; every other status blocks it.
type Status = events.Status

// Statuses, as events defines them.
const (
	StatusPending     = events.StatusPending
	StatusConfirmed   = events.StatusConfirmed
	StatusFailed      = events.StatusFailed
	StatusMissing     = events.StatusMissing
	StatusUnsupported = events.StatusUnsupported
	StatusLost        = events.StatusLost
)

// Resource kinds.
const (
	// ResourceHTTPRequest is an HTTP allocation (http.registered).
	ResourceHTTPRequest = "http_request"
	// ResourceHTTPHop is one redirect hop of an HTTP request (http.redirect).
	ResourceHTTPHop = "http_hop"
	// ResourceGuardianChild is a direct child supervised by the guardian.
	ResourceGuardianChild = "guardian_child"
	// ResourceChild is a child launched without a guardian (best effort).
	ResourceChild = "child"
)

// Scopes the projector assigns itself; HTTP scopes come from http.registered.
const (
	// ScopeGuardian is the aggregate scope of guardian-supervised children.
	ScopeGuardian = "guardian"
	// ScopeChild is the scope of best-effort children.
	ScopeChild = "child"
	// AggregatePrefix begins the reference of every aggregate resource.
	AggregatePrefix = "confirmed_history:"
)

// ResourceID identifies an owned resource: {activation_id, reference}.
type ResourceID struct {
	Activation string `json:"activation_id"`
	Reference  string `json:"reference"`
}

// String returns the ID as "{activation, reference}".
func (id ResourceID) String() string { return "{" + id.Activation + ", " + id.Reference + "}" }

// Facts are the observations about one resource that its status was
// derived from. Only the fields its events supplied are set.
type Facts struct {
	// HTTP request and hop facts.
	Method         string `json:"method,omitempty"`
	Origin         string `json:"origin,omitempty"`
	Parent         string `json:"parent,omitempty"` // a hop's original request reference
	Hop            int    `json:"hop,omitempty"`
	RedirectStatus int    `json:"redirect_status,omitempty"`
	SameOrigin     *bool  `json:"same_origin,omitempty"`
	// Hops lists a request's redirect hop references (at most
	// events.MaxRedirectHops are kept; extra hops are anomalies).
	Hops             []string `json:"hops,omitempty"`
	Completed        bool     `json:"completed,omitempty"`
	CompletionStatus int      `json:"completion_status,omitempty"`
	CompletionResult string   `json:"completion_outcome,omitempty"`
	BodyBytes        int64    `json:"body_bytes,omitempty"`
	// Barrier is the last request-completion barrier outcome.
	Barrier    events.HTTPBarrierOutcome `json:"barrier,omitempty"`
	Barriers   int                       `json:"barriers,omitempty"` // barrier observations
	WorkerDown bool                      `json:"worker_down,omitempty"`
	Worker     string                    `json:"worker,omitempty"`
	// WorkerReason is the worker's end reason; "via_parent" marks a hop
	// whose owning worker's end was observed on its original request.
	WorkerReason string `json:"worker_reason,omitempty"`
	LostReason   string `json:"lost_reason,omitempty"`

	// Child and guardian facts.
	TargetPID         int             `json:"target_pid,omitempty"`
	GuardianPID       int             `json:"guardian_pid,omitempty"`
	Cleanup           events.Cleanup  `json:"cleanup,omitempty"`
	HelperVersion     string          `json:"helper_version,omitempty"`
	PIDFD             bool            `json:"pidfd,omitempty"`
	Signals           []string        `json:"signals,omitempty"`
	Reaped            bool            `json:"reaped,omitempty"`
	ReapedAt          *events.Instant `json:"reaped_at,omitempty"`
	ExitCode          *int            `json:"exit_code,omitempty"`
	Signal            string          `json:"signal,omitempty"`
	Receipt           bool            `json:"receipt,omitempty"`
	StdinClosedAt     *events.Instant `json:"stdin_closed_at,omitempty"`
	StdoutClosedAt    *events.Instant `json:"stdout_closed_at,omitempty"`
	StderrClosedAt    *events.Instant `json:"stderr_closed_at,omitempty"`
	TermSentAt        *events.Instant `json:"term_sent_at,omitempty"`
	KillSentAt        *events.Instant `json:"kill_sent_at,omitempty"`
	DescendantsSeen   int             `json:"descendants_seen,omitempty"`
	DescendantsKilled int             `json:"descendants_killed,omitempty"`
	StdoutForced      bool            `json:"stdout_forced,omitempty"`       // closed at the pipe deadline, not by EOF
	StderrForced      bool            `json:"stderr_forced,omitempty"`       // likewise
	StdinDroppedBytes int64           `json:"stdin_dropped_bytes,omitempty"` // stdin the helper dropped at cleanup
	HelperExitCode    *int            `json:"helper_exit_code,omitempty"`
	// A best-effort child's close as the host observed it
	// (lease.child_closed): it had exited before the close, the signals
	// went to its process group, and its descendants ("unknown").
	ExitedBeforeClose bool   `json:"exited_before_close,omitempty"`
	GroupSignalled    bool   `json:"group_signalled,omitempty"`
	Descendants       string `json:"descendants,omitempty"`
}

// Resource is one owned resource with its status and facts. Confirmed
// resources additionally carry the seq and envelope time of confirmation.
type Resource struct {
	ID     ResourceID `json:"id"`
	Kind   string     `json:"kind"`
	Scope  string     `json:"scope"`
	Status Status     `json:"status"`
	// Reason says why the status is not confirmed (a machine code such as
	// awaiting_barrier, awaiting_worker_down, barrier_timeout, not_reaped).
	Reason        string         `json:"reason,omitempty"`
	Facts         Facts          `json:"facts"`
	RegisteredSeq uint64         `json:"registered_seq"`
	UpdatedSeq    uint64         `json:"updated_seq"`
	ConfirmedSeq  uint64         `json:"confirmed_seq,omitempty"`
	ConfirmedAt   events.Instant `json:"confirmed_at,omitzero"`
}

// AggregateEvidence is the evidence of an aggregate resource.
type AggregateEvidence struct {
	Aggregate      bool   `json:"aggregate"`
	ConfirmedCount uint64 `json:"confirmed_count"`
}

// AggregateResource stands for every confirmed receipt of one scope that
// left the recent window: ID {activation_id, "confirmed_history:<scope>"}.
type AggregateResource struct {
	ID       ResourceID        `json:"id"`
	Scope    string            `json:"scope"`
	Status   Status            `json:"status"`
	Evidence AggregateEvidence `json:"evidence"`
}

// Counts are resource counts of an activation. Confirmed includes the
// receipts folded into aggregates, so Resources counts resources, not
// report entries.
type Counts struct {
	Resources   uint64 `json:"resources"`
	Pending     uint64 `json:"pending"`
	Confirmed   uint64 `json:"confirmed"`
	Missing     uint64 `json:"missing"`
	Unsupported uint64 `json:"unsupported"`
	Lost        uint64 `json:"lost"`
	// Recent is the number of confirmed receipts kept individually and
	// Aggregated the number folded into aggregates; they sum to Confirmed.
	Recent     uint64 `json:"recent"`
	Aggregated uint64 `json:"aggregated"`
}

// Evidence is the cleanup evidence of one activation. Its size is
// O(tracked unconfirmed resources + scopes): confirmed history costs at
// most RecentReceipts entries plus one counter per scope.
type Evidence struct {
	open       map[string]*Resource // every resource not (yet) confirmed, by reference
	ring       [RecentReceipts]Resource
	ringStart  int
	ringLen    int
	aggregates map[string]uint64 // scope → confirmed receipts folded out of the ring
	confirmed  uint64
	frozen     bool
	frozenSeq  uint64
	late       uint64 // evidence events after the freeze
	anomalies  uint64 // evidence about unknown or duplicate references
	// spare is the storage of the last confirmed resource, whose value
	// the ring holds by copy: the next track reuses it instead of
	// allocating (requests mostly confirm one before the next registers).
	// It is never serialised and holds no state.
	spare *Resource
}

// Resource returns the tracked (unconfirmed) resource with reference ref,
// or the recent confirmed receipt with that reference.
func (ev *Evidence) Resource(ref string) (Resource, bool) {
	if r, ok := ev.open[ref]; ok {
		return *r, true
	}
	for i := range ev.ringLen {
		if r := &ev.ring[(ev.ringStart+i)%RecentReceipts]; r.ID.Reference == ref {
			return *r, true
		}
	}
	return Resource{}, false
}

// Tracked returns the resources that are not confirmed, sorted by reference.
func (ev *Evidence) Tracked() []Resource {
	out := make([]Resource, 0, len(ev.open))
	for _, k := range sortedKeys(ev.open) {
		out = append(out, *ev.open[k])
	}
	return out
}

// Recent returns the retained confirmed receipts, oldest first.
func (ev *Evidence) Recent() []Resource {
	out := make([]Resource, ev.ringLen)
	for i := range ev.ringLen {
		out[i] = ev.ring[(ev.ringStart+i)%RecentReceipts]
	}
	return out
}

// Aggregates returns the aggregate resources of activation, sorted by scope.
func (ev *Evidence) Aggregates(activation string) []AggregateResource {
	out := make([]AggregateResource, 0, len(ev.aggregates))
	for _, scope := range sortedKeys(ev.aggregates) {
		out = append(out, AggregateResource{
			ID:       ResourceID{Activation: activation, Reference: AggregatePrefix + scope},
			Scope:    scope,
			Status:   StatusConfirmed,
			Evidence: AggregateEvidence{Aggregate: true, ConfirmedCount: ev.aggregates[scope]},
		})
	}
	return out
}

// ConfirmedCount returns the exact number of confirmed receipts of scope
// (recent and aggregated).
func (ev *Evidence) ConfirmedCount(scope string) uint64 {
	n := ev.aggregates[scope]
	for i := range ev.ringLen {
		if ev.ring[(ev.ringStart+i)%RecentReceipts].Scope == scope {
			n++
		}
	}
	return n
}

// Counts returns the resource counts, aggregates included.
func (ev *Evidence) Counts() Counts {
	c := Counts{Confirmed: ev.confirmed, Recent: uint64(ev.ringLen)}
	c.Aggregated = ev.confirmed - c.Recent
	for _, r := range ev.open {
		switch r.Status {
		case StatusPending:
			c.Pending++
		case StatusMissing:
			c.Missing++
		case StatusUnsupported:
			c.Unsupported++
		case StatusLost:
			c.Lost++
		}
	}
	c.Resources = c.Confirmed + c.Pending + c.Missing + c.Unsupported + c.Lost
	return c
}

// Frozen reports whether the evidence was frozen by the activation's close.
func (ev *Evidence) Frozen() bool { return ev.frozen }

// LateEvents returns the number of evidence events recorded after the
// freeze; they are in the log but changed nothing.
func (ev *Evidence) LateEvents() uint64 { return ev.late }

// Anomalies returns the number of evidence events about unknown or
// duplicate references (for example a barrier for a request that was never
// registered). Any anomaly keeps the activation unconfirmed.
func (ev *Evidence) Anomalies() uint64 { return ev.anomalies }

// Activation is everything the projection keeps about one activation.
type Activation struct {
	ID         string
	Session    string
	Server     string
	FirstSeq   uint64
	LastSeq    uint64
	Events     uint64
	Evidence   Evidence
	Connection Connection
	// Refused is the reason of the activation's first lease.acquire_failed
	// (a cap refusal, a spawn failure); with Started false it makes the
	// activation never-started: a refusal with no cleanup obligation.
	Refused string
	// Started is set by any event other than lease.acquiring and
	// lease.acquire_failed: from then on the activation may own resources
	// and is judged by its close report like any other.
	Started bool
	// Reopened is set when the activation starts again (an acquisition, a
	// child, a guardian, a connection) after its close report was retained:
	// one id covering two lifetimes. The frozen report cannot speak for the
	// second, so the activation is unconfirmed.
	Reopened bool
	// CallsLost counts the calls admitted with no call.finished when the
	// activation's lease ended (terminated, host lost): their outcome is
	// unknown for good. Kept here, not on the lease, because the lease
	// leaves the table at its session's end.
	CallsLost int
	// Relays counts the activation's relay.completed by outcome (nil
	// before the first).
	Relays *RelayCounts
	// Subscriptions counts its resource subscriptions (nil before the
	// first subscription event); ListChanges its lease.list_changed by
	// list (nil before the first); Requests its request handles by method
	// (nil before the first).
	Subscriptions *SubscriptionCounts
	ListChanges   *ListChangeCounts
	Requests      map[events.RequestMethod]*RequestCounts
	// Access counts the decisions of the access policy that name the
	// activation (access.decided, and its tool calls decided under a
	// policy set) by action, outcome and deciding policy; nil before the
	// first.
	Access *AccessCounts

	// subsOpen holds the open subscriptions' keys (subscriptionKey):
	// Subscriptions.Open is its size. Serialised sorted (activationWire).
	subsOpen map[string]bool

	// changedSeq is the seq of the last event for the activation, or of
	// its retirement if later (never serialised): Evict keeps it in memory
	// until a snapshot covering it is stored.
	changedSeq uint64
}

// Anomalies counts events the projection could not attribute. They are
// facts about the log, kept so that an auditor sees them.
type Anomalies struct {
	// Unattributed: evidence or connection events without an activation.
	Unattributed uint64 `json:"unattributed,omitempty"`
	// OrphanLease: lease or call events for an activation with no lease.
	OrphanLease uint64 `json:"orphan_lease,omitempty"`
	// OrphanRequest: request events for an unknown handle or owner.
	OrphanRequest uint64 `json:"orphan_request,omitempty"`
	// Unknown: events of kinds this projector version does not handle.
	Unknown uint64 `json:"unknown,omitempty"`
}

// State is the whole projection. The zero value is not usable; use New.
// A State is not safe for concurrent use: the live wiring guards it.
type State struct {
	seq         uint64
	applied     uint64
	activations map[string]*Activation
	leases      map[LeaseKey]*Lease
	owners      map[string]*Owner
	sessions    map[string]*Session // open sessions only
	anomalies   Anomalies
	host        string      // the host the latest host.bound names; "" when none
	policy      policyState // the access policy in force, its loads, every decision

	// Derived indexes, rebuilt by Unmarshal and never serialised.
	leaseOf map[string]LeaseKey // activation → its lease's key
	ownerOf map[string]string   // live handle → owner

	// Decoding state (never serialised): the canonical-bytes decoder with
	// its caches, and the activation of the last event, which the next one
	// usually shares.
	dec     events.Decoder
	lastAct *Activation

	// archive holds the retired activations dropped by Evict; nil: none
	// is ever dropped. owned is the same archive when it also holds
	// retired owners (OwnerArchive); nil: no owner is ever dropped.
	archive Archive
	owned   OwnerArchive
}

// Host returns the host the chain is bound to: the one its latest
// host.bound names, "" when it has none. A host.bound is a fact of the
// chain, never an anomaly; ledger.BindHost refuses a second one naming
// another host, so the latest is also the first.
func (s *State) Host() string { return s.host }

// New returns an empty State that has applied nothing.
func New() *State {
	s := &State{
		activations: map[string]*Activation{},
		leases:      map[LeaseKey]*Lease{},
		owners:      map[string]*Owner{},
		sessions:    map[string]*Session{},
		leaseOf:     map[string]LeaseKey{},
		ownerOf:     map[string]string{},
	}
	for kind, fields := range payloadReads {
		if err := s.dec.Only(kind, fields...); err != nil {
			panic(err) // payloadReads names a kind or field events does not have: a build error
		}
	}
	return s
}

// Seq returns the seq of the last applied event (0 for a new State).
func (s *State) Seq() uint64 { return s.seq }

// Applied returns the number of events applied since New (or, after
// Unmarshal, the number the snapshot covered plus those applied since).
func (s *State) Applied() uint64 { return s.applied }

// Activation returns the projection of activation id, from memory or the
// archive (an archive read failure reads as absent: LoadActivation tells
// it). An activation read from the archive is a copy: modifying it changes
// nothing.
func (s *State) Activation(id string) (*Activation, bool) {
	a, ok, _ := s.find(id)
	return a, ok
}

// LoadActivation is Activation with the archive's error (wrapping
// ErrArchive).
func (s *State) LoadActivation(id string) (*Activation, bool, error) { return s.find(id) }

// ActivationIDs returns every activation held in memory, sorted: every
// known activation for a State without an Archive; for one with an
// Archive, the live activations and the retired ones not yet evicted.
func (s *State) ActivationIDs() []string { return sortedKeys(s.activations) }

// Lease returns the lease at key.
func (s *State) Lease(key LeaseKey) (*Lease, bool) {
	l, ok := s.leases[key]
	return l, ok
}

// Leases returns every lease in the table, sorted by key.
func (s *State) Leases() []*Lease {
	keys := make([]string, 0, len(s.leases))
	byKey := make(map[string]*Lease, len(s.leases))
	for k, l := range s.leases {
		keys = append(keys, k.String())
		byKey[k.String()] = l
	}
	sortStrings(keys)
	out := make([]*Lease, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}

// AllLeases yields every lease in the table in no particular order: a
// reader that needs only some of them in key order (a page) selects them
// without sorting the whole table, which it reads under a lock appends wait
// on. The leases are the state's own: read them, never keep them past the
// lock.
func (s *State) AllLeases() iter.Seq[*Lease] {
	return func(yield func(*Lease) bool) {
		for _, l := range s.leases {
			if !yield(l) {
				return
			}
		}
	}
}

// Owner returns the request owner id, from memory or the archive (an
// archive read failure reads as absent). An owner read from the archive
// is a copy: modifying it changes nothing.
func (s *State) Owner(id string) (*Owner, bool) {
	if o, ok := s.owners[id]; ok {
		return o, true
	}
	if s.owned == nil {
		return nil, false
	}
	o, ok, err := s.owned.LoadOwner(id)
	return o, ok && err == nil
}

// Request returns the live handle's request (handles of ended owners are
// summarised, not kept).
func (s *State) Request(handle string) (*Request, bool) {
	o, ok := s.ownerOf[handle]
	if !ok {
		return nil, false
	}
	r, ok := s.owners[o].Handles[handle]
	return r, ok
}

// Anomalies returns the state-wide anomaly counters.
func (s *State) Anomalies() Anomalies { return s.anomalies }

// CloseReport returns the retained close report of activation.
// An archive read failure reads as absent (LoadCloseReport tells it).
func (s *State) CloseReport(activation string) (CloseReport, bool) {
	r, ok, _ := s.LoadCloseReport(activation)
	return r, ok
}

// LoadCloseReport is CloseReport with the archive's error (wrapping
// ErrArchive).
func (s *State) LoadCloseReport(activation string) (CloseReport, bool, error) {
	a, ok, err := s.find(activation)
	if err != nil || !ok || a.Connection.Report == nil {
		return CloseReport{}, false, err
	}
	r := *a.Connection.Report
	r.Reasons = append([]string(nil), r.Reasons...)
	r.Obligations = append([]ObligationReport(nil), r.Obligations...)
	return r, true, nil
}
