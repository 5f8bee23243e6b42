package ledger

// The Merkle node index: the RFC 6962 tree over the events' canonical bytes
// (leaf i is event seq i+1), from which TreeRoot, InclusionProof and
// ConsistencyProof answer in O(log n) reads. Its invariants:
//
//   - Crash-consistent: the committer writes the stored nodes an event
//     completes (levels ≥ keys.TreeStoredLevel) and m/tree in the batch of
//     that event, so the index never lags or leads the durable log.
//   - Complete after a writable Open: a ledger written before the index
//     existed (or truncated by hand) gets the missing nodes built from its
//     events before any append is accepted.
//   - Derived only: a read-only Open never fails for a missing or short
//     index; the nodes it lacks are recomputed from the events (slower,
//     memory bounded by the tree's height), and the stored-level ones kept
//     in the ledger's node cache (at most treeCacheNodes), so the next
//     proofs over them cost what they cost with the index.
//   - Self-healing: a stored node missing (or malformed) below the head
//     does not fail a proof: it is computed from its children (logged once
//     per ledger) and, on a writable ledger, written back.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// ErrTreeRange is returned (in an *Error) by TreeRoot, InclusionProof and
// ConsistencyProof for a size beyond the durable head or a seq outside the
// tree asked about.
var ErrTreeRange = errors.New("ledger: seq or tree size out of range")

var (
	treeHasher  = rfc6962.DefaultHasher
	treeFactory = &compact.RangeFactory{Hash: treeHasher.HashChildren}
)

const (
	// treeBlock is the number of leaves under a node of the lowest stored
	// level: a node below it is recomputed from at most treeBlock/2 events.
	treeBlock = 1 << keys.TreeStoredLevel
	// treeBuildChunk bounds the events whose nodes one batch of the index
	// build at Open holds (about treeBuildChunk/8 nodes).
	treeBuildChunk = 1 << 16
	// treeCacheNodes bounds the node cache (treeCache): the stored-level
	// nodes computed from the events, about 100 bytes each with the map —
	// at most about 6 MiB, every stored-level node of a log of 512 Ki
	// events. Past it nodes are no longer kept: proofs over the rest are
	// slower (recomputed each time), still correct.
	treeCacheNodes = 1 << 16
)

// treeCache keeps the stored-level Merkle nodes a ledger computed from its
// events because its index lacks them (a read-only ledger whose index is
// short or missing, a node missing from the index): a node covers
// immutable events, so it never goes stale.
type treeCache struct {
	mu     sync.Mutex
	nodes  map[compact.NodeID][]byte // at most treeCacheNodes
	warned bool                      // a missing stored node was logged
}

func (c *treeCache) get(id compact.NodeID) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.nodes[id]
	return h, ok
}

func (c *treeCache) has(id compact.NodeID) bool {
	_, ok := c.get(id)
	return ok
}

// put keeps h as the hash of id unless the cache is full.
func (c *treeCache) put(id compact.NodeID, h []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = map[compact.NodeID][]byte{}
	}
	if len(c.nodes) < treeCacheNodes {
		c.nodes[id] = h
	}
}

// len is the number of nodes kept.
func (c *treeCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// warnOnce reports whether this is the first missing node noticed.
func (c *treeCache) warnOnce() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.warned
	c.warned = true
	return first
}

// committerHasher computes the RFC 6962 hashes of the committer's compact
// range with one reused SHA-256 state: the shared hasher allocates a state
// for every hash, a third of the index's cost to the committer. The hashes
// it returns are cut from slabs of hashSlabLen (out), each slot handed out
// once with capacity sha256.Size, so that hashing allocates once per
// hashSlabLen hashes instead of once per hash (TestCommitterHasherTwin,
// TestCommitterHasherAllocs).
type committerHasher struct {
	h    hash.Hash
	slab []byte // the unused rest of the last slab
}

// hashSlabLen is how many hashes one slab of committerHasher holds. The
// compact range keeps at most one hash per level (64), each of which may
// keep its slab alive: at most 64·hashSlabLen·32 bytes (128 KiB).
const hashSlabLen = 64

// out returns a fresh empty slice with room for one hash.
func (c *committerHasher) out() []byte {
	if len(c.slab) < sha256.Size {
		c.slab = make([]byte, hashSlabLen*sha256.Size)
	}
	b := c.slab[:0:sha256.Size]
	c.slab = c.slab[sha256.Size:]
	return b
}

var (
	leafPrefix = []byte{rfc6962.RFC6962LeafHashPrefix}
	nodePrefix = []byte{rfc6962.RFC6962NodeHashPrefix}
)

func (c *committerHasher) leaf(b []byte) []byte {
	c.h.Reset()
	c.h.Write(leafPrefix)
	c.h.Write(b)
	return c.h.Sum(c.out())
}

