package verify

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// The index check holds no per-event table. The event pass adds the keyed
// hash of every index entry each event should have (the whole key:
// prefix, identifier, seq) into one sum per index and seq range (bucket);
// the index pass adds the hash of every stored entry the same way. Equal
// sums mean equal sets of entries, except with negligible probability for
// entries not crafted against the per-run seeded hash (passConfig.keyHash:
// maphash, not a cryptographic PRF). Only a
// bucket whose sums differ is looked at again, with an exact table of at
// most LocaliseEvents seqs at a time, to name the same entry and seq as an
// exact check would: the first bad entry in key order (malformed, beyond
// the head, or not matching its event), else the lowest seq whose entry is
// missing.
const (
	// IndexBuckets is how many seq ranges each index's sums are kept for
	// (the ranges are sized from the stored head).
	IndexBuckets = 4096
	// LocaliseEvents bounds the seqs one exact second pass covers: a
	// damaged bucket costs at most this many table slots at a time.
	LocaliseEvents = 1 << 20
)

// MemoryBound is the documented bound of a verification's memory,
// independent of the log's length and of the number of cores: the
// pipeline's batches (copied bytes and per-event results), the sums of the
// three indexes and of the Merkle node index (expected and stored), the
// exact table of the second pass, doubled for the garbage collector's
// headroom (GOGC=100), plus BaseMemory. Measured as the peak RSS of
// `leaseledger verify` (TestVerifyMemoryBound). It holds for stored values
// up to events.MaxEventBytes: a larger one is a fault, never copied by the
// pass when Pebble stores it apart from its key, but a value stored in a
// table block is read once with that block.
const MemoryBound = 2*(InFlightBatches*(BatchBytes+BatchEvents*itemBytes)+
	2*(len(keys.IndexPrefixes)+1)*IndexBuckets*16+
	localiseBytes) + BaseMemory

// localiseBytes bounds the second pass's table: 8 bytes and a bit per seq
// for an index, or for the Merkle nodes (fewer than one per 8 leaves) a
// map entry of at most 128 bytes.
const localiseBytes = LocaliseEvents * 16

// BaseMemory is the part of MemoryBound that does not depend on the
// bounds above: the Go runtime, the compiled JSON Schemas, Pebble's block
// cache (its default, 8 MiB) and open tables, the Merkle compact range
// (at most 64 hashes) and the program's code and data. It is the measured
// peak RSS of TestVerifyMemoryBound minus the computed terms, rounded up
// with margin: a measured allowance, not a derivation.
const BaseMemory = 160 << 20

// sum128 is a keyed 128-bit hash, or a sum of them (each lane mod 2^64).
type sum128 [2]uint64

func (s *sum128) add(h sum128) { s[0] += h[0]; s[1] += h[1] }

// bucketing splits seqs 1..n into count ranges of span seqs; seqs beyond
// n fall into the last.
type bucketing struct {
	span  uint64
	count int
}

// newBucketing splits 1..n into count buckets (IndexBuckets; tests use
// fewer to exercise buckets of many seqs on small logs).
func newBucketing(n ledger.Seq, count int) bucketing {
	return bucketing{span: max(1, (uint64(n)+uint64(count)-1)/uint64(count)), count: count}
}

func (g bucketing) of(seq ledger.Seq) int {
	return int(min((uint64(seq)-1)/g.span, uint64(g.count-1)))
}

// bounds is the seq range of bucket b within 1..n (lo > hi: empty).
func (g bucketing) bounds(b int, n ledger.Seq) (lo, hi ledger.Seq) {
	lo = ledger.Seq(uint64(b)*g.span + 1)
	hi = n
	if b < g.count-1 {
		hi = min(n, ledger.Seq(uint64(b+1)*g.span))
	}
	return lo, hi
}

// indexSums is what the event pass leaves for the index pass.
type indexSums struct {
	cfg  *passConfig
	g    bucketing
	want [len(keys.IndexPrefixes)][]sum128
	// window is the most seqs one exact second pass covers (LocaliseEvents).
	window int
}

func newIndexSums(cfg *passConfig, head ledger.Seq, buckets, window int) *indexSums {
	s := &indexSums{cfg: cfg, g: newBucketing(head, buckets), window: window}
	for i := range s.want {
		s.want[i] = make([]sum128, buckets)
	}
	return s
}

