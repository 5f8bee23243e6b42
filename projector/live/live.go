// Package live is the glue between the ledger and the projector: it opens
// a ledger with the projection as its BeforeAck observer (so that a
// caller's own events are reflected in the reports once Append returns),
// loads the newest projector snapshot, replays the tail of the log, saves
// snapshots periodically (every Options.SnapshotEvery events, in a
// background goroutine) and on Close.
//
// No event can be appended before the tail replay is done: Open returns
// the ledger (through Projection.Ledger) only after it. The runtime reads
// its reports through Projection's accessors, which take a read lock on
// the state the ledger's committer updates.
//
// Memory is bounded by live state, not history: a snapshot stores the live
// part of the state (projector.MarshalLive) as its header and, in the same
// synced batch, one part per retired activation (p/<name>/a.<activation>,
// with its verdict record under u. or v.) and per retired request owner
// (p/<name>/o.<owner>) that changed since the previous snapshot, and the
// stored verdict counts (s.stored); once it is durable those leave memory
// and are read back from their parts (projector.OwnerArchive) when an event
// or a reader needs them. A retired activation that did not change is
// never encoded again. A part of any size is stored (the ledger splits it
// into chunks): one large activation never stops snapshots.
// Summarize costs the live state plus what it lists.
//
// This is the only package that imports both ledger and projector;
// projector itself stays pure.
package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// Defaults.
const (
	// DefaultSnapshotName is the snapshot's name under the ledger's p/ keys.
	DefaultSnapshotName = "projector"
	// DefaultSnapshotEvery is the number of applied events between
	// periodic snapshots.
	DefaultSnapshotEvery = 100_000
)

// ErrGap is recorded when the ledger hands the projection a batch that
// does not continue its seq (a bug: the projection then refuses reads
// rather than serve a report that skipped events).
var ErrGap = errors.New("live: projection missed events")

// Options configures Open.
type Options struct {
	// Ledger is passed to ledger.Open. If Ledger.BeforeAck is set it is
	// called after the projection has applied each batch.
	Ledger ledger.Options
	// SnapshotName names the snapshot; DefaultSnapshotName when empty.
	SnapshotName string
	// SnapshotEvery is the number of events between periodic snapshots;
	// DefaultSnapshotEvery when zero, never when negative.
	SnapshotEvery int
	// Logger receives snapshot failures; slog.Default when nil.
	Logger *slog.Logger
}

// OpenStats says how Open rebuilt the state.
type OpenStats struct {
	// SnapshotSeq is the seq the loaded snapshot covered (0: none used).
	SnapshotSeq uint64
	// SnapshotIgnored says why a stored snapshot was not used (older
	// format, corrupt); empty when one was used or none existed.
	SnapshotIgnored string
	// Replayed is the number of tail events replayed from the log.
	Replayed uint64
	// Snapshots is the number of snapshots Open stored while replaying a
	// long tail (every SnapshotEvery events), so that retired activations
	// leave memory during the replay too.
	Snapshots uint64
}

// Projection is an open ledger with its live projection.
type Projection struct {
	l      *ledger.Ledger
	name   string
	every  uint64
	logger *slog.Logger
	next   ledger.Observer
	stats  OpenStats

	mu        sync.RWMutex
	state     *projector.State
	err       error
	sinceSnap uint64

	snapMu sync.Mutex       // serialises snapshots; guards shadow and reset
	shadow *projector.State // the snapshotter's own state, see Snapshot
	// reset: the stored parts do not belong to the state (no usable
	// snapshot was loaded); the next snapshot deletes them all, and until
	// it is durable the archive reads nothing.
	reset   bool
	archive *archive
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	encoded atomic.Uint64 // retired activations encoded by snapshots

	// afterStore, when set (by tests only), runs in Snapshot between the
	// durable batch and the live state's eviction: events appended there
	// are after the covered seq.
	afterStore func()

	closeOnce sync.Once
	closeErr  error
}

// observer is what the ledger calls; it forwards to the projection.
type observer struct{ p *Projection }

func (o observer) Committed(batch []ledger.Record) { o.p.committed(batch) }