func (c *committerHasher) children(l, r []byte) []byte {
	c.h.Reset()
	c.h.Write(nodePrefix)
	c.h.Write(l)
	c.h.Write(r)
	return c.h.Sum(c.out())
}

// newCommitterRange is the committer's compact range over [0, size) with
// hashes, hashing with its own committerHasher.
func newCommitterRange(size uint64, hashes [][]byte) (*compact.Range, *committerHasher, error) {
	c := &committerHasher{h: sha256.New()}
	r, err := (&compact.RangeFactory{Hash: c.children}).NewRange(0, size, hashes)
	return r, c, err
}

// treeAppend (committer only) appends the leaf of the sealed event raw to
// the compact range and writes the stored nodes it completes to b.
func (l *Ledger) treeAppend(b *pebble.Batch, raw []byte) {
	err := l.tree.Append(l.treeHash.leaf(raw), func(id compact.NodeID, h []byte) {
		if id.Level >= keys.TreeStoredLevel {
			_ = b.Set(keys.TreeNode(id.Level, id.Index), h, nil)
		}
	})
	if err != nil { // only for a range that is not a compact range: never
		l.fail(fmt.Errorf("merkle index: %w", err))
	}
}

// storedTreeSize reads m/tree; present is false when the key is missing.
func (l *Ledger) storedTreeSize() (size Seq, present bool, err error) {
	v, closer, err := l.db.Get([]byte(keys.TreeSize))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, l.readErr("open", 0, 0, fmt.Errorf("read m/tree: %w", err))
	}
	defer closer.Close()
	size, ok := keys.DecodeTreeSize(v)
	if !ok {
		return 0, true, nil // malformed: derived data, rebuilt
	}
	return size, true, nil
}

// openTree loads the index at Open. Read-only, it notes how many leaves the
// stored nodes cover; writable, it restores the committer's compact range
// (stored nodes plus the last events of an incomplete block) and builds
// whatever part of the index is missing.
func (l *Ledger) openTree(head Seq) error {
	size, present, err := l.storedTreeSize()
	if err != nil {
		return err
	}
	if l.opts.ReadOnly {
		l.treeBase = min(size, head)
		return nil
	}
	// Rewrite m/tree when it is missing or says anything but the head (a
	// size past it is what a hand that truncated the log leaves: nodes
	// beyond the head are overwritten as their events are appended again).
	dirty := !present || size != head
	base := min(size, head) &^ (treeBlock - 1)
	hashes, err := l.storedRange(uint64(base))
	if err != nil {
		l.logger.Warn("ledger: the Merkle node index cannot be read; rebuilding it from the events", "err", err)
		hashes, base, dirty = nil, 0, true
	}
	r, h, err := newCommitterRange(uint64(base), hashes)
	if err != nil {
		return &Error{Op: "open", Err: err}
	}
	l.tree, l.treeHash = r, h
	if dirty && head > Seq(r.End()) {
		l.logger.Info("ledger: building the Merkle node index", "from", r.End()+1, "to", head)
	}
	b := l.db.NewBatch()
	if size > head {
		// Nodes past the head (a log truncated by hand) would be stale
		// until their events are appended again: drop them.
		for level := uint(keys.TreeStoredLevel); level < 64; level++ {
			from := keys.TreeNode(level, uint64(head)>>level)
			_ = b.DeleteRange(from, keys.UpperBound(from[:len(keys.PrefixTree)+1]), nil)
		}
	}
	commit := func(upTo Seq) error {
		_ = b.Set([]byte(keys.TreeSize), keys.EncodeTreeSize(upTo), nil)
		err := b.Commit(pebble.Sync)
		b.Close()
		b = l.db.NewBatch()
		if err != nil {
			return &Error{Op: "open", Err: fmt.Errorf("write the Merkle node index: %w", err)}
		}
		return nil
	}
	defer func() { b.Close() }()
	n := 0
	err = l.Scan(context.Background(), Query{From: Seq(r.End()) + 1, To: head}, func(seq Seq, raw []byte) error {
		l.treeAppend(b, raw)
		if n++; n%treeBuildChunk == 0 {
			return commit(seq)
		}
		return nil
	})
	if err == nil {
		err = l.failed()
	}
	if err != nil {
		return err
	}
	if !dirty {
		return nil
	}
	return commit(head)
}

