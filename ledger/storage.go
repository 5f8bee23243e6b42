package ledger

// How the ledger meets its storage when the storage misbehaves: damaged
// files (corruption is an error, never a panic), Pebble's fatal errors (they
// fail the write path, they do not end the process), a full disk (the write
// path fails with ErrNoSpace instead of retrying forever) and read-only
// opens (nothing in the directory is created, truncated, locked for writing
// or modified).

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// faults is what Pebble reported about its storage, shared by the Pebble
// logger and event listener of one database and by the ledger on top of it.
// It exists before the database is open (Pebble may report during Open).
type faults struct {
	logger *slog.Logger

	corruptions atomic.Uint64 // DataCorruption events (damaged files met by reads)
	fatals      atomic.Uint64 // Fatalf calls
	fatalMu     sync.Mutex
	fatal       error // the first Fatalf, as an error

	// onFailure, once set (after Open), fails the ledger's write path.
	onFailure atomic.Pointer[func(error)]

	noSpaceOnce sync.Once
	noSpace     chan struct{} // closed on the first ENOSPC Pebble reports
	abandoned   atomic.Bool   // an open was given up: park its flush loop
}

func newFaults(logger *slog.Logger) *faults {
	if logger == nil {
		logger = slog.Default()
	}
	return &faults{logger: logger, noSpace: make(chan struct{})}
}

// storageFailure records a failure of the write path: the first one is kept
// for Open to report and handed to the ledger, once it has one.
func (f *faults) storageFailure(err error) {
	f.fatalMu.Lock()
	if f.fatal == nil {
		f.fatal = err
	}
	f.fatalMu.Unlock()
	if fn := f.onFailure.Load(); fn != nil {
		(*fn)(err)
	}
}

func (f *faults) firstFatal() error {
	f.fatalMu.Lock()
	defer f.fatalMu.Unlock()
	return f.fatal
}

// pebbleLogger is the Pebble logger of a ledger. Informational messages go
// to slog at debug level. Fatalf never panics and never exits: Pebble calls
// it for on-disk corruption it cannot otherwise report, for a broken commit
// pipeline and for a MANIFEST it cannot write, and a panic there would
// take down every reader of the process (one replay request reaching a
// damaged block used to kill the whole bus). Instead the message is
// logged, recorded, and the ledger's write path fails for good (ErrFailed,
// and ErrNoSpace when the cause is a full disk): after a fatal error Pebble
// carries on with state it no longer vouches for, so nothing more is
// acknowledged; reads in progress at that moment fail with ErrCorrupt (see
// readGuard). Only reopening recovers.
type pebbleLogger struct{ f *faults }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.f.logger.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.f.logger.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.f.fatals.Add(1)
	p.f.logger.Error("pebble fatal error: the ledger refuses further appends; reopen to recover",
		"component", "pebble", "err", msg)
	err := fmt.Errorf("pebble fatal error: %s", msg)
	for _, a := range args {
		if e, ok := a.(error); ok && errors.Is(e, syscall.ENOSPC) {
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
			break
		}
	}
	p.f.storageFailure(err)
}

// eventListener reports damaged files as errors of the read that met them
// (Pebble's default DataCorruption handler calls Fatalf) and turns a
// background flush or compaction that failed for lack of space into a
// failure of the write path: Pebble would otherwise retry it at once, for
// ever, at full CPU, writing and deleting a partial file each time.
func (f *faults) eventListener() pebble.EventListener {
	return pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			f.corruptions.Add(1)
			f.logger.Error("storage corruption", "component", "pebble", "file", info.Path,
				"err", firstLine(info.Details))
		},
		BackgroundError: func(err error) {
			f.logger.Error("pebble background error", "component", "pebble", "err", firstLine(err))
			if errors.Is(err, syscall.ENOSPC) {
				f.noSpaceOnce.Do(func() { close(f.noSpace) })
				f.storageFailure(fmt.Errorf("%w: background flush or compaction: %w", ErrNoSpace, err))
			}
		},
	}
}

