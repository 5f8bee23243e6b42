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
// This is the only package that imports both ledger and projector;
// projector itself stays pure.
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

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

	snapMu sync.Mutex       // serialises snapshots; guards shadow
	shadow *projector.State // the snapshotter's own state, see Snapshot
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}

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
	p.mu.Lock()
	err = p.restore(ctx)
	if err == nil {
		// The snapshotter's own copy (see Snapshot), taken once here.
		var data []byte
		if data, err = projector.Marshal(p.state); err == nil {
			p.shadow, err = projector.Unmarshal(data)
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
			p.state, p.stats.SnapshotSeq = st, uint64(covers)
		}
	}
	if p.stats.SnapshotIgnored != "" {
		p.logger.Warn("projector snapshot ignored; replaying the whole log", "snapshot", p.name, "reason", p.stats.SnapshotIgnored)
	}
	return p.l.Scan(ctx, ledger.Query{From: ledger.Seq(p.state.Seq() + 1)}, func(seq ledger.Seq, raw []byte) error {
		if uint64(seq) != p.state.Seq()+1 {
			return fmt.Errorf("%w: replay expected seq %d, got %d", ErrGap, p.state.Seq()+1, seq)
		}
		if err := p.state.ApplyRaw(raw); err != nil {
			return fmt.Errorf("live: replay seq %d: %w", seq, err)
		}
		p.stats.Replayed++
		return nil
	})
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

// Snapshot stores a serialisation of the state with the seq it covers.
//
// It does not serialise the live state: that would hold the state's lock,
// and with it every acknowledgement of the ledger, for the whole encoding.
// Instead the snapshotter keeps a shadow state of its own, which it brings
// up to the live seq by replaying the log (ApplyRaw over the stored bytes —
// the replay path, which the projector's property tests hold byte-identical
// to live application) and then serialises at leisure. The cost is a second
// copy of the state in memory and a second application of each event, off
// the commit path.
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
	data, err := projector.Marshal(p.shadow)
	if err != nil {
		return err
	}
	return p.l.SaveSnapshot(p.name, ledger.Seq(p.shadow.Seq()), data)
}

// Ledger returns the open ledger. Append through it: every acknowledged
// event is already reflected in the projection.
func (p *Projection) Ledger() *ledger.Ledger { return p.l }

// Stats says how Open rebuilt the state.
func (p *Projection) Stats() OpenStats { return p.stats }

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

// CloseReport returns the retained close report of activation.
func (p *Projection) CloseReport(activation string) (rep projector.CloseReport, ok bool, err error) {
	err = p.View(func(s *projector.State) { rep, ok = s.CloseReport(activation) })
	return rep, ok, err
}

// Report returns the cleanup report of activation.
func (p *Projection) Report(activation string) (rep projector.ActivationReport, ok bool, err error) {
	err = p.View(func(s *projector.State) { rep, ok = s.Report(activation) })
	return rep, ok, err
}

// Marshal returns the deterministic serialisation of the current state.
func (p *Projection) Marshal() (data []byte, err error) {
	if verr := p.View(func(s *projector.State) { data, err = projector.Marshal(s) }); verr != nil {
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
		var errs []error
		if err := p.Snapshot(); err != nil {
			errs = append(errs, fmt.Errorf("live: final snapshot: %w", err))
		}
		errs = append(errs, p.l.Close())
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
