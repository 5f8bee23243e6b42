package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/leaseledger/leaseledger/events"
)

// Retirement: closed activations leave memory.
//
// An activation is retired (closed) when nothing live refers to it:
//
//   - it has a retained close report (its evidence is frozen), or it never
//     started (an acquisition refused before anything ran: nothing is owed),
//   - and no lease in the lease table names it (a lease stays in the table
//     until its session ends or another acquisition replaces it at its key,
//     and while it does the activation's verdict reads it).
//
// Request handles name an activation but the reducer never reads it through
// them, so they do not keep it live.
//
// A request owner is retired when it ended and holds no handle (a handle
// registered after its end keeps it live). Retired owners leave memory and
// the live part like retired activations, and come back from the archive
// when a later event names them (a registration or a repeated end, both
// anomalies), so that ended owners — one per gateway session — do not make
// the live part grow with history. An activation that never closes (its
// host died) stays live: its verdict still depends on events to come.
//
// A State with an [Archive] (see [State.SetArchive]) may drop retired
// activations from memory with [State.Evict] once their serialisation
// ([MarshalActivation]) is stored. A later event for a dropped activation
// (late evidence, a repeated close, a reopen, an orphan call) loads it back
// from the archive first, so the result is exactly that of a State that
// kept it (TestArchiveEquivalence). A State without an archive never drops
// anything.

// Archive holds the activations a State dropped from memory. Load returns
// the activation id as [UnmarshalActivation] restored it, false when the
// archive does not hold it. A Load error fails the Apply that needed it
// (wrapped in ErrArchive) and leaves the state unchanged.
type Archive interface {
	Load(id string) (*Activation, bool, error)
}

// OwnerArchive is an Archive that also holds retired request owners:
// LoadOwner returns owner id as [UnmarshalOwner] restored it. A State
// drops retired owners only when its Archive is one; a reader that may
// forget what it drops (`leaseledger leases`) implements only Archive,
// because the state-wide anomaly counters do read ended owners (a
// repeated end leaves the handles registered after the first one live).
type OwnerArchive interface {
	Archive
	LoadOwner(id string) (*Owner, bool, error)
}

// ErrArchive marks a failure to read an activation from the state's Archive.
var ErrArchive = errors.New("projector: archive read failed")

// SetArchive makes ar the store of the activations s drops with Evict, and
// the place it looks up an activation it does not hold in memory. It is set
// once, before the first Apply after New or Unmarshal.
func (s *State) SetArchive(ar Archive) {
	s.archive = ar
	s.owned, _ = ar.(OwnerArchive)
}

// retired reports whether a is retired: closed (or never started) and
// named by no lease in the table. See the retirement rule above.
func (s *State) retired(a *Activation) bool {
	if a.Connection.Report == nil && (a.Refused == "" || a.Started) {
		return false
	}
	_, leased := s.leaseOf[a.ID]
	return !leased
}

// retiredOwner reports whether o is retired: ended, with no handle.
func retiredOwner(o *Owner) bool { return o.Ended && len(o.Handles) == 0 }

