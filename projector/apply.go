package projector

import (
	"errors"
	"fmt"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Errors Apply returns. On any error the state is unchanged.
var (
	// ErrOutOfOrder marks an event whose seq is not after the last applied
	// one; see *SeqError.
	ErrOutOfOrder = errors.New("projector: event out of order")
	// ErrDecode marks an event or payload that could not be decoded.
	ErrDecode = errors.New("projector: undecodable event")
)

// SeqError is returned for an event at or before the last applied seq. It
// wraps ErrOutOfOrder.
type SeqError struct {
	Got  uint64 // the event's seq
	Last uint64 // the last applied seq
}

func (e *SeqError) Error() string {
	return fmt.Sprintf("projector: event seq %d is not after the last applied seq %d", e.Got, e.Last)
}

// Unwrap makes errors.Is(err, ErrOutOfOrder) true.
func (e *SeqError) Unwrap() error { return ErrOutOfOrder }

// event is what the reducer consumes; Apply and ApplyRaw both build it, so
// live and replay share every line of the reducer.
type event struct {
	seq        uint64
	time       time.Time
	kind       events.Kind
	activation string
	session    string
	server     string
	payload    events.Payload
	act        *Activation // the activation, when the parser already looked it up
}

// Apply folds env into s. It is the package-level form of [State.Apply].
func Apply(s *State, env *events.Envelope) error { return s.Apply(env) }

// Apply folds one committed event into the state. Events must arrive in
// increasing seq order (a filtered replay, such as one activation's events,
// may skip seqs). Apply does no I/O and reads no clock; on error the state
// is unchanged.
func (s *State) Apply(env *events.Envelope) error {
	if uint64(env.Seq) <= s.seq {
		return &SeqError{Got: uint64(env.Seq), Last: s.seq}
	}
	p, err := s.dec.DecodePayload(env.Kind, env.Data)
	if err != nil {
		return fmt.Errorf("%w: seq %d: %w", ErrDecode, env.Seq, err)
	}
	e := event{seq: uint64(env.Seq), time: env.Time, kind: env.Kind, activation: env.Activation,
		session: env.Session, server: env.Server, payload: p}
	if err := s.resolve(&e); err != nil {
		return err
	}
	s.apply(&e)
	return nil
}

// ApplyPayload folds one committed event into the state as Apply does, but
// with its payload already decoded: p is the payload whose canonical
// encoding is env.Data (the draft the ledger hands BeforeAck in
// ledger.Record.Payload), so env.Data is not decoded again. The result is
// the same as Apply's (TestApplyPayloadTwin). The state keeps nothing p
// points to: the payload stays its owner's (ownPayload copies the facts
// the reducer keeps; TestApplyPayloadKeepsNoReference).
func (s *State) ApplyPayload(env *events.Envelope, p events.Payload) error {
	if uint64(env.Seq) <= s.seq {
		return &SeqError{Got: uint64(env.Seq), Last: s.seq}
	}
	if p == nil || p.Kind() != env.Kind {
		return fmt.Errorf("%w: seq %d: payload %T is not of kind %s", ErrDecode, env.Seq, p, env.Kind)
	}
	return s.foldCached(&event{seq: uint64(env.Seq), time: env.Time, kind: env.Kind, activation: env.Activation,
		session: env.Session, server: env.Server, payload: ownPayload(p)})
}

// ownPayload returns p, or for the kinds whose facts the reducer keeps by
// pointer (the guardian's *events.Instant fields) a shallow copy whose
// instants are the state's own, in UTC as decoding yields them.
func ownPayload(p events.Payload) events.Payload {
	switch v := p.(type) {
	case *events.GuardianSignal:
		c := *v
		c.At = ownInstant(v.At)
		return &c
	case *events.GuardianReaped:
		c := *v
		c.At = ownInstant(v.At)
		return &c
	case *events.GuardianReceipt:
		c := *v
		c.StdinClosedAt, c.StdoutClosedAt, c.StderrClosedAt = ownInstant(v.StdinClosedAt), ownInstant(v.StdoutClosedAt), ownInstant(v.StderrClosedAt)
		c.TermSentAt, c.KillSentAt = ownInstant(v.TermSentAt), ownInstant(v.KillSentAt)
		return &c
	case *events.GuardianLost:
		c := *v
		c.StdinClosedAt, c.StdoutClosedAt, c.StderrClosedAt = ownInstant(v.StdinClosedAt), ownInstant(v.StdoutClosedAt), ownInstant(v.StderrClosedAt)
		return &c
	case *events.LeaseChildClosed:
		c := *v
		c.ReapedAt = ownInstant(v.ReapedAt)
		c.StdinClosedAt, c.StdoutClosedAt, c.StderrClosedAt = ownInstant(v.StdinClosedAt), ownInstant(v.StdoutClosedAt), ownInstant(v.StderrClosedAt)
		c.TermSentAt, c.KillSentAt = ownInstant(v.TermSentAt), ownInstant(v.KillSentAt)
		return &c
	}
	return p
}

// ownInstant is a copy of i in UTC (nil for nil).
func ownInstant(i *events.Instant) *events.Instant {
	if i == nil {
		return nil
	}
	return &events.Instant{Time: i.UTC()}
}

// ApplyRaw folds the stored bytes of one ledger record into the state. It
// decodes them with events.Decoder (the canonical fast path, falling back
// to the strict decoder for anything unusual) and does not check the hash
// chain: it is meant for bytes read from a ledger, whose chain `leaseledger
// verify` checks. The result is the same as Apply of the decoded envelope
// for every event the strict decoder accepts. The kinds in payloadReads
// are decoded narrowed (events.Decoder.Only): their unread fields are
// checked for their form but not their values, so a stored event of those
// kinds that breaks a value rule (which the ledger refuses to append, and
// `leaseledger verify` reports) is applied here where Apply would refuse it.
func (s *State) ApplyRaw(raw []byte) error {
	var h events.Header
	p, err := s.dec.Decode(raw, &h)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if uint64(h.Seq) <= s.seq {
		return &SeqError{Got: uint64(h.Seq), Last: s.seq}
	}
	return s.foldCached(&event{seq: uint64(h.Seq), time: h.Time, kind: h.Kind, activation: h.Activation,
		session: h.Session, server: h.Server, payload: p})
}

// foldCached resolves and applies e, the fast paths' tail (ApplyPayload,
// ApplyRaw): an event of the activation the previous event touched reuses
// it instead of a map lookup. Apply, the reference, looks it up each time.
func (s *State) foldCached(e *event) error {
	if s.lastAct != nil && s.lastAct.ID == e.activation {
		e.act = s.lastAct
	}
	if err := s.resolve(e); err != nil {
		return err
	}
	s.apply(e)
	return nil
}

// payloadReads lists, for the most frequent kinds whose payload the
// reducer below reads only in part, every field it reads: ApplyRaw's
// decoder keeps only those (events.Decoder.Only), sparing replay the
// validation and copying of the rest. Reading another field of these
// payloads in apply means adding it here; TestReplayEquivalence, which
// compares Apply (whole payloads) with ApplyRaw, fails otherwise.
// A call.admitted keeps its deciding policies, which have value rules: one
// that carries them is decoded whole and validated, one without them (no
// policy in force) is narrowed to nothing (events.Decoder.Only).
// call.refused is decoded whole: the reducer reads its reason.
var payloadReads = map[events.Kind][]string{
	new(events.CallAdmitted).Kind(): {"policies", "policies_omitted", "policy_digest"},
	new(events.CallFinished).Kind(): {"killed_on_cancel"},
}

func (s *State) apply(e *event) {
	s.seq = e.seq
	s.applied++
	a := e.act
	if a == nil && e.activation != "" {
		a = s.activations[e.activation]
		if a == nil {
			a = &Activation{ID: e.activation, Session: e.session, Server: e.server, FirstSeq: e.seq}
			a.Connection.Phase = events.PhaseActive
			s.activations[e.activation] = a
		}
	}
	s.lastAct = a
	if a != nil {
		if a.Session == "" {
			a.Session = e.session
		}
		if a.Server == "" {
			a.Server = e.server
		}
		a.LastSeq = e.seq
		a.changedSeq = e.seq
		a.Events++
		switch e.payload.(type) {
		case *events.LeaseAcquiring, *events.LeaseAcquireFailed, *events.AccessDecided: // a decision starts nothing
		default:
			a.Started = true
		}
		if a.Connection.Report != nil {
			switch e.payload.(type) {
			case *events.LeaseAcquiring, *events.LeaseChildStarted, *events.GuardianStarted, *events.ConnectionOpened:
				a.Reopened = true
			}
		}
	}
	switch p := e.payload.(type) {
	// lease and call
	case *events.LeaseAcquiring:
		s.leaseAcquiring(e, p)
	case *events.LeaseAcquired:
		if l := s.leaseFor(e); l != nil {
			if p.Fingerprint != l.Fingerprint {
				l.Anomalies++
			}
			if l.State == LeaseStarting {
				l.State = LeaseReady
			}
			l.ReadyAt = events.Instant{Time: e.time}
		}
	case *events.LeaseAcquireFailed:
		if a != nil && a.Refused == "" {
			a.Refused = p.Reason
		}
		if _, acquiring := s.leaseOf[e.activation]; !acquiring && e.activation != "" {
			break // refused before acquiring (the live-lease cap): no lease to end
		}
		if l := s.leaseFor(e); l != nil {
			s.endLease(l, e, p.Reason)
		}
	case *events.LeaseChildStarted:
		if l := s.leaseFor(e); l != nil {
			l.PID, l.GuardianPID, l.Cleanup = p.PID, p.GuardianPID, p.Cleanup
		}
		if a != nil {
			a.Evidence.childStarted(a.ID, e, p)
		}
	case *events.LeaseChildClosed:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		a.Evidence.childClosed(e, p)
	case *events.LeaseListingPinned:
		if l := s.leaseFor(e); l != nil {
			l.ListingDigest, l.ToolCount = p.ListingDigest, p.ToolCount
		}
	case *events.LeasePoisoned:
		if l := s.leaseFor(e); l != nil && l.Live() {
			l.State, l.Reason, l.PoisonTool = LeasePoisoned, string(p.Reason), p.Tool
		}
	case *events.LeaseRevoked:
		if l := s.leaseFor(e); l != nil && (l.State == LeaseStarting || l.State == LeaseReady) {
			l.State, l.Reason = LeaseCancelled, p.Reason
		}
	case *events.LeaseStaleReplaced:
		if l := s.leaseFor(e); l != nil {
			l.ReplacedBy = p.NewActivation
		}
	case *events.LeaseReaped:
		if l := s.leaseFor(e); l != nil && l.Reason == "" {
			l.Reason = string(events.TerminatedReaped)
		}
	case *events.LeaseTerminated:
		if l := s.leaseFor(e); l != nil {
			s.endLease(l, e, string(p.Reason))
		}
	case *events.CallAdmitted:
		if l := s.leaseFor(e); l != nil {
			if l.State != LeaseReady && l.State != LeaseStarting {
				l.GateViolations++
			}
			l.CallsInFlight++
			l.CallsAdmitted++
			l.LastUse = events.Instant{Time: e.time}
		}
		if p.PolicyDigest != "" { // admitted under a policy set; without one no policy decided
			s.accessDecided(e, a, events.AccessCallTool, true, p.Policies, p.PoliciesOmitted)
		}
	case *events.CallRefused:
		if l := s.leaseFor(e); l != nil {
			l.CallsRefused++
		}
		if p.Reason == events.RefusedPolicy {
			s.accessDecided(e, a, events.AccessCallTool, false, p.Policies, p.PoliciesOmitted)
		}
	case *events.CallFinished:
		if l := s.leaseFor(e); l != nil {
			if l.CallsInFlight > 0 {
				l.CallsInFlight--
				if !l.Live() && a != nil && a.CallsLost > 0 {
					a.CallsLost-- // recorded after all, late
				}
			} else {
				l.Anomalies++
			}
			l.CallsFinished++
			if p.KilledOnCancel {
				l.KilledOnCancel++
			}
			l.LastUse = events.Instant{Time: e.time}
		}
	case *events.SessionOpened:
		s.sessionOpened(e, p)
	case *events.SessionEnded:
		s.sessionEnded(e.session, e.seq)

	// request handles
	case *events.RequestRegistered:
		s.requestRegistered(e, a, p)
	case *events.RequestDispatched:
		if r := s.requestFor(p.Handle); r != nil {
			r.addWireID(p.WireID)
			if r.State == RequestRegistered {
				r.State = RequestDispatched
			}
		}
	case *events.RequestContinued:
		if r := s.requestFor(p.Handle); r != nil {
			r.addWireID(p.WireID)
			r.Rounds = max(r.Rounds, p.Round)
			if r.State == RequestRegistered {
				r.State = RequestDispatched
			}
		}
	case *events.RequestCompleted:
		if r := s.requestFor(p.Handle); r != nil {
			r.Completions++
			if r.Completions == 1 {
				r.Outcome, r.ResultBytes = p.Outcome, p.ResultBytes
				if r.State != RequestCancelled {
					r.State = RequestCompleted
					if a != nil {
						a.requestEnded(r.Method, p.Outcome, false)
					}
				}
			}
		}
	case *events.RequestAwaitTimedOut:
		if r := s.requestFor(p.Handle); r != nil {
			r.AwaitTimeouts++
		}
	case *events.RequestCancelled:
		if r := s.requestFor(p.Handle); r != nil && r.Cancellation == nil {
			r.Cancellation = &Cancellation{Reason: p.Reason, LocalSettled: p.LocalSettled,
				TransportAccepted: p.TransportAccepted, NotificationDelivered: p.NotificationDelivered,
				Remote: p.Remote, Seq: e.seq}
			if r.State != RequestCompleted {
				r.State = RequestCancelled
				if a != nil {
					a.requestEnded(r.Method, "", true)
				}
			}
		}
	case *events.RequestOwnerEnded:
		s.ownerEnded(e, p)

	// connections
	case *events.ConnectionOpened:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		c := &a.Connection
		if c.Opened || c.Phase != events.PhaseActive {
			c.Regressions++
			break
		}
		c.Opened, c.Transport, c.Cleanup, c.OneShot = true, p.Transport, p.Cleanup, p.OneShot
	case *events.ConnectionPhase:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		c := &a.Connection
		next := p.Phase
		if phaseRank(next) <= phaseRank(c.Phase) {
			if next != c.Phase {
				c.Regressions++
			}
			break
		}
		c.Phase = next
		if p.BudgetNS != 0 {
			c.BudgetNS = p.BudgetNS
		}
		if next == events.PhaseClosed && c.Report == nil {
			a.close(e, 0, true)
		}
	case *events.ConnectionBarrier:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		if a.Connection.Report != nil {
			a.Evidence.late++
			break
		}
		i := obligationIndex(p.Obligation)
		if i < 0 {
			s.anomalies.Unknown++
			break
		}
		o := &a.Connection.Barriers[i]
		o.Outcome, o.Detail, o.ElapsedNS, o.Seq = p.Outcome, p.Detail, p.ElapsedNS, e.seq
		o.Observations++
	case *events.ConnectionClosed:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		c := &a.Connection
		if c.Report != nil {
			if c.Report.CloseCalls == 0 {
				c.Report.ElapsedNS = p.ElapsedNS
			}
			c.Report.CloseCalls++
			break
		}
		c.Phase = events.PhaseClosed
		a.close(e, p.ElapsedNS, c.Opened && !p.Repeat)
		c.Report.CloseCalls = 1

	// guardian and http evidence
	case *events.GuardianStarted, *events.GuardianSignal, *events.GuardianReaped,
		*events.GuardianReceipt, *events.GuardianLost,
		*events.HTTPRegistered, *events.HTTPRedirect, *events.HTTPCompleted,
		*events.HTTPBarrier, *events.HTTPWorkerDown, *events.HTTPLost:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		a.Evidence.apply(a.ID, e)
	// the chain's host
	case *events.HostBound:
		s.host = p.Host
	// the configuration in force: a fact for auditors, no state
	case *events.ConfigLoaded:
	// the access policy: the one in force and its loads; each decision
	// counted per activation, per open session and in all (access.go)
	case *events.PolicyLoaded:
		s.policyLoaded(e, p)
	case *events.AccessDecided:
		s.accessDecided(e, a, p.Action, p.Allowed, p.Policies, p.PoliciesOmitted)
	// the server→client direction: relays counted per activation by
	// outcome, list changes by list (a tool list change's new listing is
	// its lease.listing_pinned); a session's log level kept on the session
	// and its own leases
	case *events.RelayCompleted:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		if a.Relays == nil {
			a.Relays = &RelayCounts{}
		}
		a.Relays.add(p.Outcome)
	case *events.LeaseListChanged:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		a.listChanged(p.List)
	case *events.SessionLogLevel:
		s.sessionLogLevel(e, p)
	// resource subscriptions: counted per activation by how they ended,
	// and the open ones by (session, uri_sha256)
	case *events.SubscriptionStarted:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		a.subscriptionStarted(e.session, p)
	case *events.SubscriptionEnded:
		if a == nil {
			s.anomalies.Unattributed++
			break
		}
		a.subscriptionEnded(e.session, p)
	default:
		s.anomalies.Unknown++
	}
}

// ---- leases ----

func (s *State) leaseAcquiring(e *event, p *events.LeaseAcquiring) {
	if e.activation == "" || e.server == "" {
		s.anomalies.OrphanLease++
		return
	}
	key := LeaseKey{Session: p.KeySession, Server: e.server}
	if old, ok := s.leases[key]; ok {
		delete(s.leaseOf, old.Activation)
		s.touch(old.Activation, e.seq) // may retire it
	}
	if oldKey, ok := s.leaseOf[e.activation]; ok { // one activation, one lease lifetime
		delete(s.leases, oldKey)
	}
	l := &Lease{KeySession: p.KeySession, Server: e.server, Shared: p.Shared, Session: e.session,
		Activation: e.activation, State: LeaseStarting, Fingerprint: p.Fingerprint, StartedAt: events.Instant{Time: e.time}}
	if x := s.sessions[p.KeySession]; x != nil && !p.Shared {
		l.LogLevel = x.LogLevel // the runtime sends it right after initialize
	}
	s.leases[key] = l
	s.leaseOf[e.activation] = key
}

func (s *State) leaseFor(e *event) *Lease {
	if key, ok := s.leaseOf[e.activation]; ok && e.activation != "" {
		return s.leases[key]
	}
	s.anomalies.OrphanLease++
	return nil
}

func (s *State) endLease(l *Lease, e *event, reason string) {
	if l.State == LeaseTerminated {
		return
	}
	if l.State == LeaseStarting || l.State == LeaseReady || l.Reason == "" {
		l.Reason = reason
	}
	l.State = LeaseTerminated
	l.EndedAt = events.Instant{Time: e.time}
	// The runtime records every outcome before a lease's termination, so a
	// call still unpaired now is lost for good. The activation remembers
	// it: the lease itself leaves the table at its session's end.
	if a := s.activations[l.Activation]; a != nil && l.CallsInFlight > 0 {
		a.CallsLost += l.CallsInFlight
	}
}

// sessionEnded drops the session and the terminated leases keyed by it:
// the lease table keeps terminated leases only until their session's end,
// so it is bounded by live sessions times servers. Live leases and shared
// leases stay.
func (s *State) sessionEnded(session string, seq uint64) {
	if session == "" {
		return
	}
	delete(s.sessions, session)
	for k, l := range s.leases {
		if k.Session == session && !l.Live() {
			delete(s.leases, k)
			delete(s.leaseOf, l.Activation)
			s.touch(l.Activation, seq) // may retire it
		}
	}
}