// Open opens the ledger in opts.Ledger.Dir, restores the projection from
// the newest usable snapshot plus the tail of the log (or from the whole
// log), starts the snapshot goroutine and returns. Only then is the ledger
// available for appends.
func Open(ctx context.Context, opts Options) (*Projection, error) {
	p := &Projection{name: opts.SnapshotName, logger: opts.Logger, next: opts.Ledger.BeforeAck,
		state: projector.New(), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if p.name == "" {
		p.name = DefaultSnapshotName
	}
	switch {
	case opts.SnapshotEvery == 0:
		p.every = DefaultSnapshotEvery
	case opts.SnapshotEvery > 0:
		p.every = uint64(opts.SnapshotEvery)
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	lopts := opts.Ledger
	lopts.BeforeAck = observer{p}
	l, err := ledger.Open(lopts)
	if err != nil {
		return nil, err
	}
	p.l = l
	p.archive = &archive{l: l, name: p.name}
	p.state.SetArchive(p.archive)
	p.mu.Lock()
	err = p.restore(ctx)
	if err == nil {
		// The snapshotter's own copy (see Snapshot), taken once here.
		var data []byte
		if data, err = projector.Marshal(p.state); err == nil {
			if p.shadow, err = projector.Unmarshal(data); err == nil {
				p.shadow.SetArchive(p.archive)
			}
		}
	}
	p.mu.Unlock()
	if err != nil {
		l.Close()
		return nil, err
	}
	go p.snapshotter()
	return p, nil
}

// restore loads the snapshot and replays the tail; p.mu is held.
func (p *Projection) restore(ctx context.Context) error {
	covers, data, err := p.l.LoadSnapshot(p.name)
	switch {
	case errors.Is(err, ledger.ErrNoSnapshot):
	case err != nil:
		p.stats.SnapshotIgnored = err.Error()
	default:
		st, uerr := projector.Unmarshal(data)
		switch {
		case uerr != nil:
			p.stats.SnapshotIgnored = uerr.Error()
		case st.Seq() != uint64(covers):
			p.stats.SnapshotIgnored = fmt.Sprintf("snapshot state is at seq %d but claims to cover %d", st.Seq(), covers)
		default:
			st.SetArchive(p.archive)
			p.state, p.stats.SnapshotSeq = st, uint64(covers)
		}
	}
	if p.stats.SnapshotIgnored != "" {
		p.logger.Warn("projector snapshot ignored; replaying the whole log", "snapshot", p.name, "reason", p.stats.SnapshotIgnored)
	}
	if p.stats.SnapshotSeq == 0 {
		// Parts of an ignored (or absent) header may remain: never read
		// them, and delete them with the next snapshot.
		p.reset = true
		p.archive.off.Store(true)
	}
	var since uint64
	err = p.l.Scan(ctx, ledger.Query{From: ledger.Seq(p.state.Seq() + 1)}, func(seq ledger.Seq, raw []byte) error {
		if uint64(seq) != p.state.Seq()+1 {
			return fmt.Errorf("%w: replay expected seq %d, got %d", ErrGap, p.state.Seq()+1, seq)
		}
		if err := p.state.ApplyRaw(raw); err != nil {
			return fmt.Errorf("live: replay seq %d: %w", seq, err)
		}
		p.stats.Replayed++
		if since++; p.every > 0 && since >= p.every {
			// Nothing else runs yet: store the replayed state itself, so
			// that a long tail (a whole log) does not hold every retired
			// activation in memory.
			since = 0
			if err := p.store(p.state); err != nil {
				p.logger.Warn("projector snapshot during replay failed", "err", err)
			} else {
				p.state.Evict(p.state.Seq())
				p.stats.Snapshots++
			}
		}
		return nil
	})
	return err
}

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

func (p *Projection) committed(batch []ledger.Record) {
	p.mu.Lock()
	for i := range batch {
		env := &batch[i].Env
		if p.err != nil || uint64(env.Seq) <= p.state.Seq() {
			continue
		}
		if uint64(env.Seq) != p.state.Seq()+1 {
			p.err = fmt.Errorf("%w: expected seq %d, got %d", ErrGap, p.state.Seq()+1, env.Seq)
			continue
		}
		if err := p.state.Apply(env); err != nil {
			p.err = fmt.Errorf("live: apply seq %d: %w", env.Seq, err)
			continue
		}
		p.sinceSnap++
	}
	if p.every > 0 && p.sinceSnap >= p.every {
		p.sinceSnap = 0
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
	if p.next != nil {
		p.next.Committed(batch)
	}
}

func (p *Projection) snapshotter() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
			if err := p.Snapshot(); err != nil {
				p.logger.Warn("projector snapshot failed", "err", err)
			}
		}
	}
}

