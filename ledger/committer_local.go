package ledger

// The committer's own state across batches (committerLocal) and the
// allocations it spares per event: batches and records allocated as large as
// the last ones, ULIDs drawn without allocation, Acks cut from slabs. The
// guarantees are listed in commit.go's header.

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

// committerLocal is the committer's own bookkeeping across batches.
type committerLocal struct {
	// batchBytes is the size of the last batch closed that wrote events:
	// the next one is allocated after it up front (batchPrealloc), since
	// batches under a steady load are alike, rather than grown by doubling
	// and copying (a tenth of the committer's time with thousands of events
	// per batch).
	batchBytes int
	// flushed are the records of the last batches flushed that wrote
	// events and were not durable yet when a later one was flushed, oldest
	// first: an Import compares re-delivered events with them while those
	// batches may not be durable yet (sealedRaw). At most inflightBatches:
	// only that many batches are ever past the committer undurable.
	flushed [][]Record
	// token and idle are the permissions to flush the committer holds
	// (awaitFlush, pipeline.go): a token, and the idle applier.
	token, idle bool
	// batchEvents is how many events the last batch closed that wrote
	// events held: the next one's records are allocated after it up front
	// (recordsPrealloc) rather than grown by doubling and copying.
	batchEvents int
	// idEntropy is newID's scratch for a ULID's entropy bytes.
	idEntropy [10]byte
	// ackSlab is the unused rest of the last ackSlabLen Acks allocated
	// together (takeAcks).
	ackSlab []Ack
	// index holds the open batch's index entries until its flush.
	index indexKeys
}

// ackSlabLen is how many Acks takeAcks allocates at once for calls of few
// events: one allocation per ackSlabLen events instead of one per call. It
// also bounds what a caller keeping its acks keeps alive beside them
// (ackSlabLen·56 bytes).
const ackSlabLen = 64

// takeAcks returns n zeroed Acks for one call. They are the call's alone:
// each slot of a slab is handed out once and never reused, and the slice's
// capacity is n, so that a caller appending to it gets a copy
// (TestTakeAcks). A call of more than ackSlabLen/4 events gets its own
// allocation, as a slab would serve few calls.
func (c *committerLocal) takeAcks(n int) []Ack {
	if n > ackSlabLen/4 {
		return make([]Ack, n)
	}
	if len(c.ackSlab) < n {
		c.ackSlab = make([]Ack, ackSlabLen)
	}
	a := c.ackSlab[:n:n]
	c.ackSlab = c.ackSlab[n:]
	return a
}

// recordsPrealloc is the capacity an open batch's records are allocated
// with, given how many events the last one held: a quarter more, like
// batchPrealloc, and at most limit, the open batch's bound
// (Options.MaxBatchEvents), so that one large call does not inflate every
// later batch (TestRecordsPrealloc).
func recordsPrealloc(last, limit int) int {
	return min(last+last/4, limit)
}

// batchPrealloc is the size an open batch is allocated with, given the
// size of the last one: a quarter more, so that a batch slightly larger
// than the last (half of them, under a steady load) is not grown by
// doubling and copying, and at most maxBatchPrealloc, so that one huge
// call does not inflate every later batch.
func batchPrealloc(last int) int {
	return min(last+last/4, maxBatchPrealloc)
}

// newID is ulid.New(ms, m): the same ULID, the same error, the same state
// of m afterwards (TestNewIDTwin). ulid.New hands the new ULID's entropy
// bytes to an interface and so allocates the ULID on the heap, once per
// event; newID has m read into scratch, which the caller keeps (the
// committer's committerLocal), and copies it.
func newID(m *ulid.MonotonicEntropy, scratch *[10]byte, ms uint64) (ulid.ULID, error) {
	var id ulid.ULID
	if err := id.SetTime(ms); err != nil {
		return id, err
	}
	err := m.MonotonicRead(ms, scratch[:])
	copy(id[6:], scratch[:])
	return id, err
}

// keepFlushed records recs, a batch just flushed, for sealedRaw, and drops
// the batches kept that are durable: those up to head.
func (c *committerLocal) keepFlushed(recs []Record, head Seq) {
	drop := 0
	for drop < len(c.flushed) && lastSeq(c.flushed[drop]) <= head {
		drop++
	}
	if drop == 0 && len(c.flushed) == inflightBatches {
		// The committer holds a token for recs, so the oldest kept batch
		// has returned its own: durable, or failed (the ledger with it).
		drop = 1
	}
	n := copy(c.flushed, c.flushed[drop:])
	clear(c.flushed[n:])
	c.flushed = append(c.flushed[:n], recs)
}

// sealedInFlight returns the bytes sealed at seq when a batch kept by
// keepFlushed holds it.
func (c *committerLocal) sealedInFlight(seq Seq) ([]byte, bool) {
	for _, recs := range c.flushed {
		if recs[0].Env.Seq <= seq && seq <= lastSeq(recs) {
			return recs[seq-recs[0].Env.Seq].Raw, true
		}
	}
	return nil, false
}

func lastSeq(recs []Record) Seq { return recs[len(recs)-1].Env.Seq }

// indexKeys are the index entries (keys.For's keys after the record's) of
// the events sealed into the open batch, held until it is flushed and then
// written in key order (writeTo). Pebble inserts a batch into its memtable
// in the batch's order, starting each search at the previous key's place:
// entries in key order go in beside each other, while entries in sealing
// order (an activation's, a session's and a kind's in turn, each elsewhere
// in the key space) each search the skiplist from more levels up. On a
// memtable of 120 000 events, a batch of six events under 64 activations
// and sessions applies in 0.72–0.73 of the time (BenchmarkIndexOrder,
// 16–18 µs against 22–25). The batch's content is the same either way
// (TestSetEventKeysTwin, the commit twins); only its order changes.
//
// The committer keeps one indexKeys across batches (committerLocal.index):
// a batch's entries are written into its pebble.Batch, which copies them,
// before the next batch is opened.
type indexKeys struct {
	buf   []byte   // the keys, back to back
	spans [][2]int // each key's [start, end) in buf, in sealing order until writeTo sorts them
}

// add holds the entry prefix + id + "/" + seq (big-endian), as
// keys.For builds it.
func (x *indexKeys) add(prefix, id string, seq uint64) {
	start := len(x.buf)
	x.buf = append(append(append(x.buf, prefix...), id...), '/')
	x.buf = binary.BigEndian.AppendUint64(x.buf, seq)
	x.spans = append(x.spans, [2]int{start, len(x.buf)})
}

// writeTo writes the held entries to b in key order, with empty values,
// and forgets them (keeping their memory for the next batch).
func (x *indexKeys) writeTo(b *pebble.Batch) {
	slices.SortFunc(x.spans, func(p, q [2]int) int { return bytes.Compare(x.buf[p[0]:p[1]], x.buf[q[0]:q[1]]) })
	for _, s := range x.spans {
		_ = b.Set(x.buf[s[0]:s[1]], nil, nil)
	}
	x.buf, x.spans = x.buf[:0], x.spans[:0]
}