// add records the expected index entries of one checked event.
func (s *indexSums) add(x *item) {
	b := s.g.of(x.seq)
	for j := range x.index {
		if x.hasIndex[j] {
			s.want[j][b].add(x.index[j])
		}
	}
}

// badEntry is the first bad index entry found, by its position in key
// order (pos < 0: none).
type badEntry struct {
	pos    int
	seq    ledger.Seq
	detail string
}

// indexEntry classifies an index key: its seq, or a bad entry's detail.
func indexEntry(prefix string, key []byte, n ledger.Seq) (ledger.Seq, string) {
	seq, ok := keys.SeqOf(key)
	if !ok || len(key) < len(prefix)+2+8 || key[len(key)-9] != '/' {
		return 0, prefix + " index: malformed key"
	}
	if seq == 0 || seq > n {
		return seq, prefix + " index entry beyond the head"
	}
	return seq, ""
}

// cancelled is ctx.Err() every cancelEvery entries (i counts them).
func cancelled(ctx context.Context, i int) error {
	if i%cancelEvery != 0 {
		return nil
	}
	return ctx.Err()
}

// verifyIndexes checks that every index entry names an existing event
// carrying the indexed identifier, and that no entry is missing: a missing
// entry is reported at the seq of the event that lacks it. n is the last
// verified seq.
func verifyIndexes(ctx context.Context, snap *pebble.Snapshot, s *indexSums, n ledger.Seq, readErr readErrFunc) (int, error) {
	count := 0
	got := make([]sum128, s.g.count)
	for i, prefix := range keys.IndexPrefixes {
		clear(got)
		it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: keys.UpperBound([]byte(prefix))})
		if err != nil {
			return count, unreadable("indexes", 0, 0, readErr, err)
		}
		bad := badEntry{pos: -1}
		var last ledger.Seq // the last entry read, for a damaged block's range
		pos := 0
		for ok := it.First(); ok; ok = it.Next() {
			if err := cancelled(ctx, pos); err != nil {
				it.Close()
				return count, err
			}
			key := it.Key()
			seq, detail := indexEntry(prefix, key, n)
			if detail != "" {
				if bad.pos < 0 {
					bad = badEntry{pos: pos, seq: seq, detail: detail}
				}
			} else {
				got[s.g.of(seq)].add(s.cfg.keyHash(key))
				last = seq
				count++
			}
			pos++
		}
		if err := it.Error(); err != nil {
			it.Close()
			if ctx.Err() != nil {
				return count, ctx.Err()
			}
			if bad.pos >= 0 {
				return count, fault("indexes", bad.seq, FaultIndex, bad.detail)
			}
			// Index keys are ordered by identifier, then seq: the damage
			// is known to lie after the last entry read, not which seqs
			// it covers.
			return count, unreadable("indexes", last+1, n, readErr, fmt.Errorf("%s index: %w", prefix, err))
		}
		if err := it.Close(); err != nil {
			return count, fmt.Errorf("verify: iterate index: %w", err)
		}
		differ := make([]bool, s.g.count)
		anyDiffer := false
		for b := range got {
			if got[b] != s.want[i][b] {
				differ[b], anyDiffer = true, true
			}
		}
		if bad.pos < 0 && !anyDiffer {
			continue
		}
		return count, s.localise(ctx, snap, i, differ, bad, n, readErr)
	}
	return count, nil
}

