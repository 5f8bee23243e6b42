package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/transparency-dev/merkle/compact"
)

// The Merkle node index (t/ keys, levels ≥ keys.TreeStoredLevel) is
// checked like the secondary indexes: the event pass builds the RFC 6962
// tree and adds the keyed hash of every stored-level node it completes
// (key and value) into a sum per bucket of the node's first leaf; the tree
// pass adds every stored node the same way. A differing bucket is localised
// by rebuilding the tree once more and comparing the nodes of that bucket
// exactly: the fault names the first leaf (seq) of the lowest node that is
// missing, differs from the events, or should not be there.
//
// The nodes checked are those within the first min(m/tree, head) leaves:
// the ledger reads stored nodes only up to that size and builds the rest
// on its next writable Open, so m/tree below the head (an index not built
// yet, or no m/tree: a ledger written before the index) or above it (a
// tail cut off by hand) is not a fault, and nodes beyond it are not read.

// treeSums is what the event pass leaves for the tree pass.
type treeSums struct {
	cfg     *passConfig
	g       bucketing
	covered uint64 // leaves whose stored nodes are checked: min(m/tree, head)
	want    []sum128
	window  int
	scratch []byte
}

// storedTreeSize reads m/tree (0 when missing or malformed).
func storedTreeSize(snap *pebble.Snapshot, readErr readErrFunc) (ledger.Seq, error) {
	v, closer, err := snap.Get([]byte(keys.TreeSize))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, unreadable("tree", 0, 0, readErr, fmt.Errorf("read m/tree: %w", err))
	}
	defer closer.Close()
	size, _ := keys.DecodeTreeSize(v)
	return size, nil
}

func newTreeSums(cfg *passConfig, covered ledger.Seq, buckets, window int) *treeSums {
	return &treeSums{cfg: cfg, g: newBucketing(covered, buckets), covered: uint64(covered), want: make([]sum128, buckets), window: window}
}

// stored reports whether node id is one the index holds within the
// covered leaves, and the seq of its first leaf.
func (t *treeSums) stored(id compact.NodeID) (ledger.Seq, bool) {
	if id.Level < keys.TreeStoredLevel || id.Level >= 64 {
		return 0, false
	}
	first, end := id.Coverage()
	if end > t.covered || end <= first {
		return 0, false
	}
	return ledger.Seq(first + 1), true
}

// nodeHash is the keyed hash of a stored node: its key and its value.
func (t *treeSums) nodeHash(level uint, index uint64, hash []byte) sum128 {
	t.scratch = append(append(t.scratch[:0], keys.PrefixTree...), byte(level))
	t.scratch = binary.BigEndian.AppendUint64(t.scratch, index)
	t.scratch = append(t.scratch, hash...)
	return t.cfg.keyHash(t.scratch)
}

// visit is the compact range's visitor in the event pass.
func (t *treeSums) visit(id compact.NodeID, hash []byte) {
	if seq, ok := t.stored(id); ok {
		t.want[t.g.of(seq)].add(t.nodeHash(id.Level, id.Index, hash))
	}
}

// verifyTree checks the stored nodes against the sums; n is the number of
// verified events. It returns the number of nodes checked.
func verifyTree(ctx context.Context, snap *pebble.Snapshot, t *treeSums, readErr readErrFunc) (int, error) {
	if t.covered < 1<<keys.TreeStoredLevel {
		return 0, nil // no stored level is complete
	}
	got := make([]sum128, t.g.count)
	count := 0
	err := eachNode(ctx, snap, readErr, func(id compact.NodeID, hash []byte) error {
		if seq, ok := t.stored(id); ok {
			got[t.g.of(seq)].add(t.nodeHash(id.Level, id.Index, hash))
			count++
		}
		return nil
	})
	if err != nil {
		return count, err
	}
	differ := make([]bool, t.g.count)
	anyDiffer := false
	for b := range got {
		if got[b] != t.want[b] {
			differ[b], anyDiffer = true, true
		}
	}
	if !anyDiffer {
		return count, nil
	}
	return count, t.localise(ctx, snap, differ, readErr)
}

