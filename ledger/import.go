package ledger

// Mirror ledgers: a ledger written only by Import, with the events of
// another ledger stored verbatim. Guarantees, one per line (tests in
// import_test.go):
//
//   - A mirror fed a source's raws in any chunking, with any re-deliveries,
//     stores exactly what the source stores: the same event bytes, head,
//     index entries and Merkle nodes (TestImportTwin).
//   - Import acknowledges only after the fsync of the batch holding its
//     events, through the same committer, applier and syncer as Append:
//     BeforeAck and Watch observers see imported batches exactly as
//     appended ones (TestImportObservers, TestImportCrashDurability,
//     TestLiveProjectionOverMirror in projector/live).
//   - Events at seqs already stored and byte-equal to them are skipped:
//     a re-delivery is stored exactly once (TestImportTwin).
//   - A batch starting past head+1 is refused with ErrImportGap and
//     nothing of it is written (TestImportGap).
//   - A batch differing from what is stored at a stored seq, or whose first
//     new event does not chain onto the stored head, is refused whole with
//     a *ForkError (ErrForked) naming the first differing seq (TestImportFork).
//   - A batch that does not parse strictly, does not hash or does not chain
//     within itself is refused whole with ErrChainBroken (TestImportChainBroken).
//   - Append on a mirror and Import on a ledger that is not one fail with
//     ErrMirror (TestImportMirrorOnly).
//   - The mirror flag is stored in the directory at creation: a writable
//     open of a mirror without Options.Mirror, or of a non-empty ordinary
//     ledger with it, fails with ErrMirror; read-only opens work on both
//     (TestMirrorFlagPersists).

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// Errors of mirror ledgers, callers branch on them.
var (
	// ErrMirror is returned by Append on a mirror ledger, by Import on a
	// ledger that is not a mirror, and by a writable Open whose
	// Options.Mirror disagrees with the directory.
	ErrMirror = errors.New("ledger: mirror ledgers are written only by Import")
	// ErrImportGap is returned by Import for a batch whose first event is
	// past head+1: the events between are missing. Nothing is written.
	ErrImportGap = errors.New("ledger: import leaves a gap after the head")
	// ErrForked is wrapped by *ForkError: the offered events contradict the
	// stored chain (the source rewrote its history).
	ErrForked = errors.New("ledger: offered events fork the stored chain")
	// ErrChainBroken is returned by Import for an event that is malformed,
	// does not hash, or does not chain onto the one before it in the batch.
	ErrChainBroken = errors.New("ledger: offered events do not form a chain")
)

// ForkError says where an offered event contradicts the stored chain: at
// Seq the stored event hashes to Stored, the offered one to Offered. When
// the first new event's prev does not match the stored head, Seq is the
// head's seq, Stored its hash and Offered that prev.
type ForkError struct {
	Seq     events.Seq
	Stored  events.Hash
	Offered events.Hash
}

// Error names the seq and both hashes.
func (e *ForkError) Error() string {
	return fmt.Sprintf("%v: at seq %d stored hash %s, offered %s", ErrForked, e.Seq, e.Stored, e.Offered)
}

// Unwrap returns ErrForked.
func (e *ForkError) Unwrap() error { return ErrForked }

// IsMirror reports whether the ledger is a mirror (its directory carries
// the mirror flag).
func (l *Ledger) IsMirror() bool { return l.mirror }

// Import stores raws, consecutive events exactly as another ledger's
// GetRaw, replay or bus returns them, verbatim in a mirror ledger, and
// returns the durable head once they are fsynced. Each event is decoded
// strictly and its hash recomputed, and the batch must chain onto the
// stored head; events already stored are skipped when byte-equal. See the
// file's guarantees for the errors, all in an *Error with Op "import".
// As for Append, a context error before the batch is queued means nothing
// was written, and after it ErrUnacknowledged means in doubt: importing the
// same raws again is then safe (what was stored is skipped).
func (l *Ledger) Import(ctx context.Context, raws [][]byte) (Head, error) {
	if !l.mirror {
		return Head{}, &Error{Op: "import", Err: ErrMirror}
	}
	if len(raws) == 0 {
		return l.Head(), nil
	}
	if len(raws) > MaxAppendEvents {
		return Head{}, &Error{Op: "import", Err: fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ErrTooManyEvents, len(raws), MaxAppendEvents)}
	}
	recs, err := l.checkImport(raws)
	if err != nil {
		return Head{}, err
	}
	req := &appendReq{imported: recs, done: make(chan struct{})}
	if err := l.enqueue(ctx, req); err != nil {
		return Head{}, &Error{Op: "import", Err: err}
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		return Head{}, &Error{Op: "import", Err: fmt.Errorf("%w: %w", ErrUnacknowledged, ctx.Err())}
	}
	if req.err != nil {
		var fe *ForkError
		seq := Seq(0)
		if errors.As(req.err, &fe) {
			seq = fe.Seq
		}
		return Head{}, &Error{Op: "import", Seq: seq, Err: req.err}
	}
	return l.Head(), nil
}

