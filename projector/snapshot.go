package projector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/leaseledger/leaseledger/events"
	segjson "github.com/segmentio/encoding/json"
)

// Snapshot format. A snapshot whose format or version differs is refused
// with a *FormatError: the caller replays the whole log instead, never
// trusting an older layout half-way.
const (
	SnapshotFormat  = "leaseledger-projector"
	SnapshotVersion = 9 // 3: open sessions (session.opened); 4: calls lost per activation; 5: retired activations stored apart (MarshalLive, MarshalActivation); 6: retired owners stored apart (MarshalOwner); 7: verdict records and their counts beside the parts (a version-6 store lacks them); 8: subscriptions, list changes and request handles by method per activation, the log level of sessions and their leases (a version-7 snapshot covering those events lacks them); 9: the access policy's loads and decisions, per activation, per session and in all (a version-8 snapshot covering policy events lacks them)
)

// Errors of Unmarshal.
var (
	// ErrSnapshotFormat marks a snapshot of another format or version.
	ErrSnapshotFormat = errors.New("projector: unsupported snapshot format")
	// ErrSnapshotCorrupt marks a snapshot of the right version whose
	// content is malformed or inconsistent.
	ErrSnapshotCorrupt = errors.New("projector: corrupt snapshot")
)

// FormatError says which format and version a refused snapshot has. It
// wraps ErrSnapshotFormat.
type FormatError struct {
	Format  string
	Version int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("projector: snapshot format %q version %d, want %q version %d", e.Format, e.Version, SnapshotFormat, SnapshotVersion)
}

// Unwrap makes errors.Is(err, ErrSnapshotFormat) true.
func (e *FormatError) Unwrap() error { return ErrSnapshotFormat }

type snapshotHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// decodeSnapshot decodes b, one document of the snapshot format (a
// state's, a retired activation's or owner's), into v, a pointer to the
// document's type, which carries its format and version (head returns
// them once decoded): a *FormatError for another format or version,
// ErrSnapshotCorrupt for anything else that is not exactly one document of
// this version (an unknown field, a wrong type, bytes after it).
//
// Decoding the live part of a snapshot is most of serve's start-up beyond
// opening Pebble, so b is decoded once, in one pass, and by the fast
// decoder (segmentio's, a third of encoding/json's time on a snapshot:
// BenchmarkUnmarshalSnapshot). Only when the fast decoder refuses b does
// encoding/json, the reference, decode it again, and its verdict stands:
// the fast decoder can only speed up a document, never make one fail. The
// header is read on its own only when the reference refuses b too, to tell
// another version (whose fields this one may not know) from a damaged
// one. TestDecodeSnapshotTwin holds the outcome to the reference reading
// the header first, then the document, over valid, damaged and
// re-versioned snapshots.
func decodeSnapshot(b []byte, v any, head func() snapshotHeader) error {
	return decodeSnapshotWith(b, v, head, true)
}

// decodeSnapshotWith is decodeSnapshot; fast false decodes with the
// reference alone (the baseline of BenchmarkUnmarshalSnapshot).
func decodeSnapshotWith(b []byte, v any, head func() snapshotHeader, fast bool) error {
	if !fast || !decodeFast(b, v) {
		if fast {
			// What the fast decoder filled in before it stopped.
			reflect.ValueOf(v).Elem().SetZero()
		}
		if err := decodeStrict(b, v); err != nil {
			var h snapshotHeader
			if json.Unmarshal(b, &h) == nil && (h.Format != SnapshotFormat || h.Version != SnapshotVersion) {
				return &FormatError{Format: h.Format, Version: h.Version}
			}
			return fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
		}
	}
	if h := head(); h.Format != SnapshotFormat || h.Version != SnapshotVersion {
		return &FormatError{Format: h.Format, Version: h.Version}
	}
	return nil
}

// decodeFast decodes b into v with segmentio's decoder, unknown fields
// refused, and reports whether b was exactly one document it accepted
// (JSON white space after it allowed).
func decodeFast(b []byte, v any) bool {
	rest, err := segjson.Parse(b, v, segjson.DisallowUnknownFields)
	return err == nil && len(bytes.TrimLeft(rest, " \t\r\n")) == 0
}

// decodeStrict decodes b into v with encoding/json, unknown fields
// refused, and fails on anything after the document.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the snapshot document")
	}
	return nil
}

type snapshotWire struct {
	Format      string                     `json:"format"`
	Version     int                        `json:"version"`
	Seq         uint64                     `json:"seq"`
	Applied     uint64                     `json:"applied"`
	Anomalies   Anomalies                  `json:"anomalies"`
	Activations map[string]*activationWire `json:"activations"`
	Leases      map[string]*Lease          `json:"leases"`
	Owners      map[string]*Owner          `json:"owners"`
	Sessions    map[string]*Session        `json:"sessions"`
	Host        string                     `json:"host,omitempty"`   // State.Host
	Policy      *policyWire                `json:"policy,omitempty"` // State.Policy
}