// setFailed makes err the sticky failure of the write path (the first one
// wins) and returns the sticky failure. A failure caused by a full disk also
// wraps ErrNoSpace.
func (l *Ledger) setFailed(err error) error {
	if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrNoSpace) {
		err = fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	if !errors.Is(err, ErrFailed) {
		err = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	if l.failure.CompareAndSwap(nil, &err) {
		l.logger.Error("ledger failed: appends are refused until it is reopened", "err", err)
		close(l.failedCh)
	}
	return *l.failure.Load()
}

// Failed returns a channel closed when the write path fails for good (the
// sticky ErrFailed: a commit or sync refused, a full disk, a Pebble fatal
// error); Stats().Failure says why. `serve` shuts down on it. It is never
// closed for a read-only ledger.
func (l *Ledger) Failed() <-chan struct{} { return l.failedCh }

// readGuard is taken around one read of the database: done turns the
// read's Pebble error into the ledger's (see readErr), and fails a read
// that succeeded while Pebble reported a fatal error (its result is not
// vouched for).
type readGuard struct {
	l      *Ledger
	fatals uint64
}

func (l *Ledger) guard() readGuard { return readGuard{l: l, fatals: l.faults.fatals.Load()} }

// check returns ErrCorrupt if a fatal error was reported since the guard
// was taken; op, first and last name what was being read.
func (g readGuard) check(op string, first, last Seq) error {
	if g.l.faults.fatals.Load() == g.fatals {
		return nil
	}
	g.l.corruptReads.Add(1)
	return &Error{Op: op, Seq: first, Last: rangeEnd(first, last), Err: fmt.Errorf("%w: the storage reported a fatal error during this read: %v", ErrCorrupt, g.l.faults.firstFatal())}
}

// readErr wraps a Pebble error met while reading seqs first..last (last 0:
// just first) for operation op. Storage corruption (a damaged block,
// a missing or truncated file) becomes ErrCorrupt and is counted in
// Stats.CorruptReads; the range is narrowed to the damaged file's bounds
// when those are event keys.
func (l *Ledger) readErr(op string, first, last Seq, err error) error {
	if err == nil {
		return nil
	}
	first, last, corrupt := classifyRead(first, last, err)
	if !corrupt {
		return &Error{Op: op, Seq: first, Last: rangeEnd(first, last), Err: err}
	}
	l.corruptReads.Add(1)
	l.logger.Error("ledger: storage corruption: events cannot be read", "op", op, "first", first, "last", last, "err", firstLine(err))
	return &Error{Op: op, Seq: first, Last: rangeEnd(first, last), Err: &corruptError{cause: err}}
}

// corruptError is ErrCorrupt with the Pebble error that revealed it: its
// text is Pebble's first line (the file, block and checksum), without the
// stack traces and details Pebble's errors carry; errors.Is sees both.
type corruptError struct{ cause error }

func (e *corruptError) Error() string {
	return ErrCorrupt.Error() + ": storage damaged (run verify): " + firstLine(e.cause)
}
func (e *corruptError) Unwrap() []error { return []error{ErrCorrupt, e.cause} }

// firstLine is the first line of err's text (Pebble's errors append
// details and stack traces on further lines).
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// classifyRead reports whether err is storage corruption and narrows
// first..last to the damaged file's event keys when Pebble names them.
// It is shared with ledger/verify through ledger/internal/store.
func classifyRead(first, last Seq, err error) (Seq, Seq, bool) {
	info := pebble.ExtractDataCorruptionInfo(err)
	if info == nil && !pebble.IsCorruptionError(err) {
		return first, last, false
	}
	if info != nil && last > first {
		if lo, ok := eventSeq(info.Bounds.Start); ok && lo > first && lo <= last {
			first = lo
		}
		if hi, ok := eventSeq(info.Bounds.End.Key); ok && hi >= first && hi < last {
			last = hi
		}
	}
	return first, last, true
}

// eventSeq is the seq of an e/ key.
func eventSeq(k []byte) (Seq, bool) {
	if len(k) != len(keys.PrefixEvent)+8 || string(k[:len(keys.PrefixEvent)]) != keys.PrefixEvent {
		return 0, false
	}
	return keys.SeqOf(k)
}

// rangeEnd is the Last of an Error about first..last: 0 unless it is a
// range of more than one seq.
func rangeEnd(first, last Seq) Seq {
	if last > first {
		return last
	}
	return 0
}

// readOnlyFS is the file system of a read-only open: it reads and refuses
// every write, so nothing in the directory is created, truncated or
// removed even if Pebble tried (its ReadOnly mode creates and fcntl-locks
// its LOCK file, which fails on a read-only mount and truncates the file
// elsewhere). Its Lock takes no lock: the ledger's own shared flock (when
// it can be had) is what keeps writers out.
type readOnlyFS struct{ vfs.FS }

var errReadOnlyFS = errors.New("ledger: read-only open: refusing to write")

func (readOnlyFS) Create(string, vfs.DiskWriteCategory) (vfs.File, error) { return nil, errReadOnlyFS }
func (readOnlyFS) Link(string, string) error                              { return errReadOnlyFS }
func (readOnlyFS) OpenReadWrite(string, vfs.DiskWriteCategory, ...vfs.OpenOption) (vfs.File, error) {
	return nil, errReadOnlyFS
}
func (readOnlyFS) Remove(string) error         { return errReadOnlyFS }
func (readOnlyFS) RemoveAll(string) error      { return errReadOnlyFS }
func (readOnlyFS) Rename(string, string) error { return errReadOnlyFS }
func (readOnlyFS) ReuseForWrite(string, string, vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, errReadOnlyFS
}
func (readOnlyFS) MkdirAll(string, os.FileMode) error { return errReadOnlyFS }
func (readOnlyFS) Lock(string) (io.Closer, error)     { return io.NopCloser(nil), nil }

// LockState says how a read-only open holds the directory.
type LockState int

const (
	// LockExclusive: opened for appends, with the exclusive lock.
	LockExclusive LockState = iota
	// LockShared: opened read-only with a shared lock: writers (serve,
	// append) are refused while it is open; other readers are not.
	LockShared
	// LockNone: opened read-only without a lock (the lock file could not
	// be opened or locked, e.g. on a file system without flock): nothing
	// keeps a writer from changing the directory meanwhile.
	LockNone
)

// lockShared takes a shared lock (lockFileNB) on dir's lock file without
// creating or writing anything. A writer holding it yields ErrLocked; any other failure
// to lock yields LockNone and why.
func lockShared(dir string) (*os.File, LockState, string, error) {
	f, err := os.Open(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, LockNone, "open lock file: " + err.Error(), nil
	}
	if err := lockFileNB(f, false); err != nil {
		f.Close()
		if errors.Is(err, errLockHeld) {
			return nil, LockNone, "", &Error{Op: "open", Err: fmt.Errorf("%w: %s", ErrLocked, dir)}
		}
		return nil, LockNone, lockCall + ": " + err.Error(), nil
	}
	return f, LockShared, "", nil
}

// errLockHeld is lockFileNB's answer when another open file holds a
// conflicting lock (flock's EWOULDBLOCK, LockFileEx's lock violation).
var errLockHeld = errors.New("lock held by another open file")

// lockFile is locked (lockFileNB: flock on unix, LockFileEx on windows)
// before Pebble opens the directory. Pebble has its own lock, but its error
// differs within and across processes; a lock on a fresh open file
// conflicts in both cases, so callers get ErrLocked either way and Pebble
// never sees a second opener.
const lockFile = "LEASELEDGER.LOCK"

// requireLedger checks that dir exists and holds a Pebble database.
func requireLedger(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, lockFile)); err != nil {
		return &Error{Op: "open", Err: fmt.Errorf("%w: %s", ErrNoLedger, dir)}
	}
	return nil
}

