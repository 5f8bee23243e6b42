package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/schemas"
	"github.com/transparency-dev/merkle/compact"
)

// Fault names what Verify found wrong with an event.
type Fault string

// Faults, in the order Verify checks them for each event.
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
	// FaultAnchor: the chain does not contain an anchor head given to Verify
	// (it was rewritten or truncated after the anchor was recorded).
	FaultAnchor Fault = "anchor"
	// FaultCheckpoint: the log does not match a signed checkpoint given to
	// Verify (an event up to its size changed, or the log is shorter).
	FaultCheckpoint Fault = "checkpoint"
)

// ErrVerify is wrapped by every *VerifyError.
var ErrVerify = errors.New("ledger: verification failed")

// VerifyError names the first bad seq and why.
type VerifyError struct {
	Seq    Seq
	Fault  Fault
	Detail string
}

func (e *VerifyError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("ledger: verification failed at seq %d: %s", e.Seq, e.Fault)
	}
	return fmt.Sprintf("ledger: verification failed at seq %d: %s: %s", e.Seq, e.Fault, e.Detail)
}

// Unwrap makes errors.Is(err, ErrVerify) true.
func (e *VerifyError) Unwrap() error { return ErrVerify }

// VerifyReport summarises a successful verification.
type VerifyReport struct {
	Events  Seq  // events checked
	Head    Head // the verified head
	Indexes int  // index entries checked
}

// Progress is called periodically during long operations with the number
// of events done and the total expected.
type Progress func(done, total uint64)

// progressEvery is how many events pass between Progress calls.
const progressEvery = 4096

// Verify re-reads the whole log: every event must decode canonically, sit
// under its own seq with no gap, hash correctly, link to its predecessor and
// validate against its JSON Schema; m/head must name the last event; every
// index entry must point to an event that carries its key. The first fault
// is returned as a *VerifyError naming the seq.
func (l *Ledger) Verify(ctx context.Context, progress Progress) (VerifyReport, error) {
	end, err := l.beginRead()
	if err != nil {
		return VerifyReport{}, err
	}
	defer end()
	return verifyDB(ctx, l.db, VerifyOptions{Progress: progress})
}

// VerifyOptions configures a verification.
type VerifyOptions struct {
	// Progress, when set, is called periodically.
	Progress Progress
	// Anchors are heads recorded earlier, outside this directory (a head
	// printed by `leaseledger head`, a published checkpoint). The chain must
	// contain each one: same seq, same hash. The chain alone cannot reveal
	// that its tail was cut off and m/head rewritten to match — only an
	// anchor kept elsewhere can.
	Anchors []Head
	// Checkpoints are signature-checked checkpoints (see ParseCheckpoint):
	// the Merkle root over the first Size events and the chain hash of event
	// Size must match each one.
	Checkpoints []Checkpoint
}

// VerifyBytesPerEvent is the memory Verify needs per event: three 64-bit
// index fingerprints. A log of 10^8 events needs 2.4 GB to verify.
const VerifyBytesPerEvent = 24