// storedRange is the hashes of the compact range [0, size) read from
// stored nodes; size is a multiple of treeBlock, so every node of it is
// stored.
func (l *Ledger) storedRange(size uint64) ([][]byte, error) {
	ids := compact.RangeNodes(0, size, nil)
	hashes := make([][]byte, len(ids))
	for i, id := range ids {
		h, ok, err := l.storedNode(id)
		if err != nil {
			return nil, err
		}
		if !ok {
			begin, end := id.Coverage()
			return nil, &Error{Op: "tree", Seq: Seq(begin) + 1, Last: Seq(end), Err: fmt.Errorf("%w: Merkle node %d/%d missing from the index or malformed", ErrCorrupt, id.Level, id.Index)}
		}
		hashes[i] = h
	}
	return hashes, nil
}

// storedNode reads the stored node id; ok is false when it is missing or
// malformed (derived data: the caller computes it from the events).
func (l *Ledger) storedNode(id compact.NodeID) (h []byte, ok bool, err error) {
	v, closer, err := l.db.Get(keys.TreeNode(id.Level, id.Index))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		begin, end := id.Coverage()
		return nil, false, l.readErr("tree", Seq(begin)+1, Seq(end), err)
	}
	defer closer.Close()
	if len(v) != treeHasher.Size() {
		return nil, false, nil
	}
	return append([]byte(nil), v...), true, nil
}

// treeReader fetches node hashes for one proof: stored nodes from t/, the
// others from the events (point reads: an iterator over a large log costs
// more than the at most 15 events a proof needs below the stored levels).
type treeReader struct {
	l      *Ledger
	ctx    context.Context
	base   uint64            // leaves covered by the stored nodes that may be read
	leaves map[uint64][]byte // leaf hashes read so far, by leaf index
}

func (l *Ledger) newTreeReader(ctx context.Context) *treeReader {
	base := l.Head().Seq
	if l.opts.ReadOnly {
		base = min(base, l.treeBase)
	}
	return &treeReader{l: l, ctx: ctx, base: uint64(base), leaves: map[uint64][]byte{}}
}

func (r *treeReader) nodes(ids []compact.NodeID) ([][]byte, error) {
	hashes := make([][]byte, len(ids))
	for i, id := range ids {
		h, err := r.node(id)
		if err != nil {
			return nil, err
		}
		hashes[i] = h
	}
	return hashes, nil
}

// node returns the hash of the perfect subtree id.
func (r *treeReader) node(id compact.NodeID) ([]byte, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	if id.Level < keys.TreeStoredLevel {
		return r.small(id)
	}
	if h, ok := r.l.treeCache.get(id); ok {
		return h, nil
	}
	begin, end := id.Coverage()
	switch {
	case end <= r.base:
		h, ok, err := r.l.storedNode(id)
		if err != nil || ok {
			return h, err
		}
		if h, err = r.children(id); err != nil {
			return nil, err
		}
		r.repair(id, h)
		return h, nil
	case begin >= r.base && !r.l.treeCache.has(compact.NewNodeID(id.Level-1, id.Index*2)):
		return r.scan(begin, end) // nothing of it stored or cached: one pass
	}
	h, err := r.children(id)
	if err == nil {
		r.l.treeCache.put(id, h)
	}
	return h, err
}

// repair keeps the node id, missing from the index, computed as h: a
// writable ledger writes it back (its value is fixed by events below the
// head, so it cannot race the committer's), a read-only one caches it.
func (r *treeReader) repair(id compact.NodeID, h []byte) {
	writeBack := !r.l.opts.ReadOnly && r.l.failed() == nil
	if r.l.treeCache.warnOnce() {
		begin, end := id.Coverage()
		r.l.logger.Warn("ledger: a Merkle node is missing from the index (or malformed); computing it from the events",
			"level", id.Level, "index", id.Index, "from", begin+1, "to", end, "written_back", writeBack)
	}
	if writeBack && r.l.db.Set(keys.TreeNode(id.Level, id.Index), h, pebble.NoSync) == nil {
		return
	}
	r.l.treeCache.put(id, h)
}

// children computes the node id (above the lowest stored level) from its
// two children.
func (r *treeReader) children(id compact.NodeID) ([]byte, error) {
	left, err := r.node(compact.NewNodeID(id.Level-1, id.Index*2))
	if err != nil {
		return nil, err
	}
	right, err := r.node(compact.NewNodeID(id.Level-1, id.Index*2+1))
	if err != nil {
		return nil, err
	}
	return treeHasher.HashChildren(left, right), nil
}

// small computes a node below the stored levels from its leaves.
func (r *treeReader) small(id compact.NodeID) ([]byte, error) {
	begin, end := id.Coverage()
	level := make([][]byte, 0, end-begin)
	for i := begin; i < end; i++ {
		h, ok := r.leaves[i]
		if !ok {
			raw, err := r.l.GetRaw(Seq(i) + 1)
			if err != nil {
				return nil, err
			}
			h = treeHasher.HashLeaf(raw)
			r.leaves[i] = h
		}
		level = append(level, h)
	}
	for len(level) > 1 {
		for i := range len(level) / 2 {
			level[i] = treeHasher.HashChildren(level[2*i], level[2*i+1])
		}
		level = level[:len(level)/2]
	}
	return level[0], nil
}

