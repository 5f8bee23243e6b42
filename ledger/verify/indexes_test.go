package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/transparency-dev/merkle/compact"
	"pgregory.net/rapid"
)

// legacyDB runs the exact reference (legacyCheck) on db.
func legacyDB(ctx context.Context, db *pebble.DB, vo Options) (Report, error) {
	return legacyCheck(ctx, db, func(op string, first, last uint64, err error) error {
		if pebble.IsCorruptionError(err) {
			return &ledger.Error{Op: op, Seq: ledger.Seq(first), Last: ledger.Seq(last), Err: fmt.Errorf("%w: %w", ledger.ErrCorrupt, err)}
		}
		return &ledger.Error{Op: op, Seq: ledger.Seq(first), Err: err}
	}, vo)
}

// sameFinding fails t unless got and want are the same verdict: both
// nil, or *Errors with the same op, seq, fault and detail.
func sameFinding(t interface {
	Helper()
	Fatalf(string, ...any)
}, what string, got, want error) {
	t.Helper()
	if got == nil && want == nil {
		return
	}
	var g, w *Error
	if !errors.As(got, &g) || !errors.As(want, &w) {
		t.Fatalf("%s: got %v, reference %v", what, got, want)
	}
	if g.Op != w.Op || g.Seq != w.Seq || g.Fault != w.Fault || g.Detail != w.Detail {
		t.Fatalf("%s:\n got       %v\n reference %v", what, got, want)
	}
}

// undo restores the keys a test case changed.
type undo struct {
	db   *pebble.DB
	orig map[string][]byte // nil value: the key did not exist
}

func (u *undo) remember(t *rapid.T, key []byte) {
	if _, ok := u.orig[string(key)]; ok {
		return
	}
	v, closer, err := u.db.Get(key)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		u.orig[string(key)] = nil
	case err != nil:
		t.Fatal(err)
	default:
		u.orig[string(key)] = append([]byte{}, v...)
		closer.Close()
	}
}

