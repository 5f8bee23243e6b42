// Package verify owns the checks of a ledger that do not trust it: it
// re-reads a whole log (every event canonical, gapless, hashed, linked and
// valid against its JSON Schema; the head; every index entry) and it makes,
// signs, parses and checks signed checkpoints (an RFC 6962 Merkle root and
// the chain hash in a C2SP signed note).
//
// There is one entry point per input: Ledger for an open ledger, Dir for a
// data directory that no process has open. Both take Options.
package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/leaseledger/leaseledger/ledger/internal/store"
	"github.com/leaseledger/leaseledger/schemas"
	"github.com/transparency-dev/merkle/compact"
)

// Fault names what a verification found wrong with an event.
type Fault string

// Faults, in the order they are checked for each event (the index and
// tree checks run after the last event).
const (
	// FaultGap: the stored keys skip this seq (an event was deleted).
	FaultGap Fault = "gap"
	// FaultUndecodable: the bytes are not a canonical envelope of a known kind.
	FaultUndecodable Fault = "undecodable"
	// FaultSeqMismatch: the envelope's seq differs from its key (moved or swapped).
	FaultSeqMismatch Fault = "seq_mismatch"
	// FaultBadHash: the hash is not SHA-256(prev ‖ canonical bytes without hash).
	FaultBadHash Fault = "bad_hash"
	// FaultBrokenLink: prev is not the previous event's hash.
	FaultBrokenLink Fault = "broken_link"
	// FaultSchemaInvalid: the event does not validate against its JSON Schema.
	FaultSchemaInvalid Fault = "schema_invalid"
	// FaultHeadMismatch: m/head does not name the last stored event.
	FaultHeadMismatch Fault = "head_mismatch"
	// FaultIndex: a secondary index entry points to an event that does not
	// carry that activation, session or kind.
	FaultIndex Fault = "index"
	// FaultAnchor: the chain does not contain an anchor head given in Options
	// (it was rewritten or truncated after the anchor was recorded).
	FaultAnchor Fault = "anchor"
	// FaultCheckpoint: the log does not match a signed checkpoint given in
	// Options (an event up to its size changed, or the log is shorter).
	FaultCheckpoint Fault = "checkpoint"
	// FaultTree: the stored Merkle node index (t/ keys) does not hold
	// exactly the nodes the events give, within the leaves it covers
	// (min(m/tree, head)); Seq is the first leaf of the lowest bad node.
	FaultTree Fault = "tree"
	// FaultUnreadable: the storage is damaged (a block fails its checksum,
	// a file is missing or truncated) and the events from Seq on (through
	// Last when known) cannot be read. Cause wraps ledger.ErrCorrupt.
	FaultUnreadable Fault = "unreadable"
)

// Errors callers branch on.
var (
	// ErrVerify is wrapped by every *Error: the log does not pass.
	ErrVerify = errors.New("verify: verification failed")
	// ErrCheckpoint is wrapped by every failure to make, sign or parse a
	// checkpoint, and by a checkpoint a log cannot satisfy when it is made.
	ErrCheckpoint = errors.New("verify: checkpoint")
)

// Error names the first fault found and where, shaped like *os.PathError:
// Op is the check that failed ("chain", "head", "indexes", "tree", "anchor",
// "checkpoint"), Seq the first bad seq (0 when the fault is not one
// event's), Last the end of the range Seq..Last concerned (0: one seq),
// Fault what is wrong and Detail a human explanation. Err is ErrVerify, so
// errors.Is(err, ErrVerify) holds for every fault; Cause, for
// FaultUnreadable, is the storage error (a *ledger.Error wrapping
// ledger.ErrCorrupt), which errors.Is and errors.As also see.
type Error struct {
	Op     string
	Seq    ledger.Seq
	Last   ledger.Seq
	Fault  Fault
	Detail string
	Err    error
	Cause  error
}