// checkImport decodes every raw strictly and recomputes its hash
// (events.Decoder.DecodeSealed, which reads the canonical layout so that
// the ledger does not) and checks that the batch is one contiguous chain. The records hold
// copies of raws: the caller may reuse its buffers once Import returns.
func (l *Ledger) checkImport(raws [][]byte) ([]Record, error) {
	d, _ := l.decoders.Get().(*events.Decoder)
	if d == nil {
		d = new(events.Decoder)
	}
	defer l.decoders.Put(d)
	recs := make([]Record, len(raws))
	for i, raw := range raws {
		raw = bytes.Clone(raw)
		env, err := d.DecodeSealed(raw)
		if err != nil {
			seq, _ := events.PeekSeq(raw)
			return nil, &Error{Op: "import", Seq: seq, Err: fmt.Errorf("%w: event %d of %d: %w", ErrChainBroken, i, len(raws), err)}
		}
		if env.Seq == 1 && env.Prev != (events.Hash{}) {
			return nil, &Error{Op: "import", Seq: 1, Err: fmt.Errorf("%w: the first event's prev is not the zero hash", ErrChainBroken)}
		}
		if i > 0 {
			before := &recs[i-1].Env
			if env.Seq != before.Seq+1 {
				return nil, &Error{Op: "import", Seq: env.Seq, Err: fmt.Errorf("%w: seq %d follows seq %d in the batch", ErrChainBroken, env.Seq, before.Seq)}
			}
			if env.Prev != before.Hash {
				return nil, &Error{Op: "import", Seq: env.Seq, Err: fmt.Errorf("%w: prev is not the hash of seq %d", ErrChainBroken, before.Seq)}
			}
		}
		recs[i] = Record{Env: env, Raw: raw}
	}
	return recs, nil
}

// addImport (committer only) checks r's events against the sealed chain
// and writes the new ones verbatim into the open batch, as add does for
// sealed ones: same keys, same Merkle nodes, same records for observers.
// Its checks are against the tail, not the durable head, so that imports
// queued back to back chain onto each other before either is fsynced.
func (l *Ledger) addImport(c *committerLocal, open *pending, r *appendReq) *pending {
	recs := r.imported
	first, last := recs[0].Env.Seq, recs[len(recs)-1].Env.Seq
	if first > l.tail.Seq+1 {
		r.err = fmt.Errorf("%w: first offered seq %d, head %d", ErrImportGap, first, l.tail.Seq)
		close(r.done)
		return open
	}
	skip := 0
	if first <= l.tail.Seq {
		// The batch chains within itself (checkImport), so when its last
		// overlapping event is byte-equal to the stored one, every earlier
		// one is too: its prev is the hash of the one before, on both sides.
		k := min(last, l.tail.Seq)
		stored, err := l.sealedRaw(c, open, k)
		if err == nil && !bytes.Equal(stored, recs[k-first].Raw) {
			err = l.forkAt(c, open, recs, k)
		}
		if err != nil {
			r.err = err
			close(r.done)
			return open
		}
		skip = int(k - first + 1)
	} else if recs[0].Env.Prev != l.tail.Hash {
		r.err = &ForkError{Seq: l.tail.Seq, Stored: l.tail.Hash, Offered: recs[0].Env.Prev}
		close(r.done)
		return open
	}
	fresh := recs[skip:]
	if len(fresh) == 0 {
		// A re-delivery only: answer once what it names is acknowledged,
		// like a keyed retry (add).
		if last <= Seq(l.acked.Load()) {
			close(r.done)
			return open
		}
		if open == nil {
			open = l.newPending(c)
		}
		open.reqs = append(open.reqs, r)
		open.head = l.tail
		return open
	}
	if open != nil && open.events+len(fresh) > l.opts.MaxBatchEvents {
		l.awaitFlush(c)
		l.flush(c, open)
		open = nil
	}
	if open == nil {
		open = l.newPending(c)
	}
	if open.batch == nil {
		open.batch = l.db.NewBatchWithSize(batchPrealloc(c.batchBytes))
	}
	open.reqs = append(open.reqs, r)
	open.events += len(fresh)
	for i := range fresh {
		rec := fresh[i]
		l.treeAppend(open.batch, rec.Raw)
		open.records = append(open.records, rec)
		open.keyBuf = setEvent(open.batch, open.keyBuf, &c.index, &rec.Env, rec.Raw)
		l.tail = Head{Seq: rec.Env.Seq, Hash: rec.Env.Hash}
		if rec.Env.Time.After(l.lastT) {
			l.lastT = rec.Env.Time
		}
	}
	open.head = l.tail
	l.opts.hooks.call(hookSealed)
	return open
}