func verifyDB(ctx context.Context, db *pebble.DB, vo VerifyOptions) (VerifyReport, error) {
	progress := vo.Progress
	anchors := map[Seq]events.Hash{}
	for _, a := range vo.Anchors {
		anchors[a.Seq] = a.Hash
	}
	checkpoints := map[Seq][]Checkpoint{}
	for _, c := range vo.Checkpoints {
		checkpoints[c.Size] = append(checkpoints[c.Size], c)
	}
	var tree *compact.Range // Merkle range over the events, only with checkpoints
	if len(checkpoints) > 0 {
		tree = (&compact.RangeFactory{Hash: hasher.HashChildren}).NewEmptyRange(0)
	}
	validator, err := schemas.Default()
	if err != nil {
		return VerifyReport{}, fmt.Errorf("ledger: load schemas: %w", err)
	}
	snap := db.NewSnapshot()
	defer snap.Close()

	var stored Head
	if v, closer, err := snap.Get([]byte(keyHead)); err == nil {
		h, ok := decodeHead(v)
		closer.Close()
		if !ok {
			return VerifyReport{}, &VerifyError{Seq: 0, Fault: FaultHeadMismatch, Detail: "m/head is malformed"}
		}
		stored = h
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return VerifyReport{}, fmt.Errorf("ledger: read head: %w", err)
	}

	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(prefixEvent), UpperBound: upperBound([]byte(prefixEvent))})
	if err != nil {
		return VerifyReport{}, fmt.Errorf("ledger: iterate: %w", err)
	}
	defer it.Close()

	var prev events.Hash
	var want Seq = 1
	fps := &indexFingerprints{seed: maphash.MakeSeed()}
	var rep VerifyReport
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		key := it.Key()
		seq, ok := seqFromKey(key)
		if !ok || len(key) != len(prefixEvent)+8 {
			return rep, &VerifyError{Seq: want, Fault: FaultUndecodable, Detail: "malformed event key"}
		}
		if seq != want {
			return rep, &VerifyError{Seq: want, Fault: FaultGap, Detail: fmt.Sprintf("next stored event is seq %d", seq)}
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return rep, fmt.Errorf("ledger: read seq %d: %w", seq, err)
		}
		env, err := events.Decode(raw)
		if err != nil {
			return rep, &VerifyError{Seq: seq, Fault: FaultUndecodable, Detail: err.Error()}
		}
		if Seq(env.Seq) != seq {
			return rep, &VerifyError{Seq: seq, Fault: FaultSeqMismatch, Detail: fmt.Sprintf("envelope says seq %d", env.Seq)}
		}
		if !env.CheckHash() {
			return rep, &VerifyError{Seq: seq, Fault: FaultBadHash}
		}
		if env.Prev != prev {
			return rep, &VerifyError{Seq: seq, Fault: FaultBrokenLink, Detail: "prev is not the hash of seq " + fmt.Sprint(seq-1)}
		}
		if err := validator.ValidateEnvelope(raw); err != nil {
			return rep, &VerifyError{Seq: seq, Fault: FaultSchemaInvalid, Detail: err.Error()}
		}
		if tree != nil {
			if err := tree.Append(hasher.HashLeaf(raw), nil); err != nil {
				return rep, fmt.Errorf("ledger: merkle: %w", err)
			}
			if cs := checkpoints[seq]; len(cs) > 0 {
				root, err := tree.GetRootHash(nil)
				if err != nil {
					return rep, fmt.Errorf("ledger: merkle: %w", err)
				}
				for _, c := range cs {
					if !bytes.Equal(root, c.Root) || c.Head != env.Hash {
						return rep, &VerifyError{Seq: seq, Fault: FaultCheckpoint,
							Detail: fmt.Sprintf("the Merkle root or chain hash over seqs 1..%d differs from the checkpoint of %q", seq, c.Origin)}
					}
				}
				delete(checkpoints, seq)
			}
		}
		if want, ok := anchors[seq]; ok {
			if want != env.Hash {
				return rep, &VerifyError{Seq: seq, Fault: FaultAnchor, Detail: "hash differs from the anchor"}
			}
			delete(anchors, seq)
		}
		prev = env.Hash
		fps.add(&env)
		rep.Events = seq
		want++
		if progress != nil && seq%progressEvery == 0 {
			progress(uint64(seq), uint64(max(stored.Seq, seq)))
		}
	}
	if err := it.Error(); err != nil {
		return rep, fmt.Errorf("ledger: iterate: %w", err)
	}
	last := Head{Seq: want - 1, Hash: prev}
	if stored != last {
		// A truncated tail (deleted last events) shows up here: the head was
		// written in the same batch as the event it names.
		return rep, &VerifyError{Seq: min(stored.Seq, last.Seq) + 1, Fault: FaultHeadMismatch,
			Detail: fmt.Sprintf("m/head names seq %d but the chain ends at seq %d", stored.Seq, last.Seq)}
	}
	for size, cs := range checkpoints {
		if size == 0 {
			if !bytes.Equal(cs[0].Root, hasher.EmptyRoot()) {
				return rep, &VerifyError{Seq: 0, Fault: FaultCheckpoint, Detail: "empty checkpoint with a non-empty root"}
			}
			continue
		}
		return rep, &VerifyError{Seq: min(size, last.Seq+1), Fault: FaultCheckpoint,
			Detail: fmt.Sprintf("the chain ends at seq %d but a checkpoint covers %d events", last.Seq, size)}
	}
	for seq := range anchors {
		// An anchored seq beyond the chain's end: events were cut off.
		return rep, &VerifyError{Seq: min(seq, last.Seq+1), Fault: FaultAnchor,
			Detail: fmt.Sprintf("the chain ends at seq %d but an anchor names seq %d", last.Seq, seq)}
	}
	rep.Head = last
	n, err := verifyIndexes(ctx, snap, fps)
	rep.Indexes = n
	if err != nil {
		return rep, err
	}
	if progress != nil {
		progress(uint64(last.Seq), uint64(last.Seq))
	}
	return rep, nil
}