// Snapshot stores a snapshot of the state with the seq it covers: the
// live part as header and every retired activation changed since the
// previous snapshot as a part, in one synced batch (see the package
// documentation); then the retired activations it covers leave memory.
//
// It does not serialise the live state: that would hold the state's lock,
// and with it every acknowledgement of the ledger, for the whole encoding.
// Instead the snapshotter keeps a shadow state of its own, which it brings
// up to the live seq by replaying the log (ApplyRaw over the stored bytes —
// the replay path, which the projector's property tests hold byte-identical
// to live application) and then serialises at leisure. The cost is a second
// copy of the live part in memory (bounded by live state, as the live one)
// and a second application of each event, off the commit path; the live
// state's lock is taken only to read its seq and, after the batch is
// durable, to evict what the snapshot covers.
func (p *Projection) Snapshot() error {
	p.snapMu.Lock()
	defer p.snapMu.Unlock()
	p.mu.RLock()
	err, target := p.err, p.state.Seq()
	p.mu.RUnlock()
	if err != nil {
		return err
	}
	if p.shadow == nil {
		return errors.New("live: no shadow state")
	}
	err = p.l.Scan(context.Background(), ledger.Query{From: ledger.Seq(p.shadow.Seq() + 1), To: ledger.Seq(target)},
		func(seq ledger.Seq, raw []byte) error {
			if uint64(seq) != p.shadow.Seq()+1 {
				return fmt.Errorf("%w: shadow replay expected seq %d, got %d", ErrGap, p.shadow.Seq()+1, seq)
			}
			return p.shadow.ApplyRaw(raw)
		})
	if err != nil {
		return fmt.Errorf("live: snapshot replay: %w", err)
	}
	if err := p.store(p.shadow); err != nil {
		return err
	}
	covered := p.shadow.Seq()
	p.shadow.Evict(covered)
	if p.afterStore != nil {
		p.afterStore()
	}
	// A retired activation whose last change is covered is now stored with
	// exactly the live state's content (it had no event since, and became
	// retired no later): the live state reads it back from there.
	p.mu.Lock()
	p.state.Evict(covered)
	p.mu.Unlock()
	return nil
}

// Ledger returns the open ledger. Append through it: every acknowledged
// event is already reflected in the projection.
func (p *Projection) Ledger() *ledger.Ledger { return p.l }

// Stats says how Open rebuilt the state.
func (p *Projection) Stats() OpenStats { return p.stats }

// MemoryStats says what the projection holds in memory.
type MemoryStats struct {
	// Activations in the live state's memory: live ones and retired ones
	// not yet covered by a stored snapshot.
	Activations int
	// Shadow is the same count for the snapshotter's shadow state.
	Shadow int
	// Encoded counts the retired activations snapshots have encoded since
	// Open (each once per change).
	Encoded uint64
	// Owners counts the request owners in the live state's memory: live
	// ones and ended ones not yet covered by a stored snapshot.
	Owners int
}

// Memory says what the projection holds in memory.
func (p *Projection) Memory() MemoryStats {
	p.snapMu.Lock()
	shadow := 0
	if p.shadow != nil {
		shadow = p.shadow.InMemory()
	}
	p.snapMu.Unlock()
	p.mu.RLock()
	defer p.mu.RUnlock()
	return MemoryStats{Activations: p.state.InMemory(), Shadow: shadow, Encoded: p.encoded.Load(), Owners: p.state.OwnersInMemory()}
}

// Err returns the projection's failure, if any; after one, reads fail.
func (p *Projection) Err() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.err
}

// View calls fn with the state under the read lock. fn must not retain
// the state or anything reachable from it, and must not append.
func (p *Projection) View(fn func(*projector.State)) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.err != nil {
		return p.err
	}
	fn(p.state)
	return nil
}

// CloseReport returns the retained close report of activation, read from
// its stored part (not the log) when it is retired.
func (p *Projection) CloseReport(activation string) (rep projector.CloseReport, ok bool, err error) {
	if verr := p.View(func(s *projector.State) { rep, ok, err = s.LoadCloseReport(activation) }); verr != nil {
		return rep, false, verr
	}
	return rep, ok, err
}

// Report returns the cleanup report of activation, read from its stored
// part (not the log) when it is retired.
func (p *Projection) Report(activation string) (rep projector.ActivationReport, ok bool, err error) {
	if verr := p.View(func(s *projector.State) { rep, ok, err = s.LoadReport(activation) }); verr != nil {
		return rep, false, verr
	}
	return rep, ok, err
}