func (u *undo) set(t *rapid.T, key, value []byte) {
	u.remember(t, key)
	if err := u.db.Set(key, value, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

func (u *undo) del(t *rapid.T, key []byte) {
	u.remember(t, key)
	if err := u.db.Delete(key, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

func (u *undo) restore(t interface{ Fatal(...any) }) {
	for k, v := range u.orig {
		var err error
		if v == nil {
			err = u.db.Delete([]byte(k), pebble.NoSync)
		} else {
			err = u.db.Set([]byte(k), v, pebble.NoSync)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Random corruptions of the secondary indexes (entries deleted, added,
// moved to another identifier or seq, malformed, beyond the head; one to
// three at once) are found, and named exactly as the exact per-event check
// names them: same op, seq, fault and detail. Small buckets and windows make
// every path of the sums and of the second pass run on a small log.
func TestIndexSumsFindWhatTheExactCheckFinds(t *testing.T) {
	const n = 120
	db := tamperFixture(t, n)
	envs := make([]events.Envelope, n+1)
	for seq := ledger.Seq(1); seq <= n; seq++ {
		env, err := events.Decode(mustGet(t, db, keys.Event(seq)))
		if err != nil {
			t.Fatal(err)
		}
		envs[seq] = env
	}
	ids := [3][]string{{"a0", "a1", "a2", "zz", ""}, {"s0", "s1", "zz", ""}, {"call.finished", "lease.revoked", ""}}
	ctx := context.Background()
	found := 0
	rapid.Check(t, func(t *rapid.T) {
		u := &undo{db: db, orig: map[string][]byte{}}
		defer u.restore(t)
		for k := range rapid.IntRange(1, 3).Draw(t, "corruptions") {
			i := rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("index%d", k))
			prefix := keys.IndexPrefixes[i]
			seq := ledger.Seq(rapid.IntRange(1, n).Draw(t, fmt.Sprintf("seq%d", k)))
			own := keys.For(&envs[seq])[1+i] // e/, then a/, s/, k/: every fixture event has all three
			switch op := rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("op%d", k)); op {
			case 0: // delete the event's entry
				u.del(t, own)
			case 1: // add an entry under any identifier at any seq
				s := ledger.Seq(rapid.SampledFrom([]int{0, 1, int(seq), n, n + 1, n + 1000}).Draw(t, "at"))
				u.set(t, keys.Index(prefix, rapid.SampledFrom(ids[i]).Draw(t, "id"), s), nil)
			case 2: // move the entry to another identifier
				u.del(t, own)
				u.set(t, keys.Index(prefix, rapid.SampledFrom(ids[i]).Draw(t, "to"), seq), nil)
			case 3: // move the entry to another seq
				u.del(t, own)
				to := ledger.Seq(rapid.IntRange(1, n).Draw(t, "toseq"))
				u.set(t, keys.Index(prefix, string(own[len(prefix):len(own)-9]), to), nil)
			case 4: // a malformed key
				u.set(t, append([]byte(prefix), "x"...), nil)
			}
		}
		buckets := rapid.SampledFrom([]int{1, 3, 16, IndexBuckets}).Draw(t, "buckets")
		window := rapid.SampledFrom([]int{1, 7, 50, LocaliseEvents}).Draw(t, "window")
		_, got := verifyDB(ctx, db, Options{buckets: buckets, window: window})
		_, want := legacyDB(ctx, db, Options{})
		sameFinding(t, "corrupted indexes", got, want)
		if want != nil {
			found++
		}
	})
	if found == 0 {
		t.Fatal("no corruption was ever found: the generator is broken")
	}
	if _, err := verifyDB(ctx, db, Options{}); err != nil {
		t.Fatalf("restored log does not verify: %v", err)
	}
}

// An item's memory is within the itemBytes that MemoryBound counts.
func TestItemBytesBound(t *testing.T) {
	if sz := unsafe.Sizeof(item{}); sz > itemBytes {
		t.Fatalf("item is %d bytes, MemoryBound counts %d", sz, itemBytes)
	}
}

// exactTree is the exact reference of the tree check: every stored-level
// node the events give within min(m/tree, head) leaves against every
// stored one; the fault names the lowest first leaf of a node that is
// missing, differs or should not be there.
func exactTree(t interface{ Fatal(...any) }, db *pebble.DB) (bad ledger.Seq, malformed bool) {
	var covered ledger.Seq
	if v, closer, err := db.Get([]byte(keys.TreeSize)); err == nil {
		covered, _ = keys.DecodeTreeSize(v)
		closer.Close()
	}
	covered = min(covered, mustHeadOf(t, db))
	if covered < 1<<keys.TreeStoredLevel {
		return 0, false
	}
	want := map[compact.NodeID]string{}
	r := (&compact.RangeFactory{Hash: hasher.HashChildren}).NewEmptyRange(0)
	for seq := ledger.Seq(1); seq <= covered; seq++ {
		v, closer, err := db.Get(keys.Event(seq))
		if err != nil {
			t.Fatal(err)
		}
		err = r.Append(hasher.HashLeaf(v), func(id compact.NodeID, h []byte) {
			if _, end := id.Coverage(); id.Level >= keys.TreeStoredLevel && end <= uint64(covered) {
				want[id] = string(h)
			}
		})
		closer.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	note := func(id compact.NodeID) {
		first, _ := id.Coverage()
		if seq := ledger.Seq(first + 1); bad == 0 || seq < bad {
			bad = seq
		}
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PrefixTree), UpperBound: keys.UpperBound([]byte(keys.PrefixTree))})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		level, index, ok := keys.DecodeTreeNode(it.Key())
		if !ok {
			return 0, true // named at seq 0
		}
		id := compact.NewNodeID(level, index)
		if first, end := id.Coverage(); level < keys.TreeStoredLevel || level >= 64 || end > uint64(covered) || end <= first {
			continue
		}
		if w, ok := want[id]; !ok || w != string(it.Value()) {
			note(id)
		}
		delete(want, id)
	}
	for id := range want {
		note(id)
	}
	return bad, false
}

// rawGet is the value of key (32 zero bytes when there is none).
func rawGet(t interface{ Fatal(...any) }, db *pebble.DB, key []byte) []byte {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return make([]byte, 32)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return append([]byte(nil), v...)
}

func mustHeadOf(t interface{ Fatal(...any) }, db *pebble.DB) ledger.Seq {
	v, closer, err := db.Get([]byte(keys.Head))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	seq, _, _ := keys.DecodeHead(v)
	return seq
}

// Random corruptions of the Merkle node index (nodes deleted, changed,
// copied, added at any level and index, malformed keys, m/tree moved) are
// found and named at the first leaf of the lowest bad node, as an exact
// comparison of every node names it; m/tree away from the head alone is
// not a fault.
func TestTreeSumsFindWhatTheExactCheckFinds(t *testing.T) {
	const n = 150
	db := tamperFixture(t, n)
	var nodes [][]byte
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PrefixTree), UpperBound: keys.UpperBound([]byte(keys.PrefixTree))})
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		nodes = append(nodes, append([]byte(nil), it.Key()...))
	}
	it.Close()
	if len(nodes) < 10 {
		t.Fatalf("the fixture has %d stored Merkle nodes", len(nodes))
	}
	ctx := context.Background()
	found := 0
	rapid.Check(t, func(t *rapid.T) {
		u := &undo{db: db, orig: map[string][]byte{}}
		defer u.restore(t)
		for k := range rapid.IntRange(1, 3).Draw(t, "corruptions") {
			node := rapid.SampledFrom(nodes).Draw(t, fmt.Sprintf("node%d", k))
			switch op := rapid.IntRange(0, 5).Draw(t, fmt.Sprintf("op%d", k)); op {
			case 0:
				u.del(t, node)
			case 1:
				v := rawGet(t, db, node)
				v[rapid.IntRange(0, len(v)-1).Draw(t, "byte")] ^= 1
				u.set(t, node, v)
			case 2:
				u.set(t, node, rawGet(t, db, rapid.SampledFrom(nodes).Draw(t, "from")))
			case 3:
				level := uint(rapid.IntRange(0, 9).Draw(t, "level"))
				u.set(t, keys.TreeNode(level, uint64(rapid.IntRange(0, 12).Draw(t, "index"))), make([]byte, 32))
			case 4:
				u.set(t, append([]byte(keys.PrefixTree), 4, 0, 0), make([]byte, 32))
			case 5:
				size := rapid.SampledFrom([]int{0, 15, 16, 64, 100, n, n + 50}).Draw(t, "tree size")
				u.set(t, []byte(keys.TreeSize), keys.EncodeTreeSize(ledger.Seq(size)))
			}
		}
		buckets := rapid.SampledFrom([]int{1, 3, 16, IndexBuckets}).Draw(t, "buckets")
		window := rapid.SampledFrom([]int{1, 16, 50, LocaliseEvents}).Draw(t, "window")
		_, err := verifyDB(ctx, db, Options{Tree: true, buckets: buckets, window: window})
		want, malformed := exactTree(t, db)
		var ve *Error
		switch {
		case want == 0 && !malformed && err == nil:
		case malformed && errors.As(err, &ve) && ve.Op == "tree" && ve.Seq == 0 && strings.Contains(ve.Detail, "malformed"):
		case want != 0 && errors.As(err, &ve) && ve.Op == "tree" && ve.Fault == FaultTree && ve.Seq == want:
			found++
		default:
			t.Fatalf("verify = %v, the exact check names seq %d", err, want)
		}
	})
	if found == 0 {
		t.Fatal("no corruption was ever found: the generator is broken")
	}
	if _, err := verifyDB(ctx, db, Options{Tree: true}); err != nil {
		t.Fatalf("restored log does not verify: %v", err)
	}
}

