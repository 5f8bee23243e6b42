// Package ledger owns the durable event log: a Pebble database in which
// every event is stored with a gapless sequence number and a SHA-256 hash
// chain, appended by one committer goroutine that group-commits everything
// queued into one batch, writes the next batches while a batch's fsync
// runs, and acknowledges nothing before its own batch's fsync (see
// commit.go and pipeline.go). It also owns the read side (Get, Scan and Events over
// ranges and the secondary indexes by activation, session and kind), Watch
// for committed batches, projection snapshots and the ledger's counters,
// the RFC 6962 Merkle node index behind TreeRoot, InclusionProof and
// ConsistencyProof (tree.go), the chain's host binding (BindHost, host.go)
// and mirror ledgers, which Import fills with another ledger's events
// verbatim through the same commit pipeline (import.go).
//
// Around it, and not linked by it: bus publishes committed events on
// an embedded NATS server and serves replay, head and append over it, whose
// protocol and clients are bus/busclient (which links no ledger);
// ledger/verify re-checks a whole log and makes and checks signed
// checkpoints; ledger/ledgermetrics exports Stats to Prometheus.
//
// The examples, which run as tests, show the whole cycle: Example opens a
// ledger in a temporary directory, appends and reads back by seq and by
// index; ExampleLedger_Watch observes committed batches.
package ledger

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/oklog/ulid/v2"
	"github.com/transparency-dev/merkle/compact"
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
	// events were queued: they may or may not be committed. (A call whose
	// events BeforeAck is applying when its context ends waits for it and
	// is acknowledged instead: payload.go.)
	ErrUnacknowledged = errors.New("ledger: append not acknowledged")
	// ErrFailed is returned after a storage failure; the ledger refuses all
	// further appends because its in-memory chain state can no longer be
	// trusted. Reopen to recover from what is durable.
	ErrFailed = errors.New("ledger: failed")
	// ErrCorrupt is returned when stored data cannot be read or is
	// inconsistent: by Open for a head that does not match the log, and by
	// every read (Get, GetRaw, Scan, Events, snapshots, verify) that meets a
	// damaged file, in an *Error naming the seq or the range Seq..Last it
	// could not read. Reads never panic on damaged data; a damaged read does
	// not fail the write path (see Stats.CorruptReads).
	ErrCorrupt = errors.New("ledger: corrupt")
	// ErrNoSpace is wrapped, with ErrFailed and the ENOSPC cause, by the
	// sticky failure of a ledger whose disk filled up: a commit, sync or
	// background flush could not write. Free space and reopen: nothing
	// acknowledged is lost (it was fsynced to the write-ahead log).
	ErrNoSpace = errors.New("ledger: no space left on the device")
	// ErrReadOnly is returned by writes (Append, SaveSnapshot) to a ledger
	// opened with Options.ReadOnly.
	ErrReadOnly = errors.New("ledger: opened read-only")
	// ErrClock is returned for an append made while the clock reads a time
	// an event cannot carry (before 1970 or after 9999).
	ErrClock = errors.New("ledger: clock outside the representable range")
	// ErrNoLedger is returned by Open with NoCreate when the directory holds
	// no ledger.
	ErrNoLedger = errors.New("ledger: no ledger in directory")
	// ErrNoDir is returned by Open when Options.Dir is empty.
	ErrNoDir = errors.New("ledger: Options.Dir is required")
	// ErrReservedKind is returned, wrapped with the kind, for an append
	// (Append, AppendAcks, AppendAsync, AppendPreparedAsync,
	// AppendIdempotent) carrying a kind the ledger writes only itself
	// (events.SystemOnly: host.bound, written by BindHost); nothing of the
	// call is written. Import stores such events verbatim.
	ErrReservedKind = errors.New("ledger: kind written only by the ledger itself")
)

