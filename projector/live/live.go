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
// projector itself stays pure. Besides the live projection it holds the
// other two places where the log meets the reducer: crash recovery at a
// host's start (Recover, under the host's Ownership) and the streaming
// folds of a whole log for readers that print and exit (Stream).
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
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

	snapMu sync.Mutex       // serialises snapshots; guards shadow, seed and reset
	shadow *projector.State // the snapshotter's own state, see Snapshot
	// seed, while shadow is nil, is the stored snapshot header Open
	// restored from, nothing having been stored since: the first Snapshot
	// builds the shadow from it (shadowState) rather than Open from the
	// restored state, which kept a copy's encoding and decoding on every
	// start-up's path to listening.
	seed []byte
	// stored says a snapshot of this projection is stored, covering
	// storedSeq: loaded by Open or stored since (p.snapMu held, or Open).
	stored    bool
	storedSeq uint64
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
	if err == nil && p.seed == nil {
		// The snapshotter's own copy (see Snapshot), taken once here
		// when no stored header equals the restored state's origin (no
		// snapshot, or replay stored newer ones; otherwise the first
		// Snapshot builds it from p.seed).
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
			p.state, p.stats.SnapshotSeq, p.seed = st, uint64(covers), data
			p.stored, p.storedSeq = true, uint64(covers)
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
	// ScanAhead: the log is read (and each event copied) on a goroutine of
	// its own while this one applies, the two halves of a replay's cost.
	err = p.l.ScanAhead(ctx, ledger.Query{From: ledger.Seq(p.state.Seq() + 1)}, func(seq ledger.Seq, raw []byte) error {
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
				p.seed = nil // the stored header is this state's now
			}
		}
		return nil
	})
	return err
}

// committed applies a committed batch (BeforeAck). An event appended from
// a draft comes with its payload (ledger.Record.Payload), applied as it is
// (projector.State.ApplyPayload) rather than decoded again from the
// envelope; the others (imported, host binding, prepared) are decoded.
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
		var err error
		if pl := batch[i].Payload; pl != nil {
			err = p.state.ApplyPayload(env, pl)
		} else {
			err = p.state.Apply(env)
		}
		if err != nil {
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
// When the stored snapshot already covers the live seq it stores nothing.
//
// It does not serialise the live state: that would hold the state's lock,
// and with it every acknowledgement of the ledger, for the whole encoding.
// Instead the snapshotter keeps a shadow state of its own (made by Open, or
// after a start from a stored snapshot by the first Snapshot, from that
// snapshot's header), which it brings up to the live seq by replaying the log (ApplyRaw over the stored bytes —
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
	if p.stored && target == p.storedSeq {
		// Nothing was applied since the stored snapshot: storing it
		// again (a clean stop of a serve that appended nothing) would
		// only leave a write-ahead log record that the next start must
		// replay and flush before it can serve.
		return nil
	}
	if err := p.shadowState(); err != nil {
		return err
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

// shadowState makes sure the snapshotter's shadow exists (p.snapMu held):
// built from p.seed, the stored header Open restored from, it stands at that
// header's seq with the stored parts that go with it (no snapshot was
// stored since), so Snapshot's replay of the log from there brings it to
// the live seq as Open's replay brought the live state.
func (p *Projection) shadowState() error {
	if p.shadow != nil {
		return nil
	}
	if p.seed == nil {
		return errors.New("live: no shadow state")
	}
	st, err := projector.Unmarshal(p.seed)
	if err != nil {
		return fmt.Errorf("live: shadow from the stored snapshot: %w", err)
	}
	st.SetArchive(p.archive)
	p.shadow, p.seed = st, nil
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

// Marshal returns the deterministic serialisation of the live part of the
// current state (projector.MarshalLive): what a full replay's MarshalLive
// gives at the same seq.
func (p *Projection) Marshal() (data []byte, err error) {
	if verr := p.View(func(s *projector.State) { data, err = projector.MarshalLive(s) }); verr != nil {
		return nil, verr
	}
	return data, err
}

// Close stops the snapshot goroutine, saves a final snapshot (unless the
// stored one already covers every applied event) and closes the ledger. Events committed while the ledger drains its queue are not
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