// RetiredOwners returns the retired request owners s holds in memory,
// sorted by id: those that changed (or retired) since the last Evict,
// which a snapshot stores with MarshalOwner. The owners are the state's
// own: encode them, do not keep or modify them.
func (s *State) RetiredOwners() []*Owner {
	var out []*Owner
	for _, o := range s.owners {
		if retiredOwner(o) {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// OwnersInMemory returns the number of request owners s holds in memory.
func (s *State) OwnersInMemory() int { return len(s.owners) }

// touch records that activation id changed (or became retired) at seq, so
// that Evict keeps it in memory until a snapshot covering seq is stored.
func (s *State) touch(id string, seq uint64) {
	if a := s.activations[id]; a != nil {
		a.changedSeq = seq
	}
}

// Retired returns the retired activations s holds in memory, sorted by id:
// exactly those that changed (or retired) since the last Evict, which a
// snapshot stores with MarshalActivation. Unchanged retired activations
// are never among them: Evict dropped them. The activations are the
// state's own: encode them, do not keep or modify them.
func (s *State) Retired() []*Activation {
	var out []*Activation
	for _, a := range s.activations {
		if s.retired(a) {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Evict drops from memory every retired activation and retired owner
// whose last change is at or before upTo: the caller has stored a snapshot
// covering upTo that holds each of them (MarshalActivation, MarshalOwner,
// readable through the Archive). It returns the number of activations
// dropped; a State without an Archive drops nothing.
func (s *State) Evict(upTo uint64) int {
	if s.archive == nil {
		return 0
	}
	n := 0
	for id, a := range s.activations {
		if a.changedSeq <= upTo && s.retired(a) {
			delete(s.activations, id)
			if s.lastAct == a {
				s.lastAct = nil
			}
			n++
		}
	}
	for id, o := range s.owners {
		if s.owned != nil && o.changedSeq <= upTo && retiredOwner(o) {
			delete(s.owners, id)
		}
	}
	return n
}

// Drop drops retired activation id from memory and reports whether it
// did (false: not in memory, or not retired). The caller guarantees that
// no later event names it, or that the Archive holds it; a State without
// an Archive drops nothing. A reader that folds a whole log (`leaseledger
// audit --all`) drops each retired activation once the log has no later
// event for it: its verdict is final.
func (s *State) Drop(id string) bool {
	a := s.activations[id]
	if s.archive == nil || a == nil || !s.retired(a) {
		return false
	}
	delete(s.activations, id)
	if s.lastAct == a {
		s.lastAct = nil
	}
	return true
}

// InMemory returns the number of activations s holds in memory: every
// activation without an Archive; the live ones plus the retired ones not
// yet evicted with one.
func (s *State) InMemory() int { return len(s.activations) }

// find returns activation id from memory or, failing that, from the
// archive, without bringing it into memory (readers hold a read lock).
func (s *State) find(id string) (*Activation, bool, error) {
	if a, ok := s.activations[id]; ok {
		return a, true, nil
	}
	if s.archive == nil {
		return nil, false, nil
	}
	a, ok, err := s.archive.Load(id)
	if err != nil {
		return nil, false, fmt.Errorf("%w: activation %s: %w", ErrArchive, id, err)
	}
	return a, ok, nil
}

// resolve finds the event's activation before anything is applied: in
// memory, or brought back from the archive, so that a failing archive read
// leaves the state as it was.
func (s *State) resolve(e *event) error {
	if s.archive == nil {
		return nil
	}
	if err := s.resolveActivation(e); err != nil {
		return err
	}
	var owner string
	switch p := e.payload.(type) {
	case *events.RequestRegistered:
		owner = p.Owner
	case *events.RequestOwnerEnded:
		owner = p.Owner
	default:
		return nil
	}
	if _, ok := s.owners[owner]; ok || s.owned == nil {
		return nil
	}
	o, ok, err := s.owned.LoadOwner(owner)
	if err != nil {
		return fmt.Errorf("%w: seq %d: owner %s: %w", ErrArchive, e.seq, owner, err)
	}
	if ok {
		if o.ID != owner {
			return fmt.Errorf("%w: seq %d: archive returned owner %q for %q", ErrArchive, e.seq, o.ID, owner)
		}
		s.owners[owner] = o
	}
	return nil
}

// resolveActivation is resolve for the event's activation.
func (s *State) resolveActivation(e *event) error {
	if e.act != nil || e.activation == "" {
		return nil
	}
	if a := s.activations[e.activation]; a != nil {
		e.act = a
		return nil
	}
	a, ok, err := s.archive.Load(e.activation)
	if err != nil {
		return fmt.Errorf("%w: seq %d: activation %s: %w", ErrArchive, e.seq, e.activation, err)
	}
	if ok {
		if a.ID != e.activation {
			return fmt.Errorf("%w: seq %d: archive returned activation %q for %q", ErrArchive, e.seq, a.ID, e.activation)
		}
		s.activations[a.ID] = a
		e.act = a
	}
	return nil
}

// activationRecord is the stored form of one retired activation.
type activationRecord struct {
	Format     string          `json:"format"`
	Version    int             `json:"version"`
	ID         string          `json:"activation_id"`
	Activation *activationWire `json:"activation"`
}

// MarshalActivation serialises one activation deterministically, for an
// Archive (the same encoding as inside Marshal, with its id and the
// snapshot format and version).
func MarshalActivation(a *Activation) ([]byte, error) {
	b, err := json.Marshal(&activationRecord{Format: SnapshotFormat, Version: SnapshotVersion, ID: a.ID, Activation: wireActivation(a)})
	if err != nil {
		return nil, fmt.Errorf("projector: marshal activation %s: %w", a.ID, err)
	}
	return b, nil
}

// UnmarshalActivation restores an activation from MarshalActivation's
// output: a *FormatError for another format or version, ErrSnapshotCorrupt
// for inconsistent content.
func UnmarshalActivation(b []byte) (*Activation, error) {
	var r activationRecord
	if err := decodeSnapshot(b, &r, func() snapshotHeader { return snapshotHeader{r.Format, r.Version} }); err != nil {
		return nil, err
	}
	return restoreActivation(r.ID, r.Activation)
}

// ownerRecord is the stored form of one retired request owner.
type ownerRecord struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	ID      string `json:"owner_id"`
	Owner   *Owner `json:"owner"`
}

// MarshalOwner serialises one request owner deterministically, for an
// Archive (the same encoding as inside Marshal, with its id and the
// snapshot format and version).
func MarshalOwner(o *Owner) ([]byte, error) {
	b, err := json.Marshal(&ownerRecord{Format: SnapshotFormat, Version: SnapshotVersion, ID: o.ID, Owner: o})
	if err != nil {
		return nil, fmt.Errorf("projector: marshal owner %s: %w", o.ID, err)
	}
	return b, nil
}

// UnmarshalOwner restores a request owner from MarshalOwner's output: a
// *FormatError for another format or version, ErrSnapshotCorrupt for
// inconsistent content.
func UnmarshalOwner(b []byte) (*Owner, error) {
	var r ownerRecord
	if err := decodeSnapshot(b, &r, func() snapshotHeader { return snapshotHeader{r.Format, r.Version} }); err != nil {
		return nil, err
	}
	if r.Owner == nil || r.Owner.ID != r.ID || !retiredOwner(r.Owner) {
		return nil, fmt.Errorf("%w: owner entry %q", ErrSnapshotCorrupt, r.ID)
	}
	return r.Owner, nil
}

// MarshalLive serialises the live part of s: everything Marshal writes but
// the retired activations and owners, which a snapshot stores apart
// (Retired, MarshalActivation, RetiredOwners, MarshalOwner) or already
// holds. Its size is bounded by live state (open activations, leases, live
// owners, sessions), not by history. Unmarshal reads it; with SetArchive
// over the stored activations and owners the result is the state that
// wrote it.
func MarshalLive(s *State) ([]byte, error) { return marshal(s, true) }
