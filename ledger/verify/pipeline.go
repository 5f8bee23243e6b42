package verify

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/leaseledger/leaseledger/schemas"
)

// The event pass is a pipeline: one reader goroutine walks the e/ records of
// the snapshot and copies them into batches; min(GOMAXPROCS, maxWorkers)
// workers decode,
// re-hash and schema-validate the events of a batch and hash their expected
// index entries; the calling goroutine takes the batches back in seq order
// and does everything that depends on the previous event (gaps, links, the
// Merkle tree, checkpoints, anchors, index sums). Only InFlightBatches
// batches exist, so the pipeline's memory does not depend on the log's
// length nor on the number of cores.
const (
	// BatchEvents is the most events one batch carries.
	BatchEvents = 512
	// BatchBytes bounds the copied event bytes of one batch (a batch holds
	// at least one event; an event over events.MaxEventBytes is not copied:
	// it is a fault by itself).
	BatchBytes = 256 << 10
	// InFlightBatches is how many batches exist at once (being filled,
	// checked or consumed).
	InFlightBatches = 32
	// maxWorkers bounds the checking goroutines: more than half the batches
	// checked at once would leave the reader nothing to fill.
	maxWorkers = InFlightBatches / 2
	// cancelEvery is how many entries the index, tree and localisation
	// passes read between two checks of their context.
	cancelEvery = 4096
)

// item is one event of a batch: what the reader saw and what a worker
// found. Its size is part of MemoryBound (itemBytes).
type item struct {
	seq     ledger.Seq // from the key
	keyOK   bool       // the key is a well-formed e/ key
	readErr error      // reading the value failed (the reader stops here)
	off, n  int        // the copied bytes: batch.buf[off:off+n]
	size    int        // the stored value's length (n, unless too large)

	pre      Fault  // a fault found before the link check (undecodable, seq, hash)
	post     Fault  // a fault found after it (schema)
	detail   string // the fault's explanation
	hash     events.Hash
	prev     events.Hash
	leaf     [32]byte  // RFC 6962 leaf hash, when the tree is built
	index    [3]sum128 // keyed hash of each expected index entry
	hasIndex [3]bool
}

// itemBytes is an upper bound of an item's memory, its detail string aside
// (a detail is set only on a faulty event; the consumer stops at the first
// one, so at most the batches in flight hold details, each of a few
// hundred bytes).
const itemBytes = 256

// batch is a unit of work. done is closed when a worker has checked it.
type batch struct {
	items []item
	buf   []byte
	// end: the iteration finished after these items; endErr is its error.
	end    bool
	endErr error
	done   chan struct{}
}

// passConfig is what the workers need, shared read-only.
type passConfig struct {
	validator *schemas.Validator
	seeds     [2]maphash.Seed
	leaves    bool // compute Merkle leaf hashes
}