// localise names the fault of index i once its sums differ in the buckets
// marked in differ or a bad entry was met at bad.pos: it re-reads the
// events of those buckets into an exact table, LocaliseEvents seqs at a
// time, and the index against it.
func (s *indexSums) localise(ctx context.Context, snap *pebble.Snapshot, i int, differ []bool, bad badEntry, n ledger.Seq, readErr readErrFunc) error {
	prefix := keys.IndexPrefixes[i]
	table := make([]uint64, min(uint64(n), uint64(s.window))) // expected entry hash per seq, 0: none
	seen := make([]uint64, (len(table)+63)/64)
	var missing ledger.Seq
	inDiffer := func(seq ledger.Seq) bool { return differ[s.g.of(seq)] }
	for lo := ledger.Seq(1); lo <= n; {
		// The next window starts at the next seq of a differing bucket.
		b := s.g.of(lo)
		for b < s.g.count && !differ[b] {
			b++
		}
		if b == s.g.count {
			break
		}
		if blo, _ := s.g.bounds(b, n); blo > lo {
			lo = blo
		}
		if lo > n {
			break
		}
		hi := min(n, lo+ledger.Seq(len(table))-1)
		clear(table)
		clear(seen)
		if err := s.fillTable(ctx, snap, i, lo, hi, table, differ, readErr); err != nil {
			return err
		}
		it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: keys.UpperBound([]byte(prefix))})
		if err != nil {
			return unreadable("indexes", 0, 0, readErr, err)
		}
		pos, stopped := 0, false
		for ok := it.First(); ok && (bad.pos < 0 || pos < bad.pos); ok = it.Next() {
			if err := cancelled(ctx, pos); err != nil {
				it.Close()
				return err
			}
			key := it.Key()
			seq, detail := indexEntry(prefix, key, n)
			if detail == "" && seq >= lo && seq <= hi && inDiffer(seq) {
				if table[seq-lo] != s.cfg.keyHash(key)[0]|1 {
					bad, stopped = badEntry{pos: pos, seq: seq, detail: prefix + " index entry does not match the event"}, true
					break
				}
				seen[(seq-lo)/64] |= 1 << ((seq - lo) % 64)
			}
			pos++
		}
		err = it.Error()
		it.Close()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return unreadable("indexes", lo, hi, readErr, fmt.Errorf("%s index: %w", prefix, err))
		}
		if !stopped && bad.pos < 0 && missing == 0 {
			for j, want := range table[:hi-lo+1] {
				if want != 0 && seen[j/64]&(1<<(j%64)) == 0 {
					missing = lo + ledger.Seq(j)
					break
				}
			}
		}
		lo = hi + 1
	}
	switch {
	case bad.pos >= 0:
		return fault("indexes", bad.seq, FaultIndex, bad.detail)
	case missing != 0:
		return fault("indexes", missing, FaultIndex, prefix+" index entry missing for this event")
	default:
		// Unequal sums with equal sets: a broken hash, not a broken log.
		return fault("indexes", 0, FaultIndex, prefix+" index sums differ but no entry was found to differ")
	}
}

// fillTable reads the events lo..hi that lie in differing buckets and
// records the hash of the entry of index i each should have.
func (s *indexSums) fillTable(ctx context.Context, snap *pebble.Snapshot, i int, lo, hi ledger.Seq, table []uint64, differ []bool, readErr readErrFunc) error {
	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: keys.Event(lo), UpperBound: keys.Event(hi + 1)})
	if err != nil {
		return unreadable("indexes", lo, hi, readErr, err)
	}
	defer it.Close()
	var key []byte
	for b := s.g.of(lo); b <= s.g.of(hi); b++ {
		if !differ[b] {
			continue // this bucket's entries are known good
		}
		blo, bhi := s.g.bounds(b, hi)
		blo, bhi = max(blo, lo), min(bhi, hi)
		for ok := it.SeekGE(keys.Event(blo)); ok; ok = it.Next() {
			seq, _ := keys.SeqOf(it.Key())
			if seq > bhi {
				break
			}
			if err := cancelled(ctx, int(seq)); err != nil {
				return err
			}
			if lv := it.LazyValue(); lv.Len() > events.MaxEventBytes {
				return fault("indexes", seq, FaultUndecodable, events.ErrTooLarge.Error()) // found by the event pass first
			}
			raw, err := it.ValueAndErr()
			if err != nil {
				return unreadable("indexes", seq, hi, readErr, err)
			}
			env, err := events.Decode(raw) // checked by the event pass
			if err != nil {
				return fault("indexes", seq, FaultUndecodable, err.Error())
			}
			id := [3]string{env.Activation, env.Session, string(env.Kind)}[i]
			if id != "" && seq >= lo {
				key = append(append(append(key[:0], keys.IndexPrefixes[i]...), id...), '/')
				key = binary.BigEndian.AppendUint64(key, uint64(seq))
				table[seq-lo] = s.cfg.keyHash(key)[0] | 1
			}
		}
		if err := it.Error(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return unreadable("indexes", blo, bhi, readErr, err)
		}
	}
	return nil
}
