// Package ledger owns the durable event log: a Pebble database in which
// every event is stored under e/<seq> with gapless sequence numbers and a
// SHA-256 hash chain, appended by one committer goroutine that group-commits
// everything queued with a single fsync and acknowledges nothing before that
// fsync. It also owns the read side (ranges and secondary indexes by
// activation, session and kind), verification of the whole chain, and the
// embedded NATS bus on which committed events are published (see Bus).
package ledger

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/oklog/ulid/v2"
)

// Seq is an event's position in the log. The first event is 1; seqs are
// gapless.
type Seq = events.Seq

// Head is the last durable event: its seq and chain hash. The empty log has
// Seq 0 and the zero hash, which is the genesis prev of seq 1.
type Head struct {
	Seq  Seq
	Hash events.Hash
}

// Ack is what an acknowledged (fsynced) event was assigned.
type Ack struct {
	Seq  Seq
	ID   ulid.ULID
	Hash events.Hash
}

// Record is a committed event as handed to observers: decoded envelope and
// the exact stored bytes.
type Record struct {
	Env events.Envelope
	Raw []byte
}

// Observer receives every committed batch, after its fsync, in seq order,
// on the committer's side of the pipeline. Implementations must not block
// for long (they delay later acknowledgements) and must not call Append.
type Observer interface {
	Committed(batch []Record)
}

// Bounds and defaults.
const (
	// DefaultQueueLen bounds the number of Append calls waiting for the
	// committer. A full queue blocks appenders (backpressure) until their
	// context ends; it never grows memory.
	DefaultQueueLen = 1024
	// DefaultMaxBatchEvents bounds the events sealed into one Pebble batch.
	DefaultMaxBatchEvents = 8192
	// MaxAppendEvents bounds the events in one Append call, so that a single
	// call always fits one batch and is committed atomically.
	MaxAppendEvents = DefaultMaxBatchEvents
	// inflightBatches is how many batches may be applied to Pebble with
	// their fsync not yet observed. One is classic group commit: everything
	// that queues during an fsync goes into the next batch.
	inflightBatches = 1
)

// Errors callers branch on.
var (
	// ErrClosed is returned by calls on a closed ledger.
	ErrClosed = errors.New("ledger: closed")
	// ErrLocked is returned by Open when another process holds the data
	// directory.
	ErrLocked = errors.New("ledger: data directory is in use by another process")
	// ErrTooManyEvents is returned when one Append exceeds MaxAppendEvents.
	ErrTooManyEvents = errors.New("ledger: too many events in one append")
	// ErrUnacknowledged is returned when the caller's context ended after its
	// events were queued: they may or may not be committed.
	ErrUnacknowledged = errors.New("ledger: append not acknowledged")
	// ErrFailed is returned after a storage failure; the ledger refuses all
	// further appends because its in-memory chain state can no longer be
	// trusted. Reopen to recover from what is durable.
	ErrFailed = errors.New("ledger: failed")
	// ErrCorrupt is returned by Open when the stored head is inconsistent.
	ErrCorrupt = errors.New("ledger: corrupt")
	// ErrClock is returned for an append made while the clock reads a time
	// an event cannot carry (before 1970 or after 9999).
	ErrClock = errors.New("ledger: clock outside the representable range")
	// ErrNoLedger is returned by Open with NoCreate when the directory holds
	// no ledger.
	ErrNoLedger = errors.New("ledger: no ledger in directory")
)

// Options configures Open.
type Options struct {
	// Dir is the data directory. Required.
	Dir string
	// QueueLen bounds waiting Append calls; DefaultQueueLen when zero.
	QueueLen int
	// MaxBatchEvents bounds events per Pebble batch; DefaultMaxBatchEvents
	// when zero.
	MaxBatchEvents int
	// BeforeAck, when set, sees every committed batch after its fsync and
	// before any of its appenders is acknowledged (the projector uses it, so
	// that a caller's own events are reflected in reports once Append
	// returns).
	BeforeAck Observer
	// Now is the clock; time.Now when nil. Event times never go backwards.
	Now func() time.Time
	// Logger receives operational messages; slog.Default when nil.
	Logger *slog.Logger
	// PebbleOptions, when set, is used as the base Pebble configuration.
	PebbleOptions *pebble.Options
	// NoCreate makes Open fail with ErrNoLedger instead of creating a new
	// ledger (read-side tools must not turn a mistyped path into one).
	NoCreate bool
}

