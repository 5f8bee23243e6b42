package live

// The stored side of the projection: a snapshot's parts (retired
// activations and owners), the verdict index beside them, and the archive
// through which the state reads them back.

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
)

// store durably saves a snapshot of s (which must not change meanwhile):
// its live part and its retired activations in memory, in one batch.
// p.snapMu is held, or Open runs alone.
func (p *Projection) store(s *projector.State) error {
	header, err := projector.MarshalLive(s)
	if err != nil {
		return err
	}
	retired, owners := s.Retired(), s.RetiredOwners()
	parts := make([]ledger.SnapshotPart, 0, 2*len(retired)+len(owners)+1)
	stats := storedStats{}
	if !p.reset { // reset: the batch deletes every stored part first
		if err := p.loadStats(p.l.LoadSnapshotPart, &stats); err != nil {
			return err
		}
	}
	for _, a := range retired {
		b, err := projector.MarshalActivation(a)
		if err != nil {
			return err
		}
		parts = append(parts, ledger.SnapshotPart{Key: activationKey(a.ID), Value: b})
		// The verdict index: the old record's counts leave the stats, the
		// new one's enter, and a record that changes prefix is moved.
		rec := newVerdictRecord(a)
		if !p.reset {
			old, oldKey, ok, err := p.loadVerdict(p.l.LoadSnapshotPart, a.ID)
			if err != nil {
				return err
			}
			if ok {
				stats.add(old, -1)
				if oldKey != rec.key(a.ID) {
					parts = append(parts, ledger.SnapshotPart{Key: oldKey})
				}
			}
		}
		stats.add(rec, 1)
		rb, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("live: verdict index of %s: %w", a.ID, err)
		}
		parts = append(parts, ledger.SnapshotPart{Key: rec.key(a.ID), Value: rb})
	}
	sb, err := json.Marshal(&stats)
	if err != nil {
		return fmt.Errorf("live: stored stats: %w", err)
	}
	parts = append(parts, ledger.SnapshotPart{Key: statsKey, Value: sb})
	for _, o := range owners {
		b, err := projector.MarshalOwner(o)
		if err != nil {
			return err
		}
		parts = append(parts, ledger.SnapshotPart{Key: ownerKey(o.ID), Value: b})
	}
	if err := p.l.SaveSnapshotParts(p.name, ledger.Seq(s.Seq()), header, parts, p.reset); err != nil {
		return err
	}
	p.encoded.Add(uint64(len(retired)))
	p.stored, p.storedSeq = true, s.Seq()
	p.reset = false
	p.archive.off.Store(false)
	return nil
}

// Part keys: a retired activation is stored under a.<id>, a retired
// request owner under o.<id> (ledger.ValidPartKey), so that the two never
// collide and a scan reads one kind only.
const (
	activationPrefix = "a."
	ownerPrefix      = "o."
)

func activationKey(id string) string { return activationPrefix + id }

// The verdict index of the stored activations, written in the same batch
// as their parts, so that Summarize costs the live state plus what it
// lists, not one decoding per stored activation: every stored activation
// has a verdictRecord under u.<id> when unconfirmed, v.<id> otherwise,
// and the storedStats part counts them all.
const (
	unconfirmedPrefix = "u."
	verdictPrefix     = "v."
	statsKey          = "s.stored"
)

// verdictRecord is a stored activation's verdict, as Summarize needs it.
type verdictRecord struct {
	Verdict string   `json:"verdict"`
	Closed  bool     `json:"closed,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	Omitted int      `json:"reasons_omitted,omitempty"`
}

func newVerdictRecord(a *projector.Activation) verdictRecord {
	r := verdictRecord{Closed: a.Connection.Report != nil}
	r.Verdict, r.Reasons, r.Omitted = projector.RetiredVerdict(a)
	if r.Verdict != projector.ResultUnconfirmed {
		r.Reasons, r.Omitted = nil, 0 // only unconfirmed ones are listed
	}
	return r
}

func (r verdictRecord) key(id string) string {
	if r.Verdict == projector.ResultUnconfirmed {
		return unconfirmedPrefix + id
	}
	return verdictPrefix + id
}

// storedStats counts the stored activations by verdict.
type storedStats struct {
	Activations int            `json:"activations"`
	Verdicts    map[string]int `json:"verdicts"`
	NotClosed   int            `json:"not_closed"`
}

func (st *storedStats) add(r verdictRecord, sign int) {
	if st.Verdicts == nil {
		st.Verdicts = map[string]int{}
	}
	st.Activations += sign
	st.Verdicts[r.Verdict] += sign
	if r.Verdict == projector.ResultUnconfirmed && !r.Closed {
		st.NotClosed += sign
	}
}

// partLoader is LoadSnapshotPart of the ledger or of a PartsView.
type partLoader func(name, key string) ([]byte, bool, error)

// loadStats reads the stored stats (none: zero) into st.
func (p *Projection) loadStats(load partLoader, st *storedStats) error {
	b, ok, err := load(p.name, statsKey)
	if err != nil || !ok {
		return err
	}
	if err := json.Unmarshal(b, st); err != nil {
		return fmt.Errorf("live: stored stats: %w: %v", projector.ErrSnapshotCorrupt, err)
	}
	return nil
}

// loadVerdict reads the verdict record of stored activation id and the
// key it is under; false when id is not stored.
func (p *Projection) loadVerdict(load partLoader, id string) (verdictRecord, string, bool, error) {
	for _, k := range []string{unconfirmedPrefix + id, verdictPrefix + id} {
		b, ok, err := load(p.name, k)
		if err != nil {
			return verdictRecord{}, "", false, err
		}
		if ok {
			var r verdictRecord
			if err := json.Unmarshal(b, &r); err != nil {
				return verdictRecord{}, "", false, fmt.Errorf("live: verdict index %s: %w: %v", k, projector.ErrSnapshotCorrupt, err)
			}
			return r, k, true, nil
		}
	}
	return verdictRecord{}, "", false, nil
}
func ownerKey(id string) string { return ownerPrefix + id }

// archive reads retired activations and owners from the parts of the
// stored snapshot (a projector.OwnerArchive).
type archive struct {
	l    *ledger.Ledger
	name string
	off  atomic.Bool // the stored parts are not the state's (see Projection.reset)
}

// Load implements projector.Archive.
func (a *archive) Load(id string) (*projector.Activation, bool, error) {
	if a.off.Load() {
		return nil, false, nil
	}
	b, ok, err := a.l.LoadSnapshotPart(a.name, activationKey(id))
	if err != nil || !ok {
		return nil, false, err
	}
	act, err := projector.UnmarshalActivation(b)
	if err != nil {
		return nil, false, err
	}
	if act.ID != id {
		return nil, false, fmt.Errorf("%w: part %s holds activation %q", projector.ErrSnapshotCorrupt, activationKey(id), act.ID)
	}
	return act, true, nil
}

// LoadOwner implements projector.OwnerArchive.
func (a *archive) LoadOwner(id string) (*projector.Owner, bool, error) {
	if a.off.Load() {
		return nil, false, nil
	}
	b, ok, err := a.l.LoadSnapshotPart(a.name, ownerKey(id))
	if err != nil || !ok {
		return nil, false, err
	}
	o, err := projector.UnmarshalOwner(b)
	if err != nil {
		return nil, false, err
	}
	if o.ID != id {
		return nil, false, fmt.Errorf("%w: part %s holds owner %q", projector.ErrSnapshotCorrupt, ownerKey(id), o.ID)
	}
	return o, true, nil
}
