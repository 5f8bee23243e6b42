package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

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
// maphash, not a cryptographic PRF). Only the entries and events of
// buckets whose sums differ are looked at again (localise: one more index
// scan, point reads), to name the same entry and seq as an exact check
// would: the first bad entry in key order (malformed, beyond the head, or
// not matching its event), else the lowest seq whose entry is missing.
const (
	// IndexBuckets is how many seq ranges each index's sums are kept for
	// (the ranges are sized from the stored head).
	IndexBuckets = 4096
	// LocaliseEvents bounds the first leaves one exact second pass of the
	// Merkle node check covers: a damaged bucket costs at most this many
	// table entries at a time.
	LocaliseEvents = 1 << 20
)

// MemoryBound is the documented bound of Dir's memory, independent of the
// log's length, of the number of cores and of the directory's table layout
// (how fast it was written, how many tables sit in L0, how much
// write-ahead log is left to replay): the pipeline's batches (copied bytes
// and per-event results), the sums of the three indexes and of the Merkle
// node index (expected and stored), the exact table of the Merkle node
// check's second pass, and Pebble's share bounded by the options Dir opens
// it with (PebbleMemory), all doubled for the garbage collector's headroom
// (GOGC=100: in a build without cgo Pebble's buffers are Go heap too),
// plus RuntimeMemory. Checked as the peak RSS of a process verifying
// directories of three layouts (TestVerifyMemoryBound: flushed, one event
// per batch unflushed, last memtable full and unflushed). It holds for stored
// values up to events.MaxEventBytes: a larger one is a fault, never copied
// by the pass when Pebble stores it apart from its key, but a value stored
// in a table block is read once with that block. Ledger (an open ledger)
// reads through the ledger's own database, whose memory is the ledger's.
const MemoryBound = 2*(InFlightBatches*(BatchBytes+BatchEvents*itemBytes)+
	2*(len(keys.IndexPrefixes)+1)*IndexBuckets*16+
	localiseBytes+PebbleMemory) + RuntimeMemory

// localiseBytes bounds the Merkle node check's second-pass table: for
// LocaliseEvents leaves, fewer than one node per 8 leaves, each a map
// entry of at most 128 bytes.
const localiseBytes = LocaliseEvents * 16

// The options Dir opens Pebble with, each bounding one part of Pebble's
// memory by construction (see pebbleOptions).
const (
	// PebbleCacheBytes is the block cache: data, index and filter blocks
	// of every table are read through it, however many tables there are.
	PebbleCacheBytes = 8 << 20
	// PebbleMaxOpenFiles bounds the open table readers (the file cache);
	// each holds its footer, properties and the handles of its index and
	// filter blocks (those blocks are in the cache), under
	// pebbleReaderBytes. More tables are opened and closed in turn.
	PebbleMaxOpenFiles = 256
	// pebbleReaderBytes is the allowance for one open table reader's own
	// memory (not measured per reader; the layouts' peaks include them).
	pebbleReaderBytes = 64 << 10
	// PebbleMemTableBytes is the memtable size of the reader (the
	// ledger's own): a read-only open replays the unflushed write-ahead
	// log into memtables that it never flushes, in arenas growing from
	// 256 KiB to this size. Arenas exceed the replayed entries by under
	// replayArenas of them: the smaller arenas sum under one, the last is
	// partly filled, and each full one ends in a tail no larger than the
	// batch that did not fit (under half an arena; larger batches are
	// replayed apart), at most writerMemTables+1 of them. (4 MiB arenas
	// were measured worse: 250 against 150 MiB on a 10^5-event WAL.)
	PebbleMemTableBytes = writerMemTableBytes
	replayArenas        = 4
	// WriterUnflushedBytes bounds the write-ahead log a ledger leaves
	// unflushed, which a read-only open holds in memory: with the ledger's
	// default options (ledger.DefaultPebbleOptions, DefaultMaxBatchEvents)
	// Pebble stops admitting writes while MemTableStopWritesThreshold (2)
	// memtables of MemTableSize (64 MiB) wait to be flushed, and the one
	// write admitted last is at most one committer batch (replayed apart
	// from the memtables, as a copy of the batch), so no more than that is
	// in the WAL beyond the last flush, however the ledger stopped (Close
	// or a crash). A directory written with a larger memtable or larger
	// batches (Options.PebbleOptions, Options.MaxBatchEvents) is outside
	// MemoryBound by the difference.
	WriterUnflushedBytes = writerMemTables*writerMemTableBytes + ledgerBatchBytes
	writerMemTables      = 2
	writerMemTableBytes  = 64 << 20
	// ledgerBatchBytes bounds one committer batch: each event's stored
	// value and its keys (e/, three index keys, Merkle nodes: under 1 KiB).
	ledgerBatchBytes = ledger.DefaultMaxBatchEvents * (events.MaxEventBytes + 1<<10)
	// PebbleMemory is Pebble's share of MemoryBound.
	PebbleMemory = PebbleCacheBytes + PebbleMaxOpenFiles*pebbleReaderBytes +
		WriterUnflushedBytes + replayArenas*PebbleMemTableBytes
)