// Ledger is an open log. It is safe for concurrent use.
type Ledger struct {
	db     *pebble.DB
	lock   *os.File // flocked LOCK file of the data directory
	opts   Options
	logger *slog.Logger

	// mu guards closed against concurrent enqueues: appenders hold it for
	// reading while they enqueue, Close takes it for writing, so after Close
	// sets closed no enqueue can be in progress and the queue content is final.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
	closeErr  error

	// readers counts reads in progress (Scan, Get, snapshots, Verify). They
	// register under mu (read-locked) and then run without it, so a read
	// callback may call the ledger again; Close waits for them after
	// setting closed.
	readers sync.WaitGroup

	queue    chan *appendReq
	inflight chan *pending // the batch applied whose fsync the syncer awaits
	token    chan struct{} // held by whoever may apply the next batch
	stop     chan struct{}
	done     chan struct{}

	commits     atomic.Uint64        // batches durably committed
	eventsDone  atomic.Uint64        // events durably committed
	commitNanos atomic.Uint64        // apply-to-fsync time, summed
	head        atomic.Pointer[Head] // last durable event
	failure     atomic.Pointer[error]
	observers   atomic.Pointer[[]Observer]
	obsMu       sync.Mutex // serialises Watch and unwatch
	obsRun      sync.Mutex // held by the syncer while it calls observers

	// committer-only state
	tail    Head // last sealed (maybe not yet durable) event
	lastT   time.Time
	entropy *ulid.MonotonicEntropy
}

type appendReq struct {
	prepared []events.Prepared
	acks     []Ack
	err      error
	done     chan struct{}
}

// pending is a batch: open (being sealed into) or in flight (applied,
// fsync not yet observed).
type pending struct {
	batch     *pebble.Batch
	reqs      []*appendReq
	records   []Record
	events    int
	head      Head
	appliedAt time.Time
}

// Open opens (creating if needed) the ledger in opts.Dir and starts its
// committer. A directory held by another process yields ErrLocked.
func Open(opts Options) (*Ledger, error) {
	if opts.Dir == "" {
		return nil, errors.New("ledger: Options.Dir is required")
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = DefaultQueueLen
	}
	if opts.MaxBatchEvents <= 0 {
		opts.MaxBatchEvents = DefaultMaxBatchEvents
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.NoCreate {
		if err := requireLedger(opts.Dir); err != nil {
			return nil, err
		}
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	db, err := openPebble(opts)
	if err != nil {
		lock.Close()
		return nil, err
	}
	l := &Ledger{
		db: db, lock: lock, opts: opts, logger: opts.Logger,
		queue:    make(chan *appendReq, opts.QueueLen),
		inflight: make(chan *pending, inflightBatches),
		token:    make(chan struct{}, inflightBatches),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	head, err := l.loadHead()
	if err != nil {
		db.Close()
		lock.Close()
		return nil, err
	}
	l.head.Store(&head)
	l.tail = head
	if head.Seq > 0 {
		// The next event chains onto head.Hash: make sure it is the hash of
		// a sound last event, or every later event would be blamed for a
		// break that happened before it.
		env, err := l.Get(head.Seq)
		if err != nil || !env.CheckHash() || env.Hash != head.Hash {
			db.Close()
			lock.Close()
			return nil, fmt.Errorf("%w: the last event (seq %d) does not match m/head or does not hash; run verify", ErrCorrupt, head.Seq)
		}
		l.lastT = env.Time
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		db.Close()
		lock.Close()
		return nil, fmt.Errorf("ledger: seed ULID entropy: %w", err)
	}
	l.entropy = ulid.Monotonic(rand.NewChaCha8(seed), 0)
	empty := []Observer{}
	l.observers.Store(&empty)
	syncerDone := make(chan struct{})
	for range inflightBatches {
		l.token <- struct{}{}
	}
	go l.syncer(syncerDone)
	go l.committer(syncerDone)
	return l, nil
}

// DefaultPebbleOptions is the Pebble configuration a ledger uses unless
// Options.PebbleOptions is set. The log is write-heavy and append-mostly:
// a larger memtable means fewer, larger flushes and fewer L0 compactions of
// the interleaved index keys (measured: ≈1.5× append throughput at 256-event
// batches against Pebble's 4 MiB default).
func DefaultPebbleOptions() *pebble.Options {
	return &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       64 << 20,
	}
}

// lockFile is taken with flock before Pebble opens the directory. Pebble
// has its own lock, but its error differs within and across processes; an
// flock on a fresh open file description conflicts in both cases, so callers
// get ErrLocked either way and Pebble never sees a second opener.
const lockFile = "LEASELEDGER.LOCK"

// requireLedger checks that dir exists and holds a Pebble database.
func requireLedger(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, lockFile)); err != nil {
		return fmt.Errorf("%w: %s", ErrNoLedger, dir)
	}
	return nil
}