// indexFingerprints holds, per seq, a fingerprint of the identifier each
// index should hold for it (0: no entry). The fingerprint is a 64-bit
// maphash under a seed drawn at random for each verification, so nobody can
// prepare an identifier that collides with another: a forged index entry is
// caught, and the index pass need not decode events again.
type indexFingerprints struct {
	seed maphash.Seed
	fps  [][3]uint64
}

var indexPrefixes = [3]string{prefixActivation, prefixSession, prefixKind}

func (f *indexFingerprints) fingerprint(id string) uint64 {
	if id == "" {
		return 0
	}
	return maphash.String(f.seed, id) | 1
}

func (f *indexFingerprints) add(env *events.Envelope) {
	f.fps = append(f.fps, [3]uint64{f.fingerprint(env.Activation), f.fingerprint(env.Session), f.fingerprint(string(env.Kind))})
}

// verifyIndexes checks that every index entry names an existing event
// carrying the indexed identifier, and that no entry is missing.
func verifyIndexes(ctx context.Context, snap *pebble.Snapshot, f *indexFingerprints) (int, error) {
	n := 0
	fps := f.fps
	for i, prefix := range indexPrefixes {
		want := 0
		for _, fp := range fps {
			if fp[i] != 0 {
				want++
			}
		}
		it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: upperBound([]byte(prefix))})
		if err != nil {
			return n, fmt.Errorf("ledger: iterate index: %w", err)
		}
		got := 0
		for ok := it.First(); ok; ok = it.Next() {
			key := it.Key()
			seq, ok := seqFromKey(key)
			if !ok || len(key) < len(prefix)+2+8 || key[len(key)-9] != '/' {
				it.Close()
				return n, &VerifyError{Seq: 0, Fault: FaultIndex, Detail: prefix + " index: malformed key"}
			}
			if seq == 0 || int(seq) > len(fps) {
				it.Close()
				return n, &VerifyError{Seq: seq, Fault: FaultIndex, Detail: prefix + " index entry beyond the head"}
			}
			if f.fingerprint(string(key[len(prefix):len(key)-9])) != fps[seq-1][i] {
				it.Close()
				return n, &VerifyError{Seq: seq, Fault: FaultIndex, Detail: prefix + " index entry does not match the event"}
			}
			got++
			n++
		}
		if err := it.Close(); err != nil {
			return n, fmt.Errorf("ledger: iterate index: %w", err)
		}
		if got != want {
			return n, &VerifyError{Seq: 0, Fault: FaultIndex, Detail: fmt.Sprintf("%s index has %d entries, the events need %d", prefix, got, want)}
		}
	}
	return n, nil
}

// VerifyDir verifies the ledger in dir without opening it for appends: it
// takes the directory lock, opens Pebble read-only and runs the same checks
// as Verify. Unlike Open it does not refuse a log whose head is
// inconsistent; finding and naming that is its job.
func VerifyDir(ctx context.Context, dir string, progress Progress) (VerifyReport, error) {
	return VerifyDirWith(ctx, dir, VerifyOptions{Progress: progress})
}

// VerifyDirWith is VerifyDir with options (anchors).
func VerifyDirWith(ctx context.Context, dir string, vo VerifyOptions) (VerifyReport, error) {
	if err := requireLedger(dir); err != nil {
		return VerifyReport{}, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return VerifyReport{}, err
	}
	defer lock.Close()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: quietLogger{slog.Default()}})
	if err != nil {
		return VerifyReport{}, fmt.Errorf("ledger: open %s read-only: %w", dir, err)
	}
	defer db.Close()
	return verifyDB(ctx, db, vo)
}