type activationWire struct {
	Session    string       `json:"session,omitempty"`
	Server     string       `json:"server,omitempty"`
	FirstSeq   uint64       `json:"first_seq"`
	LastSeq    uint64       `json:"last_seq"`
	Events     uint64       `json:"events"`
	Evidence   evidenceWire `json:"evidence"`
	Connection Connection   `json:"connection"`
	Refused    string       `json:"refused,omitempty"`
	Started    bool         `json:"started,omitempty"`
	Reopened   bool         `json:"reopened,omitempty"`
	CallsLost  int          `json:"calls_lost,omitempty"`
	Relays     *RelayCounts `json:"relays,omitempty"`

	Subscriptions     *SubscriptionCounts                    `json:"subscriptions,omitempty"`
	SubscriptionsOpen []string                               `json:"subscriptions_open,omitempty"` // sorted keys "<session>/<uri_sha256>"
	ListChanges       *ListChangeCounts                      `json:"list_changes,omitempty"`
	Requests          map[events.RequestMethod]RequestCounts `json:"requests,omitempty"`
	Access            *AccessCounts                          `json:"access,omitempty"`
}

type evidenceWire struct {
	Resources  map[string]*Resource `json:"resources,omitempty"`
	Recent     []Resource           `json:"recent,omitempty"`
	Aggregates map[string]uint64    `json:"aggregates,omitempty"`
	Confirmed  uint64               `json:"confirmed"`
	Frozen     bool                 `json:"frozen,omitempty"`
	FrozenSeq  uint64               `json:"frozen_seq,omitempty"`
	Late       uint64               `json:"late,omitempty"`
	Anomalies  uint64               `json:"anomalies,omitempty"`
}

// Marshal serialises s deterministically: fixed field order, map keys
// sorted, recent receipts oldest first, times in events.TimeLayout. Equal
// states give equal bytes however they were reached (incrementally, by
// full replay, or from a snapshot plus the tail).
func Marshal(s *State) ([]byte, error) { return marshal(s, false) }

// marshal serialises s; live: without its retired activations and owners.
func marshal(s *State, live bool) ([]byte, error) {
	w := snapshotWire{Format: SnapshotFormat, Version: SnapshotVersion, Seq: s.seq, Applied: s.applied,
		Anomalies: s.anomalies, Activations: make(map[string]*activationWire, len(s.activations)),
		Leases: make(map[string]*Lease, len(s.leases)), Owners: s.owners, Sessions: s.sessions, Host: s.host,
		Policy: wirePolicy(&s.policy)}
	for id, a := range s.activations {
		if !live || !s.retired(a) {
			w.Activations[id] = wireActivation(a)
		}
	}
	if live {
		w.Owners = make(map[string]*Owner, len(s.owners))
		for id, o := range s.owners {
			if !retiredOwner(o) {
				w.Owners[id] = o
			}
		}
	}
	for k, l := range s.leases {
		w.Leases[k.String()] = l
	}
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("projector: marshal: %w", err)
	}
	return b, nil
}

func wireActivation(a *Activation) *activationWire {
	ev := &a.Evidence
	return &activationWire{Session: a.Session, Server: a.Server, FirstSeq: a.FirstSeq,
		LastSeq: a.LastSeq, Events: a.Events, Connection: a.Connection, Refused: a.Refused, Started: a.Started, Reopened: a.Reopened, CallsLost: a.CallsLost,
		Relays: relayCopy(a.Relays), Subscriptions: subscriptionCopy(a.Subscriptions), SubscriptionsOpen: subscriptionsOpenList(a.subsOpen),
		ListChanges: listChangeCopy(a.ListChanges), Requests: requestsCopy(a.Requests), Access: a.Access,
		Evidence: evidenceWire{Resources: ev.open, Recent: ev.Recent(), Aggregates: ev.aggregates,
			Confirmed: ev.confirmed, Frozen: ev.frozen, FrozenSeq: ev.frozenSeq, Late: ev.late, Anomalies: ev.anomalies}}
}