func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("ledger: create %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("ledger: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("ledger: lock %s: %w", dir, err)
	}
	return f, nil
}

func openPebble(opts Options) (*pebble.DB, error) {
	po := DefaultPebbleOptions()
	if opts.PebbleOptions != nil {
		po = opts.PebbleOptions.Clone()
	}
	po.FormatMajorVersion = pebble.FormatNewest
	if po.Logger == nil {
		po.Logger = quietLogger{opts.Logger}
	}
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", opts.Dir, err)
	}
	if v, closer, err := db.Get([]byte(keyFormat)); err == nil {
		format := string(v)
		closer.Close()
		if format != keyspaceFormat {
			db.Close()
			return nil, fmt.Errorf("%w: keyspace format %q, this build reads %q", ErrCorrupt, format, keyspaceFormat)
		}
	} else if errors.Is(err, pebble.ErrNotFound) {
		if err := db.Set([]byte(keyFormat), []byte(keyspaceFormat), pebble.Sync); err != nil {
			db.Close()
			return nil, fmt.Errorf("ledger: write format: %w", err)
		}
	} else {
		db.Close()
		return nil, fmt.Errorf("ledger: read format: %w", err)
	}
	return db, nil
}

// loadHead reads m/head and checks it against the last e/ key, so that a
// head pointing past the log (or a log past its head) is caught at open.
func (l *Ledger) loadHead() (Head, error) {
	var head Head
	v, closer, err := l.db.Get([]byte(keyHead))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return Head{}, fmt.Errorf("ledger: read head: %w", err)
	default:
		h, ok := decodeHead(v)
		closer.Close()
		if !ok {
			return Head{}, fmt.Errorf("%w: malformed m/head", ErrCorrupt)
		}
		head = h
	}
	last, err := l.lastEventSeq()
	if err != nil {
		return Head{}, err
	}
	if last != head.Seq {
		return Head{}, fmt.Errorf("%w: m/head says seq %d but the last stored event is seq %d", ErrCorrupt, head.Seq, last)
	}
	return head, nil
}

func (l *Ledger) lastEventSeq() (Seq, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixEvent), UpperBound: upperBound([]byte(prefixEvent))})
	if err != nil {
		return 0, fmt.Errorf("ledger: iterate: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	seq, _ := seqFromKey(it.Key())
	return seq, nil
}

// beginRead registers a read; it fails once Close has begun. Call the
// returned function when the read is over.
func (l *Ledger) beginRead() (end func(), err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	l.readers.Add(1)
	return l.readers.Done, nil
}

// Head returns the last durable event. Events after it may be visible to a
// raw Pebble reader but are not acknowledged; every read of this package is
// bounded by Head.
func (l *Ledger) Head() Head { return *l.head.Load() }

// Watch registers o to receive every batch committed from now on, after its
// appenders were acknowledged, in seq order. The returned function
// unregisters it and returns only when no call to o is in progress, so the
// observer's resources may be released right after; it must not be called
// from within an observer.
func (l *Ledger) Watch(o Observer) (unwatch func()) {
	l.obsMu.Lock()
	defer l.obsMu.Unlock()
	cur := *l.observers.Load()
	next := append(append([]Observer{}, cur...), o)
	l.observers.Store(&next)
	return func() {
		l.obsMu.Lock()
		defer l.obsMu.Unlock()
		cur := *l.observers.Load()
		next := make([]Observer, 0, len(cur))
		for _, x := range cur {
			if x != o {
				next = append(next, x)
			}
		}
		l.observers.Store(&next)
		l.obsRun.Lock() // wait out a Committed call that took the old list
		l.obsRun.Unlock()
	}
}

// Append validates drafts, appends them as consecutive events and returns
// their seqs once they are durable. Invalid drafts are refused with an error
// wrapping events.ErrInvalid and nothing of the call is written.
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
		return nil, fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ErrTooManyEvents, len(drafts), MaxAppendEvents)
	}
	prepared := make([]events.Prepared, len(drafts))
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, fmt.Errorf("ledger: event %d of %d: %w", i, len(drafts), err)
		}
		prepared[i] = p
	}
	return l.appendPrepared(ctx, prepared)
}