// A chain re-sealed from seq 20 on with its Merkle node index left as it was
// verifies without Options.Tree and fails with it, naming the lowest first
// leaf of a stale node: (level 5, index 0) covers leaves 1..32.
func TestTreeCheckFindsStaleNodes(t *testing.T) {
	db := tamperFixture(t, 40)
	var prev events.Hash
	for seq := ledger.Seq(1); seq <= 40; seq++ {
		env, err := events.Decode(mustGet(t, db, keys.Event(seq)))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := env.Payload()
		if seq == 20 {
			p = &events.LeaseRevoked{Reason: "forged"}
		}
		prep, err := events.Prepare(events.Draft{Activation: env.Activation, Session: env.Session, Server: env.Server, Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		sealed, raw := events.Seal(prep, seq, env.ID, env.Time, prev)
		prev = sealed.Hash
		_ = db.Set(keys.Event(seq), raw, pebble.NoSync)
		if seq == 20 { // keep the kind index consistent
			_ = db.Delete(keys.Index(keys.PrefixKind, string(env.Kind), seq), pebble.NoSync)
			_ = db.Set(keys.Index(keys.PrefixKind, string(sealed.Kind), seq), nil, pebble.NoSync)
		}
	}
	_ = db.Set([]byte(keys.Head), keys.EncodeHead(40, prev), pebble.NoSync)
	ctx := context.Background()
	if _, err := verifyDB(ctx, db, Options{}); err != nil {
		t.Fatalf("without the tree check the re-sealed chain verifies: %v", err)
	}
	rep, err := verifyDB(ctx, db, Options{Tree: true})
	var ve *Error
	if !errors.As(err, &ve) || ve.Op != "tree" || ve.Fault != FaultTree || ve.Seq != 1 || !strings.Contains(ve.Detail, "level 5, index 0") {
		t.Fatalf("tree check: %v (%+v)", err, rep)
	}
}

// On a log of several batches (and buckets of many seqs) the node index
// and a checkpoint in the middle verify: the root is the one the ledger
// computes. (The Merkle range keeps the leaf slices it is given, and batch
// items are reused once the reader has cycled through InFlightBatches
// batches: TestVerifyMemoryBound, at 10^6 events, fails if the event pass
// hands it the item's own bytes.)
func TestTreeAcrossBatches(t *testing.T) {
	const n = 5*BatchEvents + 100
	dir := t.TempDir()
	writeRawLedger(t, dir, n, layoutBulk)
	l, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := CheckpointAt(ctx, l, "o", 3*BatchEvents+7)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Dir(ctx, dir, Options{Tree: true, Checkpoints: []Checkpoint{c}, buckets: 64, window: 1000})
	if err != nil || rep.Events != n || rep.TreeNodes < n/16 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// A cancelled context stops the pipeline: the error is the context's, at
// the start or in the middle of the event pass, and no goroutine outlives
// the call (goleak checks the package).
func TestVerifyStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	writeRawLedger(t, dir, 3*progressEvery, layoutBulk)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dir(ctx, dir, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	rep, err := Dir(ctx, dir, Options{Tree: true, Progress: func(done, _ uint64) {
		if done >= progressEvery {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || rep.Events < progressEvery || rep.Events >= 3*progressEvery {
		t.Fatalf("cancelled midway: %+v %v", rep, err)
	}
}