// Summarize summarises every activation, as audit.Summarize does for a
// full replay, at a cost bounded by the live state plus the activations it
// lists: the activations in memory are read under the read lock (which
// appends wait on); the retired ones stored as parts are counted from the
// verdict index written with them (storedStats, minus the stored records
// of the activations in memory, which count as they are in memory) and
// only the listed unconfirmed ones are read (u.<id>), from one view of the
// store opened after the memory read. Each activation counts once: as it
// was in memory at that read, or as stored then or later (an activation
// leaves memory only once its part is durable; an event after the memory
// read may change a stored one before the view opens, so the summary is
// not one instant's when appends run meanwhile).
func (p *Projection) Summarize(ctx context.Context, limit int) (audit.Summary, error) {
	if limit == 0 {
		limit = audit.DefaultUnconfirmed
	}
	var mem []audit.Unconfirmed // unconfirmed activations in memory, by id
	var ids []string
	sum := audit.Summary{Verdicts: map[string]int{projector.ResultConfirmed: 0, projector.ResultUnconfirmed: 0, projector.ResultNeverStarted: 0},
		Unconfirmed: []audit.Unconfirmed{}}
	err := p.View(func(s *projector.State) {
		sum.Events, sum.Anomalies = s.Applied(), s.Anomalies()
		ids = s.ActivationIDs()
		for _, id := range ids {
			verdict, reasons, omitted := s.Verdict(id)
			sum.Activations++
			sum.Verdicts[verdict]++
			if verdict != projector.ResultUnconfirmed {
				continue
			}
			_, closed := s.CloseReport(id)
			if !closed {
				sum.NotClosed++
			}
			if reasons == nil {
				reasons = []string{}
			}
			mem = append(mem, audit.Unconfirmed{Activation: id, Closed: closed, Reasons: reasons, ReasonsOmitted: omitted})
		}
	})
	if err != nil {
		return audit.Summary{}, err
	}
	unconfirmed := len(mem)
	var stored []audit.Unconfirmed // the first listed stored unconfirmed ones
	if !p.archive.off.Load() {
		v, err := p.l.ViewSnapshotParts(p.name)
		if err != nil {
			return audit.Summary{}, err
		}
		defer v.Close()
		load := func(_, key string) ([]byte, bool, error) { return v.Load(key) }
		var st storedStats
		if err := p.loadStats(load, &st); err != nil {
			return audit.Summary{}, err
		}
		inMem := make(map[string]bool, len(ids))
		for _, id := range ids {
			inMem[id] = true
			rec, _, ok, err := p.loadVerdict(load, id)
			if err != nil {
				return audit.Summary{}, err
			}
			if ok {
				st.add(rec, -1)
			}
		}
		sum.Activations += st.Activations
		for k, n := range st.Verdicts {
			sum.Verdicts[k] += n
		}
		sum.NotClosed += st.NotClosed
		unconfirmed += st.Verdicts[projector.ResultUnconfirmed]
		// The merged list needs at most limit stored entries.
		err = v.Scan(ctx, unconfirmedPrefix, func(key string, b []byte) error {
			id := key[len(unconfirmedPrefix):]
			if inMem[id] {
				return nil
			}
			if limit > 0 && len(stored) >= limit {
				return errListed
			}
			var r verdictRecord
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("live: verdict index %s: %w: %v", key, projector.ErrSnapshotCorrupt, err)
			}
			if r.Reasons == nil {
				r.Reasons = []string{}
			}
			stored = append(stored, audit.Unconfirmed{Activation: id, Closed: r.Closed, Reasons: r.Reasons, ReasonsOmitted: r.Omitted})
			return nil
		})
		if err != nil && !errors.Is(err, errListed) {
			return audit.Summary{}, err
		}
	}
	for len(mem)+len(stored) > 0 && (limit < 0 || len(sum.Unconfirmed) < limit) {
		if len(stored) == 0 || (len(mem) > 0 && mem[0].Activation < stored[0].Activation) {
			sum.Unconfirmed, mem = append(sum.Unconfirmed, mem[0]), mem[1:]
		} else {
			sum.Unconfirmed, stored = append(sum.Unconfirmed, stored[0]), stored[1:]
		}
	}
	sum.Omitted = unconfirmed - len(sum.Unconfirmed)
	return sum, nil
}

// errListed stops the scan of the stored unconfirmed activations once
// Summarize has listed enough.
var errListed = errors.New("live: listed enough")

// Marshal returns the deterministic serialisation of the live part of the
// current state (projector.MarshalLive): what a full replay's MarshalLive
// gives at the same seq.
func (p *Projection) Marshal() (data []byte, err error) {
	if verr := p.View(func(s *projector.State) { data, err = projector.MarshalLive(s) }); verr != nil {
		return nil, verr
	}
	return data, err
}

// Close stops the snapshot goroutine, saves a final snapshot and closes
// the ledger. Events committed while the ledger drains its queue are not
// in that snapshot; the next Open replays them from the log. Close is
// idempotent.
func (p *Projection) Close() error {
	p.closeOnce.Do(func() {
		close(p.stop)
		<-p.done
		if err := p.Err(); err != nil {
			// The final snapshot is refused below; say why here too, as
			// a caller may only log Close's error at a lower level.
			p.logger.Error("projection failed; no final snapshot", "snapshot", p.name, "err", err)
		}
		var errs []error
		if err := p.Snapshot(); err != nil {
			errs = append(errs, fmt.Errorf("live: final snapshot: %w", err))
		}
		errs = append(errs, p.l.Close())
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