// restoreActivation rebuilds activation id from its wire form, checking
// its consistency (ErrSnapshotCorrupt).
func restoreActivation(id string, aw *activationWire) (*Activation, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSnapshotCorrupt, fmt.Sprintf(format, args...))
	}
	if aw == nil || !events.ValidID(id) {
		return nil, corrupt("activation entry")
	}
	a := &Activation{ID: id, Session: aw.Session, Server: aw.Server, FirstSeq: aw.FirstSeq,
		LastSeq: aw.LastSeq, Events: aw.Events, Connection: aw.Connection, Refused: aw.Refused, Started: aw.Started, Reopened: aw.Reopened, CallsLost: aw.CallsLost,
		Relays: relayCopy(aw.Relays), Subscriptions: subscriptionCopy(aw.Subscriptions), subsOpen: subscriptionsOpenRestore(aw.SubscriptionsOpen),
		ListChanges: listChangeCopy(aw.ListChanges), Access: aw.Access}
	if a.CallsLost < 0 {
		return nil, corrupt("activation %s: calls lost", id)
	}
	if !accessValid(a.Access) {
		return nil, corrupt("activation %s: access counts", id)
	}
	if uint64(len(a.subsOpen)) != a.Subscriptions.openCount() || len(a.subsOpen) != len(aw.SubscriptionsOpen) {
		return nil, corrupt("activation %s: open subscriptions", id)
	}
	var ok bool
	if a.Requests, ok = requestsRestore(aw.Requests); !ok {
		return nil, corrupt("activation %s: request method", id)
	}
	if phaseRank(a.Connection.Phase) == 0 && a.Connection.Phase != events.PhaseActive {
		return nil, corrupt("activation %s: phase", id)
	}
	ew := &aw.Evidence
	ev := &a.Evidence
	if len(ew.Recent) > RecentReceipts {
		return nil, corrupt("activation %s: %d recent receipts", id, len(ew.Recent))
	}
	total := uint64(len(ew.Recent))
	for _, n := range ew.Aggregates {
		total += n
	}
	if total != ew.Confirmed {
		return nil, corrupt("activation %s: confirmed count %d, entries %d", id, ew.Confirmed, total)
	}
	for ref, r := range ew.Resources {
		if r == nil || r.ID.Reference != ref || r.ID.Activation != id {
			return nil, corrupt("activation %s: resource entry", id)
		}
	}
	ev.open, ev.aggregates = ew.Resources, ew.Aggregates
	ev.ringLen = copy(ev.ring[:], ew.Recent)
	ev.confirmed, ev.frozen, ev.frozenSeq, ev.late, ev.anomalies = ew.Confirmed, ew.Frozen, ew.FrozenSeq, ew.Late, ew.Anomalies
	return a, nil
}

// Unmarshal restores a State from Marshal's output. A snapshot of another
// format or version yields a *FormatError (errors.Is ErrSnapshotFormat);
// malformed or inconsistent content yields ErrSnapshotCorrupt. Either way
// the caller should replay the log from the start.
func Unmarshal(b []byte) (*State, error) {
	var w snapshotWire
	if err := decodeSnapshot(b, &w, func() snapshotHeader { return snapshotHeader{w.Format, w.Version} }); err != nil {
		return nil, err
	}
	return restoreState(&w)
}

// restoreState makes the State a decoded snapshot describes, checking
// what the decoding cannot (map keys against the entries' own ids).
func restoreState(w *snapshotWire) (*State, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSnapshotCorrupt, fmt.Sprintf(format, args...))
	}
	s := New()
	s.seq, s.applied, s.anomalies, s.host = w.Seq, w.Applied, w.Anomalies, w.Host
	var ok bool
	if s.policy, ok = restorePolicy(w.Policy); !ok {
		return nil, corrupt("policy")
	}
	for id, aw := range w.Activations {
		a, err := restoreActivation(id, aw)
		if err != nil {
			return nil, err
		}
		// Not evicted before a snapshot covering the state's seq is stored
		// (one written by a State without an archive may hold retired
		// activations; see State.Evict).
		a.changedSeq = w.Seq
		s.activations[id] = a
	}
	for k, l := range w.Leases {
		session, server, ok := strings.Cut(k, "/")
		if l == nil || !ok || l.KeySession != session || l.Server != server {
			return nil, corrupt("lease entry %q", k)
		}
		key := LeaseKey{Session: session, Server: server}
		s.leases[key] = l
		s.leaseOf[l.Activation] = key
	}
	for id, o := range w.Owners {
		if o == nil || o.ID != id {
			return nil, corrupt("owner entry")
		}
		for h, r := range o.Handles {
			if r == nil || r.Handle != h || r.Owner != id {
				return nil, corrupt("owner %s: handle entry", id)
			}
			s.ownerOf[h] = id
		}
		o.changedSeq = w.Seq // as for activations above
		s.owners[id] = o
	}
	for id, x := range w.Sessions {
		if x == nil || x.ID != id || !events.ValidID(id) || !accessValid(x.Access) {
			return nil, corrupt("session entry")
		}
		s.sessions[id] = x
	}
	return s, nil
}
