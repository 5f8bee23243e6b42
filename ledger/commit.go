package ledger

// The commit pipeline. Its invariants, one per line; every change to this
// file must keep all of them:
//
//   - Ack means durable: an Append returns its seqs only after the fsync of
//     the batch holding its events; nothing is published, observed or
//     readable through this package before that fsync either.
//   - Seqs are gapless: the committer alone assigns seqs, one after the
//     other, and a batch that fails leaves the ledger failed, never a hole.
//     On a mirror the committer assigns none: it admits an Import's events
//     only when they continue the sealed tail (seq tail+1, prev its hash;
//     addImport in import.go), and a mirror takes no Append.
//   - Calls are atomic: one Append call is sealed into one batch and is all
//     written or not at all.
//   - Failure is sticky: after Pebble refuses a commit or a sync, every later
//     append fails with ErrFailed; only reopening recovers (also with a
//     batch sealed while the failing one was in the applier:
//     TestApplyFailureWithSealedOpenBatch). Every batch not yet acknowledged
//     when the ledger fails fails too, in order, even one applied behind a
//     failed fsync (TestFailedFsyncFailsLaterBatches): it is in doubt,
//     never acknowledged.
//   - A batch's ack follows its own fsync, never only an earlier batch's,
//     also while later batches are written during that fsync
//     (TestAckAwaitsOwnFsync); batches are acknowledged in seq order.
//   - Observers see batches in seq order after fsync: BeforeAck runs, then
//     the batch is queued for the Watch observers, then its appenders are
//     woken; batch after batch.
//     A keyed retry is a batch's appender too: it is answered only once
//     BeforeAck has seen the original's events (the acknowledged head;
//     TestRetryWaitsForBeforeAck).
//   - BeforeAck gets each Append/AppendAcks draft's payload in
//     Record.Payload while its appender waits, never after it gave up, and
//     the syncer clears it before the Watch observers get the batch
//     (payload.go).
//   - No Watch observer delays an ack: the syncer only queues a batch for
//     each, bounded, dropping the oldest and telling it (observe.go).
//   - A context error before enqueueing means "not written"; after it,
//     ErrUnacknowledged means "in doubt" — but a call whose payloads
//     BeforeAck holds (durable, being applied) waits for BeforeAck and is
//     acknowledged instead (payload.go; TestQueueBackpressure).
//   - Memory is bounded: beyond the QueueLen calls waiting in the queue
//     there are only one call in the committer's hand, one open batch of at
//     most max(MaxBatchEvents, MaxAppendEvents) events (a call larger than
//     MaxBatchEvents is sealed alone, never split) preallocated to at most
//     maxBatchPrealloc bytes, inflightBatches closed batches being applied
//     or awaiting their fsync, one batch being acknowledged (the committer
//     keeps the records of the last inflightBatches batches flushed while
//     they are not durable, for Import's re-delivery check) and
//     ObserverQueueLen batches per Watch observer; a full queue blocks the
//     appender until its context ends.
//   - Close drains: everything enqueued before Close is committed (also
//     while a batch is held in the applier: TestCloseWhileApplyHeld).
//   - A keyed append is recorded (i/<key>) in the batch of its events, and
//     a retry with a remembered key is woken only once the original is
//     durable and through BeforeAck, never sealed again (idempotency.go).
//   - The Merkle node index is written in the batch of the events whose
//     nodes it holds, with m/tree (tree.go).
//   - Sealing allocates per event only what events.Seal and the Merkle
//     index do: keys are built in a reused buffer (TestSetEventKeysTwin),
//     ULIDs drawn without allocation, identical to ulid.New's
//     (TestSealIDAllocs, TestNewIDTwin), small calls' Acks cut from a slab
//     whose slots are each handed out once (TestTakeAcks), and a batch's
//     records allocated up front a quarter more than the last batch's
//     (TestRecordsPrealloc).
//
// The stages of the pipeline (committer, applier, syncer) and how batch
// N+1 is written while batch N's fsync runs are described in pipeline.go.

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/oklog/ulid/v2"
)

// maxBatchPrealloc bounds the bytes an open batch is allocated up front
// (batchPrealloc). Without it one call of MaxAppendEvents large events
// would make every following batch, however small, preallocate as much;
// a batch that outgrows it is grown by Pebble as usual.
const maxBatchPrealloc = 8 << 20

