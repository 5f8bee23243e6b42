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
	"github.com/leaseledger/leaseledger/schemas"
	"github.com/transparency-dev/merkle/compact"
)

// legacyCheck is the sequential check this package ran before the pipeline
// and the index sums (24 bytes per event, one core), kept verbatim as the
// exact reference of the property tests and the "before" of the benchmarks.
func legacyCheck(ctx context.Context, db *pebble.DB, readErr readErrFunc, vo Options) (Report, error) {
	progress := vo.Progress
	anchors := map[ledger.Seq]events.Hash{}
	for _, a := range vo.Anchors {
		anchors[a.Seq] = a.Hash
	}
	checkpoints := map[ledger.Seq][]Checkpoint{}
	for _, c := range vo.Checkpoints {
		checkpoints[c.Size] = append(checkpoints[c.Size], c)
	}
	var tree *compact.Range // Merkle range over the events, only with checkpoints
	if len(checkpoints) > 0 {
		tree = (&compact.RangeFactory{Hash: hasher.HashChildren}).NewEmptyRange(0)
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

	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(keys.PrefixEvent), UpperBound: keys.UpperBound([]byte(keys.PrefixEvent))})
	if err != nil {
		return Report{}, fmt.Errorf("verify: iterate: %w", err)
	}
	defer it.Close()

	var prev events.Hash
	var want ledger.Seq = 1
	fps := &legacyFingerprints{seed: maphash.MakeSeed()}
	var rep Report
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		key := it.Key()
		seq, ok := keys.SeqOf(key)
		if !ok || len(key) != len(keys.PrefixEvent)+8 {
			return rep, fault("chain", want, FaultUndecodable, "malformed event key")
		}
		if seq != want {
			return rep, fault("chain", want, FaultGap, fmt.Sprintf("next stored event is seq %d", seq))
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return rep, unreadable("chain", seq, 0, readErr, err)
		}
		env, err := events.Decode(raw)
		if err != nil {
			return rep, fault("chain", seq, FaultUndecodable, err.Error())
		}
		if env.Seq != seq {
			return rep, fault("chain", seq, FaultSeqMismatch, fmt.Sprintf("envelope says seq %d", env.Seq))
		}
		if !env.CheckHash() {
			return rep, fault("chain", seq, FaultBadHash, "")
		}
		if env.Prev != prev {
			return rep, fault("chain", seq, FaultBrokenLink, "prev is not the hash of seq "+fmt.Sprint(seq-1))
		}
		if err := validator.ValidateEnvelope(raw); err != nil {
			return rep, fault("chain", seq, FaultSchemaInvalid, err.Error())
		}
		if tree != nil {
			if err := tree.Append(hasher.HashLeaf(raw), nil); err != nil {
				return rep, fmt.Errorf("verify: merkle: %w", err)
			}
			if cs := checkpoints[seq]; len(cs) > 0 {
				root, err := tree.GetRootHash(nil)
				if err != nil {
					return rep, fmt.Errorf("verify: merkle: %w", err)
				}
				for _, c := range cs {
					if !bytes.Equal(root, c.Root) || c.Head != env.Hash {
						return rep, fault("checkpoint", seq, FaultCheckpoint,
							fmt.Sprintf("the Merkle root or chain hash over seqs 1..%d differs from the checkpoint of %q", seq, c.Origin))
					}
				}
				delete(checkpoints, seq)
			}
		}
		if want, ok := anchors[seq]; ok {
			if want != env.Hash {
				return rep, fault("anchor", seq, FaultAnchor, "hash differs from the anchor")
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
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		// The events from want on cannot be read; how far the damage goes
		// is the damaged file's range when Pebble names it, else up to the
		// stored head.
		return rep, unreadable("chain", want, max(stored.Seq, want), readErr, err)
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
	n, err := legacyIndexes(ctx, snap, fps, readErr)
	rep.Indexes = n
	if err != nil {
		return rep, err
	}
	if progress != nil {
		progress(uint64(last.Seq), uint64(last.Seq))
	}
	return rep, nil
}

// legacyFingerprints holds, per seq, a fingerprint of the identifier each
// index should hold for it (0: no entry). The fingerprint is a 64-bit
// maphash under a seed drawn at random for each verification, so nobody can
// prepare an identifier that collides with another: a forged index entry is
// caught, and the index pass need not decode events again.
type legacyFingerprints struct {
	seed maphash.Seed
	fps  [][3]uint64
}

func (f *legacyFingerprints) fingerprint(id string) uint64 {
	if id == "" {
		return 0
	}
	return maphash.String(f.seed, id) | 1
}

func (f *legacyFingerprints) add(env *events.Envelope) {
	f.fps = append(f.fps, [3]uint64{f.fingerprint(env.Activation), f.fingerprint(env.Session), f.fingerprint(string(env.Kind))})
}

// verifyIndexes checks that every index entry names an existing event
// carrying the indexed identifier, and that no entry is missing: a missing
// entry is reported at the seq of the event that lacks it.
func legacyIndexes(ctx context.Context, snap *pebble.Snapshot, f *legacyFingerprints, readErr readErrFunc) (int, error) {
	n := 0
	fps := f.fps
	seen := make([]uint64, (len(fps)+63)/64) // seqs with an entry in the current index
	for i, prefix := range keys.IndexPrefixes {
		clear(seen)
		it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: keys.UpperBound([]byte(prefix))})
		if err != nil {
			return n, unreadable("indexes", 0, 0, readErr, err)
		}
		var last ledger.Seq // the last entry read, for a damaged block's range
		for ok := it.First(); ok; ok = it.Next() {
			key := it.Key()
			seq, ok := keys.SeqOf(key)
			if !ok || len(key) < len(prefix)+2+8 || key[len(key)-9] != '/' {
				it.Close()
				return n, fault("indexes", 0, FaultIndex, prefix+" index: malformed key")
			}
			if seq == 0 || int(seq) > len(fps) {
				it.Close()
				return n, fault("indexes", seq, FaultIndex, prefix+" index entry beyond the head")
			}
			if f.fingerprint(string(key[len(prefix):len(key)-9])) != fps[seq-1][i] {
				it.Close()
				return n, fault("indexes", seq, FaultIndex, prefix+" index entry does not match the event")
			}
			seen[(seq-1)/64] |= 1 << ((seq - 1) % 64)
			last = seq
			n++
		}
		if err := it.Error(); err != nil {
			it.Close()
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			// Index keys are ordered by identifier, then seq: the damage
			// is known to lie after the last entry read, not which seqs
			// it covers.
			return n, unreadable("indexes", last+1, ledger.Seq(len(fps)), readErr, fmt.Errorf("%s index: %w", prefix, err))
		}
		if err := it.Close(); err != nil {
			return n, fmt.Errorf("verify: iterate index: %w", err)
		}
		for j, fp := range fps {
			if fp[i] != 0 && seen[j/64]&(1<<(j%64)) == 0 {
				return n, fault("indexes", ledger.Seq(j+1), FaultIndex, prefix+" index entry missing for this event")
			}
		}
	}
	return n, nil
}