// eachNode calls fn for every well-formed t/ key; a malformed one is a
// FaultTree.
func eachNode(ctx context.Context, snap *pebble.Snapshot, readErr readErrFunc, fn func(compact.NodeID, []byte) error) error {
	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(keys.PrefixTree), UpperBound: keys.UpperBound([]byte(keys.PrefixTree))})
	if err != nil {
		return unreadable("tree", 0, 0, readErr, err)
	}
	defer it.Close()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i++; i%cancelEvery == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		level, index, ok := keys.DecodeTreeNode(it.Key())
		if !ok {
			return fault("tree", 0, FaultTree, "Merkle node index: malformed key")
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return unreadable("tree", 0, 0, readErr, err)
		}
		if err := fn(compact.NewNodeID(level, index), v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return unreadable("tree", 0, 0, readErr, fmt.Errorf("Merkle node index: %w", err))
	}
	return nil
}

// localise finds the lowest bad node in the differing buckets, window seqs
// of first leaves at a time: the tree is rebuilt from the events and the
// window's nodes kept in a table (at most one node per leaf: a node's first
// leaf is shared only with nodes of other levels, and there are fewer
// stored nodes than leaves).
func (t *treeSums) localise(ctx context.Context, snap *pebble.Snapshot, differ []bool, readErr readErrFunc) error {
	for lo := ledger.Seq(1); lo <= ledger.Seq(t.covered); {
		b := t.g.of(lo)
		for b < t.g.count && !differ[b] {
			b++
		}
		if b == t.g.count {
			break
		}
		if blo, _ := t.g.bounds(b, ledger.Seq(t.covered)); blo > lo {
			lo = blo
		}
		hi := min(ledger.Seq(t.covered), lo+ledger.Seq(t.window)-1)
		in := func(id compact.NodeID) (ledger.Seq, bool) {
			seq, ok := t.stored(id)
			return seq, ok && seq >= lo && seq <= hi && differ[t.g.of(seq)]
		}
		want := map[compact.NodeID][]byte{}
		r := (&compact.RangeFactory{Hash: hasher.HashChildren}).NewEmptyRange(0)
		err := eachEvent(ctx, snap, readErr, ledger.Seq(t.covered), func(raw []byte) error {
			return r.Append(hasher.HashLeaf(raw), func(id compact.NodeID, h []byte) {
				if _, ok := in(id); ok {
					want[id] = append([]byte(nil), h...)
				}
			})
		})
		if err != nil {
			return err
		}
		var bad ledger.Seq
		var detail string
		note := func(seq ledger.Seq, id compact.NodeID, what string) {
			if bad == 0 || seq < bad {
				bad, detail = seq, fmt.Sprintf("Merkle node (level %d, index %d) %s", id.Level, id.Index, what)
			}
		}
		err = eachNode(ctx, snap, readErr, func(id compact.NodeID, h []byte) error {
			seq, ok := in(id)
			if !ok {
				return nil
			}
			w, found := want[id]
			switch {
			case !found:
				note(seq, id, "is not a node of the events' tree")
			case !bytes.Equal(w, h):
				note(seq, id, "differs from the events")
			}
			delete(want, id)
			return nil
		})
		if err != nil {
			return err
		}
		for id := range want {
			seq, _ := t.stored(id)
			note(seq, id, "is missing")
		}
		if bad != 0 {
			return fault("tree", bad, FaultTree, detail)
		}
		lo = hi + 1
	}
	return fault("tree", 0, FaultTree, "Merkle node index sums differ but no node was found to differ")
}

// eachEvent calls fn with the canonical bytes of events 1..n.
func eachEvent(ctx context.Context, snap *pebble.Snapshot, readErr readErrFunc, n ledger.Seq, fn func([]byte) error) error {
	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: keys.Event(1), UpperBound: keys.Event(n + 1)})
	if err != nil {
		return unreadable("tree", 1, n, readErr, err)
	}
	defer it.Close()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i++; i%cancelEvery == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if lv := it.LazyValue(); lv.Len() > events.MaxEventBytes {
			seq, _ := keys.SeqOf(it.Key())
			return fault("tree", seq, FaultUndecodable, events.ErrTooLarge.Error()) // found by the event pass first
		}
		v, err := it.ValueAndErr()
		if err != nil {
			seq, _ := keys.SeqOf(it.Key())
			return unreadable("tree", seq, n, readErr, err)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return unreadable("tree", 1, n, readErr, err)
	}
	return nil
}