type appendReq struct {
	prepared []events.Prepared
	// payloads, when not nil, are the typed payloads of prepared (one
	// each, from the drafts AppendAcks prepared): the committer hands
	// them to BeforeAck in Record.Payload while the appender waits
	// (payloadState; payload.go).
	payloads     []events.Payload
	payloadState atomic.Int32
	acks         []Ack
	err          error
	done         chan struct{}

	key      string   // idempotency key; "" for none
	digest   [32]byte // of prepared, when keyed
	dupFirst Seq      // set by the committer for a retry of a remembered key:
	dupCount uint32   // the original's seqs, dupFirst..dupFirst+dupCount-1
	// firstSent is when a retry's first attempt was sent (Unix ns; 0: a
	// first attempt, or not said), for ErrIdempotencyExpired.
	firstSent int64

	// imported, for an Import, are the events to store verbatim (checked
	// by checkImport); prepared and the fields above are then unused.
	imported []Record
	// bind marks BindHost's host.bound: the one request whose prepared
	// events may be of a kind refused by Appendable (host.go).
	bind bool
}

// pending is a batch: open (being sealed into by the committer), closed and
// awaiting the applier or being applied, or in flight (applied, its fsync
// not yet observed by the syncer).
type pending struct {
	// batch is nil while the batch holds only retries of keyed appends
	// (nothing to write): it is allocated when the first event is sealed.
	batch     *pebble.Batch
	reqs      []*appendReq
	records   []Record
	events    int
	head      Head
	appliedAt time.Time
	applied   bool   // applied by the committer itself (hookInlineApply)
	keyBuf    []byte // scratch for the keys setEvent builds
	// err is set by applyBatch when the batch was not applied (the
	// ledger's sticky failure): the syncer fails its appenders in order.
	err error
}

// setEvent writes the sealed event env to b (raw under e/<seq>, its key
// built in buf and returned for reuse: Set copies it) and holds its index
// entries in ix, which writes them at the batch's flush (indexKeys): the
// keys of keys.For, so that sealing allocates no key (TestSetEventKeysTwin
// holds them equal to keys.For).
func setEvent(b *pebble.Batch, buf []byte, ix *indexKeys, env *events.Envelope, raw []byte) []byte {
	seq := uint64(env.Seq)
	buf = binary.BigEndian.AppendUint64(append(buf[:0], keys.PrefixEvent...), seq)
	_ = b.Set(buf, raw, nil)
	if env.Activation != "" {
		ix.add(keys.PrefixActivation, env.Activation, seq)
	}
	if env.Session != "" {
		ix.add(keys.PrefixSession, env.Session, seq)
	}
	ix.add(keys.PrefixKind, string(env.Kind), seq)
	return buf
}

// Append validates drafts, appends them as consecutive events and returns
// their seqs once they are durable. Invalid drafts are refused with an error
// wrapping events.ErrInvalid and nothing of the call is written. The
// drafts' payloads are handed to BeforeAck (Record.Payload) only while the
// call waits: once it has returned, whatever it returned, they are the
// caller's again (payload.go).
func (l *Ledger) Append(ctx context.Context, drafts ...events.Draft) ([]Seq, error) {
	acks, err := l.AppendAcks(ctx, drafts...)
	if err != nil {
		return nil, err
	}
	seqs := make([]Seq, len(acks))
	for i, a := range acks {
		seqs[i] = a.Seq
	}
	return seqs, nil
}

// AppendAcks is Append returning each event's seq, ULID and hash.
func (l *Ledger) AppendAcks(ctx context.Context, drafts ...events.Draft) ([]Ack, error) {
	if len(drafts) == 0 {
		return nil, nil
	}
	if len(drafts) > MaxAppendEvents {
		return nil, &Error{Op: "append", Err: fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ErrTooManyEvents, len(drafts), MaxAppendEvents)}
	}
	prepared := make([]events.Prepared, len(drafts))
	payloads := make([]events.Payload, len(drafts))
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, &Error{Op: "append", Err: fmt.Errorf("event %d of %d: %w", i, len(drafts), err)}
		}
		prepared[i], payloads[i] = p, d.Payload
	}
	return l.await(ctx, &appendReq{prepared: prepared, payloads: payloads, done: make(chan struct{})})
}

// await enqueues req and waits for its acknowledgement.
func (l *Ledger) await(ctx context.Context, req *appendReq) ([]Ack, error) {
	if err := l.enqueue(ctx, req); err != nil {
		return nil, &Error{Op: "append", Err: err}
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		if req.abandonPayloads() {
			return nil, &Error{Op: "append", Err: fmt.Errorf("%w: %w", ErrUnacknowledged, ctx.Err())}
		}
		// BeforeAck has this call's payloads, after its fsync: the call is
		// acknowledged as soon as BeforeAck returns them.
		<-req.done
	}
	if req.err != nil {
		return nil, &Error{Op: "append", Err: req.err}
	}
	return req.acks, nil
}