// Error returns "verify <op>: failed at seq <n>: <fault>[: <detail>]", or
// "… failed at seqs <n>-<m>: …" for a range.
func (e *Error) Error() string {
	s := fmt.Sprintf("verify %s: failed at seq %d: %s", e.Op, e.Seq, e.Fault)
	if e.Last > e.Seq {
		s = fmt.Sprintf("verify %s: failed at seqs %d-%d: %s", e.Op, e.Seq, e.Last, e.Fault)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns Err (ErrVerify) and Cause when there is one.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// fault builds the *Error of a failed check.
func fault(op string, seq ledger.Seq, f Fault, detail string) *Error {
	return &Error{Op: op, Seq: seq, Fault: f, Detail: detail, Err: ErrVerify}
}

// Report summarises a successful verification.
type Report struct {
	Events  ledger.Seq  // events checked
	Head    ledger.Head // the verified head
	Indexes int         // index entries checked
	// TreeNodes is the number of stored Merkle nodes checked.
	TreeNodes int
	// Unlocked, for Dir, says why the directory could not be locked
	// against writers while it was read (empty: it was held with a shared
	// lock, so no writer could open it meanwhile).
	Unlocked string
}

// Progress is called periodically during long operations with the number
// of events done and the total expected.
type Progress func(done, total uint64)

// progressEvery is how many events pass between Progress calls.
const progressEvery = 4096

// Options configures a verification.
type Options struct {
	// Progress, when set, is called periodically.
	Progress Progress
	// Anchors are heads recorded earlier, outside this directory (a head
	// printed by `leaseledger head`, a published checkpoint). The chain must
	// contain each one: same seq, same hash. The chain alone cannot reveal
	// that its tail was cut off and m/head rewritten to match — only an
	// anchor kept elsewhere can.
	Anchors []ledger.Head
	// Checkpoints are signature-checked checkpoints (see ParseCheckpoint):
	// the Merkle root over the first Size events and the chain hash of event
	// Size must match each one.
	Checkpoints []Checkpoint
	// Tree also checks the stored Merkle node index (the t/ keys the
	// ledger serves proofs from) against the events: FaultTree. It is a
	// separate check because the index is derived data that a writer of
	// the directory may leave stale while the chain itself verifies.
	Tree bool

	// buckets and window, when set (tests), replace IndexBuckets and
	// LocaliseEvents so that small logs exercise many seqs per bucket and
	// several localisation windows.
	buckets, window int
}

// Ledger verifies an open ledger while it keeps serving: it reads a Pebble
// snapshot, so appends made meanwhile are neither checked nor disturbed.
// The first fault is returned as an *Error naming the seq.
func Ledger(ctx context.Context, l *ledger.Ledger, o Options) (_ Report, err error) {
	a, err := store.OfLedger(l)
	if err != nil {
		return Report{}, err
	}
	defer release(a, &err)
	return check(ctx, a.DB, a.ReadErr, o)
}

// Dir verifies the ledger in dir without opening it for appends and
// without writing anything to the directory (it works on a read-only
// mount): it takes a shared lock on the directory when it can
// (ledger.ErrLocked while a writer has it open; Report.Unlocked says why
// when no lock could be had; ledger.ErrNoLedger when there is no ledger),
// opens the database read-only and runs the same checks as Ledger. Unlike
// ledger.Open it does not refuse a log whose head is inconsistent: finding
// and naming that is its job. Damaged storage is a FaultUnreadable naming
// the seqs, never a panic.
func Dir(ctx context.Context, dir string, o Options) (_ Report, err error) {
	a, err := store.OfDir(dir, pebbleOptions())
	if err != nil {
		return Report{}, err
	}
	defer release(a, &err)
	rep, err := check(ctx, a.DB, a.ReadErr, o)
	rep.Unlocked = a.Unlocked
	return rep, err
}

// readErrFunc wraps a storage error met reading seqs first..last; see
// store.Access.ReadErr.
type readErrFunc = func(op string, first, last uint64, err error) error

// unreadable is the fault of storage that cannot be read from seq first
// (through last when known).
func unreadable(op string, first, last ledger.Seq, readErr readErrFunc, err error) error {
	cause := readErr(op, uint64(first), uint64(last), err)
	if !errors.Is(cause, ledger.ErrCorrupt) {
		return fmt.Errorf("verify: read seq %d: %w", first, cause)
	}
	var le *ledger.Error
	if errors.As(cause, &le) && le.Seq != 0 {
		first, last = le.Seq, le.Last
	}
	ve := fault(op, first, FaultUnreadable, "the storage is damaged: "+cause.Error())
	ve.Last, ve.Cause = last, cause
	return ve
}

// verifyDB runs check with Pebble's errors classified without a ledger.
func verifyDB(ctx context.Context, db *pebble.DB, vo Options) (Report, error) {
	return check(ctx, db, func(op string, first, last uint64, err error) error {
		if pebble.IsCorruptionError(err) {
			return &ledger.Error{Op: op, Seq: ledger.Seq(first), Last: ledger.Seq(last), Err: fmt.Errorf("%w: %w", ledger.ErrCorrupt, err)}
		}
		return &ledger.Error{Op: op, Seq: ledger.Seq(first), Err: err}
	}, vo)
}

// release ends a's access (for Dir: closes the read-only database and
// unlocks the directory) and joins its error, if any, into *err.
func release(a store.Access, err *error) {
	if rerr := a.Release(); rerr != nil {
		*err = errors.Join(*err, rerr)
	}
}

// Every check reads one Pebble snapshot of db: event records (checked by
// the pipeline of pipeline.go), then m/head, anchors and checkpoints, then
// the index entries against the sums collected in the first pass.
func check(ctx context.Context, db *pebble.DB, readErr readErrFunc, vo Options) (Report, error) {
	progress := vo.Progress
	anchors := map[ledger.Seq]events.Hash{}
	for _, a := range vo.Anchors {
		anchors[a.Seq] = a.Hash
	}
	checkpoints := map[ledger.Seq][]Checkpoint{}
	for _, c := range vo.Checkpoints {
		checkpoints[c.Size] = append(checkpoints[c.Size], c)
	}
	validator, err := schemas.Default()
	if err != nil {
		return Report{}, fmt.Errorf("verify: load schemas: %w", err)
	}
	snap := db.NewSnapshot()
	defer snap.Close()

	var stored ledger.Head
	if v, closer, err := snap.Get([]byte(keys.Head)); err == nil {
		seq, hash, ok := keys.DecodeHead(v)
		closer.Close()
		if !ok {
			return Report{}, fault("head", 0, FaultHeadMismatch, "m/head is malformed")
		}
		stored = ledger.Head{Seq: seq, Hash: hash}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return Report{}, unreadable("head", 0, 0, readErr, fmt.Errorf("read m/head: %w", err))
	}

	treeSize, err := storedTreeSize(snap, readErr)
	if err != nil {
		return Report{}, err
	}

	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(keys.PrefixEvent), UpperBound: keys.UpperBound([]byte(keys.PrefixEvent))})
	if err != nil {
		return Report{}, fmt.Errorf("verify: iterate: %w", err)
	}
	buckets, window := IndexBuckets, LocaliseEvents
	if vo.buckets > 0 {
		buckets, window = vo.buckets, vo.window
	}
	cfg := &passConfig{validator: validator, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
	sums := newIndexSums(cfg, stored.Seq, buckets)
	var nodes *treeSums
	if vo.Tree {
		nodes = newTreeSums(cfg, min(treeSize, stored.Seq), buckets, window)
	} else {
		nodes = newTreeSums(cfg, 0, 1, window)
	}
	// The Merkle range over the events, for checkpoints and the node index.
	var tree *compact.Range
	var visit compact.VisitFn
	if len(checkpoints) > 0 || nodes.covered >= 1<<keys.TreeStoredLevel {
		tree = (&compact.RangeFactory{Hash: hasher.HashChildren}).NewEmptyRange(0)
		cfg.leaves = true
		if nodes.covered >= 1<<keys.TreeStoredLevel {
			visit = nodes.visit
		}
	}
	pass := startEventPass(ctx, it, cfg)
	defer func() {
		pass.stop()
		it.Close()
	}()

	var prev events.Hash
	var want ledger.Seq = 1
	var rep Report
	var endErr error
	for end := false; !end; {
		b := <-pass.ordered
		<-b.done
		for i := range b.items {
			x := &b.items[i]
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			seq := x.seq
			if !x.keyOK {
				return rep, fault("chain", want, FaultUndecodable, "malformed event key")
			}
			if seq != want {
				return rep, fault("chain", want, FaultGap, fmt.Sprintf("next stored event is seq %d", seq))
			}
			if x.readErr != nil {
				return rep, unreadable("chain", seq, 0, readErr, x.readErr)
			}
			if x.pre != "" {
				return rep, fault("chain", seq, x.pre, x.detail)
			}
			if x.prev != prev {
				return rep, fault("chain", seq, FaultBrokenLink, "prev is not the hash of seq "+fmt.Sprint(seq-1))
			}
			if x.post != "" {
				return rep, fault("chain", seq, x.post, x.detail)
			}
			if tree != nil {
				// The range keeps the slice it is given: the item is reused.
				if err := tree.Append(append([]byte(nil), x.leaf[:]...), visit); err != nil {
					return rep, fmt.Errorf("verify: merkle: %w", err)
				}
				if cs := checkpoints[seq]; len(cs) > 0 {
					root, err := tree.GetRootHash(nil)
					if err != nil {
						return rep, fmt.Errorf("verify: merkle: %w", err)
					}
					for _, c := range cs {
						if !bytes.Equal(root, c.Root) || c.Head != x.hash {
							return rep, fault("checkpoint", seq, FaultCheckpoint,
								fmt.Sprintf("the Merkle root or chain hash over seqs 1..%d differs from the checkpoint of %q", seq, c.Origin))
						}
					}
					delete(checkpoints, seq)
				}
			}
			if want, ok := anchors[seq]; ok {
				if want != x.hash {
					return rep, fault("anchor", seq, FaultAnchor, "hash differs from the anchor")
				}
				delete(anchors, seq)
			}
			prev = x.hash
			sums.add(x)
			rep.Events = seq
			want++
			if progress != nil && seq%progressEvery == 0 {
				progress(uint64(seq), uint64(max(stored.Seq, seq)))
			}
		}
		end, endErr = b.end, b.endErr
		pass.recycle(b)
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if endErr != nil {
		// The events from want on cannot be read; how far the damage goes
		// is the damaged file's range when Pebble names it, else up to the
		// stored head.
		return rep, unreadable("chain", want, max(stored.Seq, want), readErr, endErr)
	}
	last := ledger.Head{Seq: want - 1, Hash: prev}
	if stored != last {
		// A truncated tail (deleted last events) shows up here: the head was
		// written in the same batch as the event it names.
		return rep, fault("head", min(stored.Seq, last.Seq)+1, FaultHeadMismatch,
			fmt.Sprintf("m/head names seq %d but the chain ends at seq %d", stored.Seq, last.Seq))
	}
	for size, cs := range checkpoints {
		if size == 0 {
			if !bytes.Equal(cs[0].Root, hasher.EmptyRoot()) {
				return rep, fault("checkpoint", 0, FaultCheckpoint, "empty checkpoint with a non-empty root")
			}
			continue
		}
		return rep, fault("checkpoint", min(size, last.Seq+1), FaultCheckpoint,
			fmt.Sprintf("the chain ends at seq %d but a checkpoint covers %d events", last.Seq, size))
	}
	for seq := range anchors {
		// An anchored seq beyond the chain's end: events were cut off.
		return rep, fault("anchor", min(seq, last.Seq+1), FaultAnchor,
			fmt.Sprintf("the chain ends at seq %d but an anchor names seq %d", last.Seq, seq))
	}
	rep.Head = last
	n, err := verifyIndexes(ctx, snap, sums, last.Seq, readErr)
	rep.Indexes = n
	if err != nil {
		return rep, err
	}
	n, err = verifyTree(ctx, snap, nodes, readErr)
	rep.TreeNodes = n
	if err != nil {
		return rep, err
	}
	if progress != nil {
		progress(uint64(last.Seq), uint64(last.Seq))
	}
	return rep, nil
}