// Error records a failed operation of a ledger, shaped like *os.PathError:
// what was being done, the event concerned (0 when none) and why. Err is a
// sentinel of this package (ErrNotFound, ErrCorrupt, ErrUnacknowledged, …),
// an error of package events (for a refused draft) or an underlying cause;
// errors.Is sees through it.
type Error struct {
	Op   string // "open", "append", "get", "query", "scan", "save snapshot", "load snapshot", "read", "close"
	Seq  Seq    // the event concerned, or the first of a range; 0 when none
	Last Seq    // the last event of the range Seq..Last concerned; 0 when one event or none
	Err  error
}

// Error returns "<op>: <cause>", "<op> seq <n>: <cause>" when an event
// is concerned, or "<op> seqs <n>-<m>: <cause>" for a range.
func (e *Error) Error() string {
	switch {
	case e.Seq == 0 && e.Last == 0:
		return e.Op + ": " + e.Err.Error()
	case e.Last > e.Seq:
		return e.Op + " seqs " + strconv.FormatUint(uint64(e.Seq), 10) + "-" + strconv.FormatUint(uint64(e.Last), 10) + ": " + e.Err.Error()
	}
	return e.Op + " seq " + strconv.FormatUint(uint64(e.Seq), 10) + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Options configures Open.
type Options struct {
	// Dir is the data directory. Required.
	Dir string
	// QueueLen bounds waiting Append calls; DefaultQueueLen when zero.
	QueueLen int
	// MaxBatchEvents bounds events per Pebble batch; DefaultMaxBatchEvents
	// when zero. One Append call is never split: a call of more events
	// (up to MaxAppendEvents) is committed alone in a batch of its own.
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
	// ReadOnly opens an existing ledger for reading only (read commands,
	// audits of a copy on a read-only mount): nothing in the directory is
	// created, truncated, locked for writing or changed (Pebble's read-only
	// mode over a file system that refuses writes), no committer runs, and
	// Append and SaveSnapshot fail with ErrReadOnly. The directory is held
	// with a shared flock when one can be had (a writer holding it yields
	// ErrLocked); otherwise it is not locked at all, which LockState reports.
	// Implies NoCreate.
	ReadOnly bool
	// IdempotencyWindow is how many idempotency keys of AppendIdempotent
	// are remembered (the most recent); DefaultIdempotencyWindow when zero.
	IdempotencyWindow int

	// Mirror opens (creating if needed) a mirror ledger, written only by
	// Import with the events of another ledger, verbatim (import.go). The
	// flag is stored in the directory at creation; read-only opens need
	// not set it.
	Mirror bool

	// hooks are called at points of the commit pipeline that tests must
	// synchronise with (see export_test.go); nil outside tests.
	hooks *testHooks
	// inflight, when positive and below inflightBatches, is how many
	// batches may be past the committer: 1 is classic group commit, the
	// baseline of the benchmarks of the overlapped pipeline (pipeline.go).
	inflight int
	// plainWAL leaves Pebble's write-ahead logs growing as written, not
	// written ahead with zeros (walfill.go): the baseline of its benchmark
	// and tests.
	plainWAL bool
	// walFillChunk, when positive, replaces walFillChunk: tests fill
	// often with a small one.
	walFillChunk int64
}

// Ledger is an open log. It is safe for concurrent use.
type Ledger struct {
	db     *pebble.DB
	lock   *os.File // flocked LOCK file of the data directory (nil: read-only and unlocked)
	opts   Options
	logger *slog.Logger

	faults       *faults       // what Pebble reported about the storage
	failedCh     chan struct{} // closed by setFailed on the first sticky failure
	corruptReads atomic.Uint64 // reads that met damaged data
	lockState    LockState
	lockNote     string // why a read-only open is not locked
	mirror       bool   // the directory is a mirror ledger (import.go)

	// mu guards closed against concurrent enqueues: appenders hold it for
	// reading while they enqueue, Close takes it for writing, so after Close
	// sets closed no enqueue can be in progress and the queue content is final.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
	closeErr  error

	bindMu   sync.Mutex // serialises BindHost (host.go)
	decoders sync.Pool  // *events.Decoder for Import (import.go)

	// readers counts reads in progress (Scan, Get, snapshots, Verify). They
	// register under mu (read-locked) and then run without it, so a read
	// callback may call the ledger again; Close waits for them after
	// setting closed.
	readers sync.WaitGroup

	queue    chan *appendReq
	inflight chan *pending // the closed batch, to the applier (pipeline.go)
	// token holds the free ones of inflightBatches tokens: a closed batch
	// takes one to the applier and the syncer, which returns it once that
	// batch's fsync is observed (or the batch failed), so that at most
	// inflightBatches batches are applied and not yet known durable.
	token chan struct{}
	// applierIdle holds a value while the applier is idle (pipeline.go).
	applierIdle chan struct{}
	stop        chan struct{}
	done        chan struct{}

	commits     atomic.Uint64        // batches durably committed
	eventsDone  atomic.Uint64        // events durably committed
	commitNanos atomic.Uint64        // apply-to-fsync time, summed
	head        atomic.Pointer[Head] // last durable event
	// acked is the seq of the last event durable and through BeforeAck
	// (stored by the syncer after Head): a keyed retry is answered at once
	// only when its original is within it (commit.go).
	acked      atomic.Uint64
	failure    atomic.Pointer[error]
	observers  atomic.Pointer[[]*watcher] // Watch observers (observe.go)
	obsMu      sync.Mutex                 // serialises Watch, unwatch and closeObservers
	obsClosed  bool                       // Close has stopped the observers
	obsDropped atomic.Uint64              // batches dropped from full observer queues

	// committer-only state
	tail     Head // last sealed (maybe not yet durable) event
	lastT    time.Time
	entropy  *ulid.MonotonicEntropy
	idem     *idemWindow    // remembered idempotency keys (idempotency.go)
	tree     *compact.Range // Merkle compact range over the sealed events (tree.go)
	treeHash *committerHasher

	treeBase  Seq       // read-only: leaves the stored Merkle nodes cover (tree.go)
	treeCache treeCache // Merkle nodes computed from the events (tree.go)
}

// Open opens (creating if needed) the ledger in opts.Dir and starts its
// committer. A directory held by another process yields ErrLocked.
func Open(opts Options) (*Ledger, error) {
	if opts.Dir == "" {
		return nil, &Error{Op: "open", Err: ErrNoDir}
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
	if opts.NoCreate || opts.ReadOnly {
		if err := requireLedger(opts.Dir); err != nil {
			return nil, err
		}
	}
	var (
		lock      *os.File
		lockState = LockExclusive
		lockNote  string
		err       error
	)
	if opts.ReadOnly {
		lock, lockState, lockNote, err = lockShared(opts.Dir)
	} else {
		lock, err = lockDir(opts.Dir)
	}
	if err != nil {
		return nil, err
	}
	unlock := func() {
		if lock != nil {
			lock.Close()
		}
	}
	f := newFaults(opts.Logger)
	db, err := openPebble(opts, f)
	if err != nil {
		unlock()
		return nil, err
	}
	l := &Ledger{
		db: db, lock: lock, opts: opts, logger: opts.Logger, faults: f,
		lockState: lockState, lockNote: lockNote,
		queue:       make(chan *appendReq, opts.QueueLen),
		inflight:    make(chan *pending, 1),
		token:       make(chan struct{}, inflightBatches),
		applierIdle: make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		failedCh:    make(chan struct{}),
	}
	onFailure := func(err error) { l.setFailed(err) }
	f.onFailure.Store(&onFailure)
	if err := f.firstFatal(); err != nil { // reported while Pebble opened
		l.setFailed(err)
	}
	fail := func(err error) (*Ledger, error) {
		db.Close()
		unlock()
		return nil, err
	}
	head, err := l.loadHead()
	if err != nil {
		return fail(err)
	}
	l.head.Store(&head)
	l.acked.Store(uint64(head.Seq))
	l.tail = head
	if head.Seq > 0 {
		// The next event chains onto head.Hash: make sure it is the hash of
		// a sound last event, or every later event would be blamed for a
		// break that happened before it.
		env, err := l.Get(head.Seq)
		if errors.Is(err, ErrCorrupt) {
			return fail(&Error{Op: "open", Seq: head.Seq, Err: fmt.Errorf("the last event cannot be read: %w", err)})
		}
		if err != nil || !env.CheckHash() || env.Hash != head.Hash {
			return fail(&Error{Op: "open", Seq: head.Seq, Err: fmt.Errorf("%w: the last event does not match m/head or does not hash; run verify", ErrCorrupt)})
		}
		l.lastT = env.Time
	}
	if err := l.failed(); err != nil {
		return fail(&Error{Op: "open", Err: err})
	}
	if err := l.openMirror(head); err != nil {
		return fail(err)
	}
	if err := l.openTree(head.Seq); err != nil {
		return fail(err)
	}
	if opts.ReadOnly {
		// No committer: appends are refused before they are queued.
		refused := error(ErrReadOnly)
		l.failure.Store(&refused)
		close(l.done)
		return l, nil
	}
	if err := l.loadIdempotency(); err != nil {
		return fail(err)
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return fail(&Error{Op: "open", Err: fmt.Errorf("seed ULID entropy: %w", err)})
	}
	l.entropy = ulid.Monotonic(rand.NewChaCha8(seed), 0)
	empty := []*watcher{}
	l.observers.Store(&empty)
	syncerDone := make(chan struct{})
	tokens := inflightBatches
	if opts.inflight > 0 {
		tokens = min(opts.inflight, inflightBatches)
	}
	if h := opts.hooks; h != nil && h[hookInlineApply] != nil {
		tokens = 1 // the sequential pipeline: one batch past the committer
	}
	for range tokens {
		l.token <- struct{}{}
	}
	l.applierIdle <- struct{}{}
	go l.syncer(syncerDone)
	go l.committer(syncerDone)
	return l, nil
}

func openPebble(opts Options, f *faults) (*pebble.DB, error) {
	db, err := openBounded(opts, f)
	var le *Error
	if errors.As(err, &le) {
		return nil, err
	}
	if err != nil {
		if ferr := f.firstFatal(); ferr != nil {
			err = errors.Join(err, ferr)
		}
		if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrNoSpace) {
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		if pebble.IsCorruptionError(err) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return nil, &Error{Op: "open", Err: fmt.Errorf("%s: %w", opts.Dir, err)}
	}
	if v, closer, err := db.Get([]byte(keys.Format)); err == nil {
		format := string(v)
		closer.Close()
		if format != keys.FormatVersion {
			db.Close()
			return nil, &Error{Op: "open", Err: fmt.Errorf("%w: keyspace format %q, this build reads %q", ErrCorrupt, format, keys.FormatVersion)}
		}
	} else if errors.Is(err, pebble.ErrNotFound) && opts.ReadOnly {
		db.Close()
		return nil, &Error{Op: "open", Err: fmt.Errorf("%w: no keyspace format (m/format) in %s", ErrCorrupt, opts.Dir)}
	} else if errors.Is(err, pebble.ErrNotFound) {
		if err := db.Set([]byte(keys.Format), []byte(keys.FormatVersion), pebble.Sync); err != nil {
			db.Close()
			return nil, &Error{Op: "open", Err: fmt.Errorf("write format: %w", err)}
		}
	} else {
		db.Close()
		if pebble.IsCorruptionError(err) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return nil, &Error{Op: "open", Err: fmt.Errorf("read format: %w", err)}
	}
	return db, nil
}

// loadHead reads m/head and checks it against the last e/ key, so that a
// head pointing past the log (or a log past its head) is caught at open.
func (l *Ledger) loadHead() (Head, error) {
	var head Head
	v, closer, err := l.db.Get([]byte(keys.Head))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return Head{}, l.readErr("open", 0, 0, fmt.Errorf("read m/head: %w", err))
	default:
		seq, hash, ok := keys.DecodeHead(v)
		closer.Close()
		if !ok {
			return Head{}, &Error{Op: "open", Err: fmt.Errorf("%w: malformed m/head", ErrCorrupt)}
		}
		head = Head{Seq: seq, Hash: hash}
	}
	last, err := l.lastEventSeq(head.Seq)
	if err != nil {
		return Head{}, err
	}
	if last != head.Seq {
		return Head{}, &Error{Op: "open", Seq: last, Err: fmt.Errorf("%w: m/head says seq %d but the last stored event is this one", ErrCorrupt, head.Seq)}
	}
	return head, nil
}

// lastEventSeq returns the seq of the last e/ key; headSeq, what m/head
// says, names the events concerned when the end of the log is unreadable.
func (l *Ledger) lastEventSeq(headSeq Seq) (Seq, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PrefixEvent), UpperBound: keys.UpperBound([]byte(keys.PrefixEvent))})
	if err != nil {
		return 0, l.readErr("open", 0, 0, err)
	}
	defer it.Close()
	if !it.Last() {
		if err := it.Error(); err != nil {
			return 0, l.readErr("open", headSeq, 0, fmt.Errorf("find the last event: %w", err))
		}
		return 0, nil
	}
	seq, _ := keys.SeqOf(it.Key())
	return seq, nil
}