// enqueue hands req to the committer. Its error (ErrReservedKind, ErrClosed,
// the sticky failure, the context's) means req was not queued; the caller
// wraps it. Every append passes here, so this is where a kind only the
// ledger writes is refused (appendable, host.go).
func (l *Ledger) enqueue(ctx context.Context, req *appendReq) error {
	if req.imported == nil && !req.bind {
		if err := appendable(req.prepared); err != nil {
			return err
		}
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	if err := l.failed(); err != nil {
		return err
	}
	if l.mirror && req.imported == nil {
		return ErrMirror // a mirror holds another ledger's chain: sealing here would fork it
	}
	// select picks at random among ready cases: without this check a call
	// whose context is already done could still be queued and committed,
	// and a context error would not mean "not written".
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case l.queue <- req:
		return nil
	default:
	}
	l.opts.hooks.call(hookQueueFull)
	select {
	case l.queue <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Ledger) failed() error {
	if p := l.failure.Load(); p != nil {
		return *p
	}
	return nil
}

func (l *Ledger) fail(err error) error { return l.setFailed(err) } // ledger/storage.go

// newPending starts an open batch. Its Pebble batch is allocated when the
// first event is sealed into it (add): a batch of retries writes nothing.
func (l *Ledger) newPending(*committerLocal) *pending {
	return &pending{}
}

// add seals r's events into the open batch (starting one when open is nil)
// and returns the open batch. A request that would overflow the batch first
// waits until the open batch may be flushed (awaitFlush) and flushes it: one
// Append call is always committed atomically, in one batch.
func (l *Ledger) add(c *committerLocal, open *pending, r *appendReq) *pending {
	if err := l.failed(); err != nil {
		r.err = err
		close(r.done)
		return open
	}
	if r.imported != nil {
		return l.addImport(c, open, r) // import.go
	}
	// One clock reading per request: its events share a time. A clock the
	// canonical layout cannot represent fails the request, not the ledger.
	t := l.opts.Now().UTC()
	if t.Before(l.lastT) {
		t = l.lastT // event times never go backwards
	}
	if !events.ValidTime(t) {
		r.err = fmt.Errorf("%w: %s", ErrClock, t.Format(time.RFC3339))
		close(r.done)
		return open
	}
	if r.key != "" && l.matchIdem(r) {
		switch {
		case r.err != nil:
		case r.dupFirst+Seq(r.dupCount)-1 <= Seq(l.acked.Load()):
			// The original is durable and BeforeAck has seen it: answer
			// now. l.Head() would not do: the syncer publishes it before
			// BeforeAck runs.
		default:
			// The original is sealed but not yet acknowledged: wake r with
			// the open batch, acknowledged after the one holding it. A
			// batch of retries only writes nothing (batch stays nil).
			if open == nil {
				open = l.newPending(c)
			}
			open.reqs = append(open.reqs, r)
			open.head = l.tail
			return open
		}
		close(r.done)
		return open
	}
	if open != nil && open.events+len(r.prepared) > l.opts.MaxBatchEvents {
		l.awaitFlush(c)
		l.flush(c, open)
		open = nil
	}
	if open == nil {
		open = l.newPending(c)
	}
	if open.batch == nil {
		open.batch = l.db.NewBatchWithSize(batchPrealloc(c.batchBytes))
		open.records = make([]Record, 0, max(len(r.prepared), recordsPrealloc(c.batchEvents, l.opts.MaxBatchEvents)))
	}
	open.reqs = append(open.reqs, r)
	open.events += len(r.prepared)
	r.acks = c.takeAcks(len(r.prepared))
	for i, ev := range r.prepared {
		env, raw := l.seal(c, ev, t)
		l.treeAppend(open.batch, raw) // its Merkle nodes, in its batch (tree.go)
		r.acks[i] = Ack{Seq: Seq(env.Seq), ID: env.ID, Hash: env.Hash}
		rec := Record{Env: env, Raw: raw}
		if r.payloads != nil {
			rec.Payload, rec.owner = r.payloads[i], r
		}
		open.records = append(open.records, rec)
		open.keyBuf = setEvent(open.batch, open.keyBuf, &c.index, &env, raw)
	}
	if r.key != "" {
		l.recordIdem(open.batch, r, t.UnixNano())
	}
	open.head = l.tail
	l.opts.hooks.call(hookSealed)
	return open
}

// seal assigns the next seq, a ULID and time t (checked by add) to p and
// chains it after the tail. It allocates nothing beyond events.Seal
// (TestSealIDAllocs).
func (l *Ledger) seal(c *committerLocal, p events.Prepared, t time.Time) (events.Envelope, []byte) {
	l.lastT = t
	id, err := newID(l.entropy, &c.idEntropy, ulid.Timestamp(t))
	if err != nil {
		// Monotonic entropy overflows only after 2^80 IDs in one
		// millisecond; fall back to fresh entropy rather than fail.
		id = ulid.MustNew(ulid.Timestamp(t), crand.Reader)
	}
	seq := l.tail.Seq + 1
	env, raw := events.Seal(p, seq, id, t, l.tail.Hash)
	l.tail = Head{Seq: seq, Hash: env.Hash}
	return env, raw
}