// eventPass runs the reader and the workers over it until stop() is called,
// delivering batches in seq order on the returned channel. Each batch must be
// handed back with recycle once consumed. stop waits for every goroutine.
type eventPass struct {
	ordered chan *batch
	free    chan *batch
	quit    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

func startEventPass(ctx context.Context, it *pebble.Iterator, cfg *passConfig) *eventPass {
	p := &eventPass{
		ordered: make(chan *batch, InFlightBatches),
		free:    make(chan *batch, InFlightBatches),
		quit:    make(chan struct{}),
	}
	for range InFlightBatches {
		p.free <- &batch{items: make([]item, 0, BatchEvents), buf: make([]byte, 0, BatchBytes)}
	}
	work := make(chan *batch, InFlightBatches)
	workers := max(1, min(runtime.GOMAXPROCS(0), maxWorkers))
	for range workers {
		p.wg.Go(func() {
			for b := range work {
				cfg.check(b)
				close(b.done)
			}
		})
	}
	p.wg.Go(func() {
		defer close(work)
		p.read(ctx, it, work)
	})
	return p
}

// read fills batches from it and sends each to the workers and, in order,
// to the consumer.
func (p *eventPass) read(ctx context.Context, it *pebble.Iterator, work chan<- *batch) {
	var b *batch
	next := func() bool {
		select {
		case b = <-p.free:
			b.items, b.buf, b.end, b.endErr = b.items[:0], b.buf[:0], false, nil
			b.done = make(chan struct{})
			return true
		case <-p.quit:
			return false
		}
	}
	send := func() {
		p.ordered <- b // never blocks: at most InFlightBatches batches exist
		work <- b
		b = nil
	}
	if !next() {
		return
	}
	for ok := it.First(); ok; ok = it.Next() {
		if ctx.Err() != nil {
			break // the consumer sees ctx.Err() itself
		}
		key := it.Key()
		seq, sok := keys.SeqOf(key)
		x := item{seq: seq, keyOK: sok && len(key) == len(keys.PrefixEvent)+8}
		// The stored length is known before the value is fetched: a value
		// over MaxEventBytes stored apart from its key (a value block or
		// blob file) is never copied. One stored inline came with its
		// table block, which Pebble has read already.
		if lv := it.LazyValue(); lv.Len() > events.MaxEventBytes {
			x.size = lv.Len()
			b.items = append(b.items, x)
			if len(b.items) == BatchEvents {
				send()
				if !next() {
					return
				}
			}
			continue
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			x.readErr = err
		} else if x.size = len(raw); len(raw) <= events.MaxEventBytes {
			if len(b.items) > 0 && len(b.buf)+len(raw) > BatchBytes {
				send()
				if !next() {
					return
				}
			}
			x.off, x.n = len(b.buf), len(raw)
			b.buf = append(b.buf, raw...)
		}
		b.items = append(b.items, x)
		if x.readErr != nil {
			b.end = true // the consumer stops at this event
			send()
			return
		}
		if len(b.items) == BatchEvents {
			send()
			if !next() {
				return
			}
		}
	}
	b.end, b.endErr = true, it.Error()
	send()
}

// recycle returns a consumed batch to the reader.
func (p *eventPass) recycle(b *batch) {
	b.items = b.items[:0]
	p.free <- b // never blocks: the pool holds every batch
}

// stop ends the pass and waits for its goroutines. The batches still in
// flight are dropped.
func (p *eventPass) stop() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}

// check is a worker's job on one batch: the checks of each event that do
// not depend on its predecessor, in the order the consumer reports them.
func (c *passConfig) check(b *batch) {
	var scratch []byte
	for i := range b.items {
		x := &b.items[i]
		if !x.keyOK || x.readErr != nil {
			continue
		}
		if x.size > events.MaxEventBytes {
			x.pre, x.detail = FaultUndecodable, fmt.Sprintf("%v: event is %d bytes, limit MaxEventBytes=%d", events.ErrTooLarge, x.size, events.MaxEventBytes)
			continue
		}
		raw := b.buf[x.off : x.off+x.n]
		env, err := events.Decode(raw)
		if err != nil {
			x.pre, x.detail = FaultUndecodable, err.Error()
			continue
		}
		if env.Seq != x.seq {
			x.pre, x.detail = FaultSeqMismatch, fmt.Sprintf("envelope says seq %d", env.Seq)
			continue
		}
		if !env.CheckHash() {
			x.pre = FaultBadHash
			continue
		}
		x.hash, x.prev = env.Hash, env.Prev
		if err := c.validator.ValidateEnvelope(raw); err != nil {
			x.post, x.detail = FaultSchemaInvalid, err.Error()
			continue
		}
		if c.leaves {
			copy(x.leaf[:], hasher.HashLeaf(raw))
		}
		for j, id := range [3]string{env.Activation, env.Session, string(env.Kind)} {
			if x.hasIndex[j] = id != ""; x.hasIndex[j] {
				scratch = append(append(append(scratch[:0], keys.IndexPrefixes[j]...), id...), '/')
				scratch = binary.BigEndian.AppendUint64(scratch, uint64(env.Seq))
				x.index[j] = c.keyHash(scratch)
			}
		}
	}
}

// keyHash is the seeded 128-bit hash of one stored key (an index entry, or
// a tree node key with its value): two maphash lanes under seeds drawn at
// random for each verification. maphash is fast but not a cryptographic
// PRF: random seeds defeat entries prepared without regard to this
// verifier, not an adversary who crafts cancelling sums against maphash
// itself (the chain and checkpoints do not rest on these sums).
func (c *passConfig) keyHash(b []byte) sum128 {
	return sum128{maphash.Bytes(c.seeds[0], b), maphash.Bytes(c.seeds[1], b)}
}