// beginRead registers a read for operation op; it fails with ErrClosed once
// Close has begun. Call the returned function when the read is over.
func (l *Ledger) beginRead(op string) (end func(), err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, &Error{Op: op, Err: ErrClosed}
	}
	l.readers.Add(1)
	return l.readers.Done, nil
}

// Head returns the last durable event. Events after it may be visible to a
// raw Pebble reader but are not acknowledged; every read of this package is
// bounded by Head.
func (l *Ledger) Head() Head { return *l.head.Load() }

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
		l.closeObservers() // after the syncer: nothing more is pushed
		l.opts.hooks.call(hookCloseWaitsReaders)
		l.readers.Wait() // Pebble's Close must not race reads
		if err := l.db.Close(); err != nil {
			l.closeErr = &Error{Op: "close", Err: err}
		}
		if l.lock != nil {
			l.lock.Close() // releases the flock
		}
	})
	return l.closeErr
}

// Stats are counters of an open ledger.
type Stats struct {
	// Commits is the number of batches durably committed since Open; each is
	// one Pebble Sync commit. Events appended divided by Commits is the
	// group-commit factor. Batches applied while an fsync runs share the
	// next one, so there may be more commits than fsyncs.
	Commits uint64
	// Events is the number of events durably appended since Open.
	Events uint64
	// CommitNanos is the total time from applying a batch to observing its
	// fsync, over all commits since Open. Several commits are in progress
	// at once (the next batches are applied while a batch's fsync runs),
	// so it may grow faster than the wall clock.
	CommitNanos uint64
	// Queued is the number of Append calls waiting for the committer.
	Queued int
	// Failed reports a sticky storage failure (see ErrFailed); Failure is
	// its error (nil when none).
	Failed  bool
	Failure error
	// CorruptReads counts reads (Get, Scan, snapshots, verify of an open
	// ledger) that met damaged storage and returned ErrCorrupt since Open.
	// A damaged read fails only that read: appends continue while the
	// write path works.
	CorruptReads uint64
	// ObserverDropped counts committed batches dropped from a Watch
	// observer's full queue (see Lagger) since Open.
	ObserverDropped uint64
	// ReadOnly reports Options.ReadOnly, and Lock how the directory is held.
	ReadOnly bool
	Lock     LockState
	// Head is the durable head.
	Head Head
}

// Stats returns the ledger's counters.
func (l *Ledger) Stats() Stats {
	st := Stats{Commits: l.commits.Load(), Events: l.eventsDone.Load(), CommitNanos: l.commitNanos.Load(),
		Queued: len(l.queue), Head: l.Head(), CorruptReads: l.corruptReads.Load(),
		ObserverDropped: l.obsDropped.Load(), ReadOnly: l.opts.ReadOnly, Lock: l.lockState}
	if err := l.failed(); errors.Is(err, ErrFailed) {
		st.Failed, st.Failure = true, err
	}
	return st
}

// LockNote says why a read-only ledger is not locked against writers
// (Lock is LockNone); empty otherwise.
func (l *Ledger) LockNote() string { return l.lockNote }

// Dir is the data directory the ledger was opened in.
func (l *Ledger) Dir() string { return l.opts.Dir }

var _ io.Closer = (*Ledger)(nil)