// forkAt finds the first offered event in recs, up to seq k, that differs
// from the stored one (k's does) and returns its *ForkError.
func (l *Ledger) forkAt(c *committerLocal, open *pending, recs []Record, k Seq) error {
	first := recs[0].Env.Seq
	for s := first; s <= k; s++ {
		stored, err := l.sealedRaw(c, open, s)
		if err != nil {
			return err
		}
		offered := &recs[s-first]
		if bytes.Equal(stored, offered.Raw) {
			continue
		}
		fe := &ForkError{Seq: s, Offered: offered.Env.Hash}
		if env, err := events.Decode(stored); err == nil {
			fe.Stored = env.Hash
		}
		return fe
	}
	return fmt.Errorf("%w: seq %d differs but no earlier one does", ErrCorrupt, k)
}

// sealedRaw (committer only) returns the bytes sealed at seq <= tail:
// from Pebble when durable, else from the open batch or one of the batches
// flushed and not yet durable (c.flushed). At most inflightBatches batches
// are past the committer with their fsync not yet observed, and the syncer
// publishes a batch's head before it returns its token, so a seq past the
// durable head read here is in the open batch or in one of the last
// inflightBatches flushed, which keepFlushed keeps.
func (l *Ledger) sealedRaw(c *committerLocal, open *pending, seq Seq) ([]byte, error) {
	if seq <= l.Head().Seq {
		v, closer, err := l.db.Get(keys.Event(seq))
		if err != nil {
			if errors.Is(err, pebble.ErrNotFound) {
				err = fmt.Errorf("%w: seq %d is missing below the head", ErrCorrupt, seq)
			}
			return nil, fmt.Errorf("read the stored event: %w", err)
		}
		defer closer.Close()
		return bytes.Clone(v), nil
	}
	if raw, ok := c.sealedInFlight(seq); ok {
		return raw, nil
	}
	if recs := recordsOf(open); len(recs) > 0 && recs[0].Env.Seq <= seq && seq <= lastSeq(recs) {
		return recs[seq-recs[0].Env.Seq].Raw, nil
	}
	return nil, fmt.Errorf("%w: sealed seq %d is neither durable nor in flight", ErrCorrupt, seq)
}

func recordsOf(p *pending) []Record {
	if p == nil {
		return nil
	}
	return p.records
}

// openMirror checks Options.Mirror against the directory's mirror flag
// (keys.Mirror) and writes the flag when a mirror is created.
func (l *Ledger) openMirror(head Head) error {
	v, closer, err := l.db.Get([]byte(keys.Mirror))
	present := err == nil
	switch {
	case present:
		closer.Close()
		_ = v
	case !errors.Is(err, pebble.ErrNotFound):
		return l.readErr("open", 0, 0, fmt.Errorf("read m/mirror: %w", err))
	}
	switch {
	case l.opts.ReadOnly:
		l.mirror = present
	case present && !l.opts.Mirror:
		return &Error{Op: "open", Err: fmt.Errorf("%w: %s is a mirror ledger (a copy of another ledger's chain, Options.Mirror): only read-only opens may use it", ErrMirror, l.opts.Dir)}
	case !present && l.opts.Mirror && head.Seq > 0:
		return &Error{Op: "open", Err: fmt.Errorf("%w: %s holds a ledger that is not a mirror", ErrMirror, l.opts.Dir)}
	case !present && l.opts.Mirror:
		if err := l.db.Set([]byte(keys.Mirror), []byte("1"), pebble.Sync); err != nil {
			return &Error{Op: "open", Err: fmt.Errorf("write m/mirror: %w", err)}
		}
		l.mirror = true
	default:
		l.mirror = present
	}
	return nil
}