func (l *Ledger) appendPrepared(ctx context.Context, prepared []events.Prepared) ([]Ack, error) {
	req := &appendReq{prepared: prepared, done: make(chan struct{})}
	if err := l.enqueue(ctx, req); err != nil {
		return nil, err
	}
	select {
	case <-req.done:
		return req.acks, req.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrUnacknowledged, ctx.Err())
	}
}

func (l *Ledger) enqueue(ctx context.Context, req *appendReq) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	if err := l.failed(); err != nil {
		return err
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

func (l *Ledger) fail(err error) error {
	err = fmt.Errorf("%w: %w", ErrFailed, err)
	l.failure.CompareAndSwap(nil, &err)
	return *l.failure.Load()
}

// The commit pipeline is classic group commit with the sealing overlapped:
// exactly one batch is in flight (applied to Pebble with a Sync commit,
// its fsync awaited by the syncer) while the committer seals every request
// that arrives meanwhile into the next open batch (seqs, ULIDs, times, chain
// hashes, index entries). When the fsync completes, the syncer hands the
// token back and the committer applies the whole open batch at once: one
// Pebble commit, one fsync for everything queued during the previous one.

// committer owns the chain state (tail, lastT, entropy) and the open batch.
func (l *Ledger) committer(syncerDone <-chan struct{}) {
	defer close(l.done)
	defer func() { <-syncerDone }()
	defer close(l.inflight)
	var open *pending
	for {
		if open == nil {
			select {
			case r := <-l.queue:
				open = l.add(open, r)
			case <-l.stop:
				l.drainOnStop(open)
				return
			}
			continue
		}
		select {
		case r := <-l.queue:
			open = l.add(open, r)
		case <-l.token:
			l.flush(open)
			open = nil
		case <-l.stop:
			l.drainOnStop(open)
			return
		}
	}
}

// drainOnStop runs after Close set closed under the write lock, so nothing
// is being enqueued any more: it seals what is left and flushes it.
func (l *Ledger) drainOnStop(open *pending) {
	for {
		select {
		case r := <-l.queue:
			open = l.add(open, r)
			continue
		default:
		}
		break
	}
	if open != nil {
		<-l.token
		l.flush(open)
	}
}

// add seals r's events into the open batch (starting one when open is nil)
// and returns the open batch. A request that would overflow the batch first
// waits for the token and flushes the open batch: one Append call is always
// committed atomically, in one batch.
func (l *Ledger) add(open *pending, r *appendReq) *pending {
	if err := l.failed(); err != nil {
		r.err = err
		close(r.done)
		return open
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
	if open != nil && open.events+len(r.prepared) > l.opts.MaxBatchEvents {
		<-l.token
		l.flush(open)
		open = nil
	}
	if open == nil {
		open = &pending{batch: l.db.NewBatch()}
	}
	open.reqs = append(open.reqs, r)
	open.events += len(r.prepared)
	r.acks = make([]Ack, len(r.prepared))
	for i, ev := range r.prepared {
		env, raw := l.seal(ev, t)
		r.acks[i] = Ack{Seq: Seq(env.Seq), ID: env.ID, Hash: env.Hash}
		open.records = append(open.records, Record{Env: env, Raw: raw})
		for j, k := range KeysFor(&env) {
			if j == 0 {
				_ = open.batch.Set(k, raw, nil) // e/<seq>
			} else {
				_ = open.batch.Set(k, nil, nil) // index entries
			}
		}
	}
	open.head = l.tail
	return open
}

// flush applies the open batch with a Sync commit and hands it to the
// syncer, which returns the token once its fsync is done. The caller holds
// the token.
func (l *Ledger) flush(p *pending) {
	err := l.failed() // an earlier batch failed: applying this one would leave a gap
	if err == nil {
		_ = p.batch.Set([]byte(keyHead), encodeHead(p.head), nil)
		p.appliedAt = time.Now()
		if aerr := l.db.ApplyNoSyncWait(p.batch, pebble.Sync); aerr != nil {
			err = l.fail(fmt.Errorf("commit: %w", aerr))
		}
	}
	if err != nil {
		p.batch.Close()
		for _, r := range p.reqs {
			r.acks, r.err = nil, err
			close(r.done)
		}
		l.token <- struct{}{} // nothing in flight
		return
	}
	l.inflight <- p
}

// seal assigns the next seq, a ULID and time t (checked by add) to p and
// chains it after the tail.
func (l *Ledger) seal(p events.Prepared, t time.Time) (events.Envelope, []byte) {
	l.lastT = t
	id, err := ulid.New(ulid.Timestamp(t), l.entropy)
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

// syncer waits for the in-flight batch's fsync, publishes the new durable
// head, returns the token, and acknowledges the batch's appenders.
func (l *Ledger) syncer(done chan<- struct{}) {
	defer close(done)
	for p := range l.inflight {
		err := p.batch.SyncWait()
		p.batch.Close()
		if err != nil {
			err = l.fail(fmt.Errorf("sync: %w", err))
			l.token <- struct{}{}
			for _, r := range p.reqs {
				r.acks, r.err = nil, err
				close(r.done)
			}
			continue
		}
		head := p.head
		l.head.Store(&head)
		l.commits.Add(1)
		l.eventsDone.Add(uint64(len(p.records)))
		l.commitNanos.Add(uint64(time.Since(p.appliedAt)))
		// The next batch may be applied now: it is ordered after this one in
		// Pebble's WAL, and this goroutine acknowledges batches in order.
		l.token <- struct{}{}
		if l.opts.BeforeAck != nil {
			l.opts.BeforeAck.Committed(p.records)
		}
		for _, r := range p.reqs {
			close(r.done)
		}
		l.obsRun.Lock()
		for _, o := range *l.observers.Load() {
			o.Committed(p.records)
		}
		l.obsRun.Unlock()
	}
}

// Close stops accepting appends, commits everything already queued, waits
// for the committer to finish and closes the database. It is idempotent and
// safe to call concurrently with Append.
func (l *Ledger) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.stop)
		<-l.done
		l.readers.Wait() // Pebble's Close must not race reads
		if err := l.db.Close(); err != nil {
			l.closeErr = fmt.Errorf("ledger: close: %w", err)
		}
		l.lock.Close() // releases the flock
	})
	return l.closeErr
}