// scan computes the node covering leaves [begin, end) from its events,
// caching every stored-level node it completes on the way.
func (r *treeReader) scan(begin, end uint64) ([]byte, error) {
	cr := treeFactory.NewEmptyRange(begin)
	keep := func(id compact.NodeID, h []byte) {
		if id.Level >= keys.TreeStoredLevel {
			r.l.treeCache.put(id, h)
		}
	}
	err := r.l.Scan(r.ctx, Query{From: Seq(begin) + 1, To: Seq(end)}, func(_ Seq, raw []byte) error {
		return cr.Append(treeHasher.HashLeaf(raw), keep)
	})
	if err != nil {
		return nil, err
	}
	if cr.End() != end || len(cr.Hashes()) != 1 {
		return nil, &Error{Op: "tree", Seq: Seq(begin) + 1, Last: Seq(end), Err: fmt.Errorf("%w: events missing below the head", ErrCorrupt)}
	}
	return cr.Hashes()[0], nil
}

// treeErr wraps an error of op: an *Error stays as it is.
func treeErr(op string, err error) error {
	var le *Error
	if errors.As(err, &le) {
		return err
	}
	return &Error{Op: op, Err: err}
}

func rangeErr(op string, format string, a ...any) error {
	return &Error{Op: op, Err: fmt.Errorf("%w: "+format, append([]any{ErrTreeRange}, a...)...)}
}

// TreeRoot is the RFC 6962 root over events 1..size (size ≤ Head().Seq;
// size 0 is the empty tree's root).
func (l *Ledger) TreeRoot(ctx context.Context, size Seq) ([]byte, error) {
	const op = "tree root"
	end, err := l.beginRead(op)
	if err != nil {
		return nil, err
	}
	defer end()
	if head := l.Head().Seq; size > head {
		return nil, rangeErr(op, "size %d beyond the head %d", size, head)
	}
	if size == 0 {
		return treeHasher.EmptyRoot(), nil
	}
	hashes, err := l.newTreeReader(ctx).nodes(compact.RangeNodes(0, uint64(size), nil))
	if err != nil {
		return nil, treeErr(op, err)
	}
	r, err := treeFactory.NewRange(0, uint64(size), hashes)
	if err != nil {
		return nil, treeErr(op, err)
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return nil, treeErr(op, err)
	}
	return root, nil
}

// InclusionProof proves that event seq (1 ≤ seq ≤ size ≤ Head().Seq) is
// leaf seq-1 of the tree of size: the RFC 6962 audit path, checked by
// proof.VerifyInclusion (ledger/verify.VerifyInclusion) with the event's
// canonical bytes.
func (l *Ledger) InclusionProof(ctx context.Context, seq, size Seq) ([][]byte, error) {
	const op = "inclusion proof"
	end, err := l.beginRead(op)
	if err != nil {
		return nil, err
	}
	defer end()
	if head := l.Head().Seq; seq == 0 || seq > size || size > head {
		return nil, rangeErr(op, "seq %d in a tree of size %d (head %d)", seq, size, head)
	}
	nodes, err := proof.Inclusion(uint64(seq-1), uint64(size))
	if err != nil {
		return nil, treeErr(op, err)
	}
	return l.rehash(ctx, op, nodes)
}

// ConsistencyProof proves that the tree of size from is a prefix of the
// tree of size to (1 ≤ from ≤ to ≤ Head().Seq): the RFC 6962 consistency
// proof, empty when from == to.
func (l *Ledger) ConsistencyProof(ctx context.Context, from, to Seq) ([][]byte, error) {
	const op = "consistency proof"
	end, err := l.beginRead(op)
	if err != nil {
		return nil, err
	}
	defer end()
	if head := l.Head().Seq; from == 0 || from > to || to > head {
		return nil, rangeErr(op, "sizes %d to %d (head %d)", from, to, head)
	}
	nodes, err := proof.Consistency(uint64(from), uint64(to))
	if err != nil {
		return nil, treeErr(op, err)
	}
	return l.rehash(ctx, op, nodes)
}

func (l *Ledger) rehash(ctx context.Context, op string, nodes proof.Nodes) ([][]byte, error) {
	hashes, err := l.newTreeReader(ctx).nodes(nodes.IDs)
	if err != nil {
		return nil, treeErr(op, err)
	}
	out, err := nodes.Rehash(hashes, treeHasher.HashChildren)
	if err != nil {
		return nil, treeErr(op, err)
	}
	return out, nil
}