func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, &Error{Op: "open", Err: err}
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, &Error{Op: "open", Err: err}
	}
	if err := lockFileNB(f, true); err != nil {
		f.Close()
		if errors.Is(err, errLockHeld) {
			return nil, &Error{Op: "open", Err: fmt.Errorf("%w: %s", ErrLocked, dir)}
		}
		return nil, &Error{Op: "open", Err: fmt.Errorf("lock %s: %w", dir, err)}
	}
	return f, nil
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

// pebbleOptions is the Pebble configuration of a ledger opened with opts:
// the base options, Pebble's logger and event listener routed to f (a
// fatal error or a damaged file never panics, see pebbleLogger), and for a
// read-only open Pebble's read-only mode over a file system that refuses
// every write.
func pebbleOptions(opts Options, f *faults) *pebble.Options {
	po := DefaultPebbleOptions()
	if opts.PebbleOptions != nil {
		po = opts.PebbleOptions.Clone()
	}
	po.FormatMajorVersion = pebble.FormatNewest
	po.Logger = pebbleLogger{f}
	el := f.eventListener()
	if po.EventListener != nil {
		el = pebble.TeeEventListener(el, *po.EventListener)
	}
	po.EventListener = &el
	if opts.ReadOnly {
		// The stored format is read as it is: raising it would write.
		po.FormatMajorVersion = pebble.FormatDefault
		po.ReadOnly = true
		if po.FS == nil {
			po.FS = vfs.Default
		}
		po.FS = readOnlyFS{po.FS}
	}
	return po
}