// RuntimeMemory is the part of MemoryBound outside the terms above: the Go
// runtime and its stacks, the compiled JSON Schemas, the Merkle compact
// range (at most 64 hashes), Pebble's iterators (a few blocks pinned each,
// a handful of iterators at once) and the program's code and data. It is
// an allowance, not derived: verifying an empty ledger peaks at 36 MiB
// (the test binary; TestVerifyMemoryBound fails above RuntimeMemory).
const RuntimeMemory = 64 << 20

// pebbleOptions is the Pebble configuration Dir opens a directory with:
// the ledger's own, with the block cache, open tables and replay
// memtables bounded as PebbleMemory says.
func pebbleOptions() *pebble.Options {
	po := ledger.DefaultPebbleOptions()
	po.CacheSize = PebbleCacheBytes
	po.MaxOpenFiles = PebbleMaxOpenFiles
	po.MemTableSize = PebbleMemTableBytes
	return po
}

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
	// scans counts the second pass's index scans (at most one per index).
	scans int
}

func newIndexSums(cfg *passConfig, head ledger.Seq, buckets int) *indexSums {
	s := &indexSums{cfg: cfg, g: newBucketing(head, buckets)}
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
// marked in differ or a bad entry was met at bad.pos, with one more scan of
// the index and one of the events of the differing buckets, whatever the
// number of damaged buckets (no table, no window):
//   - the index in key order, up to bad.pos: each well-formed entry of a
//     differing bucket is compared with the entry its event gives (a point
//     read); the first that differs is the fault, unless bad comes first;
//   - else every entry there is its event's, so the sums differ by missing
//     entries: the events of the differing buckets in seq order, each
//     looked up for its entry; the first absent is the fault.
func (s *indexSums) localise(ctx context.Context, snap *pebble.Snapshot, i int, differ []bool, bad badEntry, n ledger.Seq, readErr readErrFunc) error {
	prefix := keys.IndexPrefixes[i]
	if !slices.Contains(differ, true) {
		return fault("indexes", bad.seq, FaultIndex, bad.detail) // no entry before it is read again
	}
	s.scans++
	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: keys.UpperBound([]byte(prefix))})
	if err != nil {
		return unreadable("indexes", 0, 0, readErr, err)
	}
	var want []byte
	pos := 0
	for ok := it.First(); ok && (bad.pos < 0 || pos < bad.pos); ok = it.Next() {
		if err := cancelled(ctx, pos); err != nil {
			it.Close()
			return err
		}
		key := it.Key()
		if seq, detail := indexEntry(prefix, key, n); detail == "" && differ[s.g.of(seq)] {
			if want, err = s.entryOf(snap, i, seq, want, readErr); err != nil {
				it.Close()
				return err
			}
			if !bytes.Equal(want, key) {
				bad = badEntry{pos: pos, seq: seq, detail: prefix + " index entry does not match the event"}
				break
			}
		}
		pos++
	}
	err = it.Error()
	it.Close()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return unreadable("indexes", 1, n, readErr, fmt.Errorf("%s index: %w", prefix, err))
	}
	if bad.pos >= 0 {
		return fault("indexes", bad.seq, FaultIndex, bad.detail)
	}
	for b := range differ {
		if !differ[b] {
			continue
		}
		lo, hi := s.g.bounds(b, n)
		for seq := lo; seq <= hi; seq++ {
			if err := cancelled(ctx, int(seq)); err != nil {
				return err
			}
			if want, err = s.entryOf(snap, i, seq, want, readErr); err != nil {
				return err
			}
			if len(want) == 0 {
				continue // the event has no entry in this index
			}
			_, closer, err := snap.Get(want)
			if errors.Is(err, pebble.ErrNotFound) {
				return fault("indexes", seq, FaultIndex, prefix+" index entry missing for this event")
			}
			if err != nil {
				return unreadable("indexes", seq, seq, readErr, err)
			}
			closer.Close()
		}
	}
	// Unequal sums with equal sets: a broken hash, not a broken log.
	return fault("indexes", 0, FaultIndex, prefix+" index sums differ but no entry was found to differ")
}

// entryOf sets buf to the entry of index i that event seq gives (empty:
// none), read from the snapshot; the event pass has checked the event.
func (s *indexSums) entryOf(snap *pebble.Snapshot, i int, seq ledger.Seq, buf []byte, readErr readErrFunc) ([]byte, error) {
	raw, closer, err := snap.Get(keys.Event(seq))
	if err != nil {
		return nil, unreadable("indexes", seq, seq, readErr, err)
	}
	defer closer.Close()
	env, err := events.Decode(raw)
	if err != nil {
		return nil, fault("indexes", seq, FaultUndecodable, err.Error())
	}
	id := [3]string{env.Activation, env.Session, string(env.Kind)}[i]
	if id == "" {
		return buf[:0], nil
	}
	buf = append(append(append(buf[:0], keys.IndexPrefixes[i]...), id...), '/')
	return binary.BigEndian.AppendUint64(buf, uint64(seq)), nil
}