// Stats are counters of an open ledger.
type Stats struct {
	// Commits is the number of batches durably committed since Open; each is
	// one Pebble Sync commit. Events appended divided by Commits is the
	// group-commit factor.
	Commits uint64
	// Events is the number of events durably appended since Open.
	Events uint64
	// CommitNanos is the total time from applying a batch to observing its
	// fsync, over all commits since Open.
	CommitNanos uint64
	// Queued is the number of Append calls waiting for the committer.
	Queued int
	// Failed reports a sticky storage failure (see ErrFailed).
	Failed bool
	// Head is the durable head.
	Head Head
}

// Stats returns the ledger's counters.
func (l *Ledger) Stats() Stats {
	return Stats{Commits: l.commits.Load(), Events: l.eventsDone.Load(), CommitNanos: l.commitNanos.Load(),
		Queued: len(l.queue), Failed: l.failed() != nil, Head: l.Head()}
}

// Dir is the data directory the ledger was opened in.
func (l *Ledger) Dir() string { return l.opts.Dir }

// DB exposes the underlying Pebble database for tooling that must work
// below the ledger (benchmarks, tamper tests). Writing to it bypasses the
// chain.
func (l *Ledger) DB() *pebble.DB { return l.db }

// quietLogger routes Pebble's informational logs to slog at debug level.
// A nil logger means slog.Default.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) logger() *slog.Logger {
	if q.l == nil {
		return slog.Default()
	}
	return q.l
}

func (q quietLogger) Infof(format string, args ...any) {
	q.logger().Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (q quietLogger) Errorf(format string, args ...any) {
	q.logger().Error(fmt.Sprintf(format, args...), "component", "pebble")
}
func (q quietLogger) Fatalf(format string, args ...any) {
	q.logger().Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...)) // Pebble's contract: Fatalf does not return
}

var _ io.Closer = (*Ledger)(nil)