// MinFreeBytes is the free space a writable open requires on the data
// directory's file system beyond the write-ahead logs it replays (which
// Pebble rewrites as an sstable before Open returns). With less, Open
// fails at once with ErrNoSpace: Pebble would retry the failing flush
// inside its Open for ever, at full CPU, writing and deleting a partial
// file each time.
const MinFreeBytes = 1 << 20

// checkSpace refuses a writable open of dir on a file system without room
// for its write-ahead logs plus MinFreeBytes.
func checkSpace(dir string) error {
	free, err := freeBytes(dir)
	if err != nil {
		return nil // a new directory, or no statfs: Pebble will say
	}
	var wal uint64
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, name := range logs {
		if fi, err := os.Stat(name); err == nil {
			wal += uint64(fi.Size())
		}
	}
	if free < wal+MinFreeBytes {
		return &Error{Op: "open", Err: fmt.Errorf("%w: %s has %d bytes free; opening for appends needs %d (write-ahead logs to replay) + MinFreeBytes=%d; read commands open read-only and need none",
			ErrNoSpace, dir, free, wal, MinFreeBytes)}
	}
	return nil
}

// spaceFS parks the background flush of an open that was given up for
// lack of space (see openBounded) on its next file creation, so that it
// neither spins nor writes; every other call passes through.
type spaceFS struct {
	vfs.FS
	f *faults
}

func (s spaceFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if s.f.abandoned.Load() {
		select {} // parked until the process exits
	}
	return s.FS.Create(name, c)
}

// openBounded opens Pebble for appends (or read-only) and gives up with
// ErrNoSpace as soon as Pebble reports that the disk is full while it
// opens, instead of waiting for ever on its flush retry loop. A given-up
// open leaves one parked goroutine and the database's files open until the
// process exits (Pebble offers no way to cancel an Open); the directory
// cannot be reopened by this process. The CLI exits on the error.
func openBounded(opts Options, f *faults) (*pebble.DB, error) {
	po := pebbleOptions(opts, f)
	if opts.ReadOnly {
		return pebble.Open(opts.Dir, po)
	}
	if err := checkSpace(opts.Dir); err != nil {
		return nil, err
	}
	if po.FS == nil {
		po.FS = vfs.Default
	}
	if !opts.plainWAL {
		chunk := int64(walFillChunk)
		if opts.walFillChunk > 0 {
			chunk = opts.walFillChunk
		}
		po.FS = walFillFS{po.FS, chunk}
	}
	po.FS = spaceFS{po.FS, f}
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		db, err := pebble.Open(opts.Dir, po)
		done <- result{db, err}
	}()
	select {
	case r := <-done:
		return r.db, r.err
	case <-f.noSpace:
		select {
		case r := <-done:
			return r.db, r.err
		default:
		}
		f.abandoned.Store(true)
		return nil, fmt.Errorf("%w: Pebble cannot flush the replayed write-ahead log: %w", ErrNoSpace, f.firstFatal())
	}
}
