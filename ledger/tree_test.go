package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

var th = rfc6962.DefaultHasher

// refRoots recomputes from the events, independently of the index, the
// roots of every tree size 0..head and the leaf hashes.
func refRoots(t testing.TB, l *ledger.Ledger) (roots, leaves [][]byte) {
	t.Helper()
	r := (&compact.RangeFactory{Hash: th.HashChildren}).NewEmptyRange(0)
	roots = [][]byte{th.EmptyRoot()}
	err := l.Scan(context.Background(), ledger.Query{}, func(_ ledger.Seq, raw []byte) error {
		leaf := th.HashLeaf(raw)
		leaves = append(leaves, leaf)
		if err := r.Append(leaf, nil); err != nil {
			return err
		}
		root, err := r.GetRootHash(nil)
		roots = append(roots, root)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return roots, leaves
}

// checkTree checks TreeRoot at every step-th size (and the last 40), and
// inclusion proofs of those seqs against the head and consistency proofs
// from those sizes to the head.
func checkTree(t testing.TB, l *ledger.Ledger, step ledger.Seq) {
	t.Helper()
	ctx := context.Background()
	roots, leaves := refRoots(t, l)
	head := ledger.Seq(len(leaves))
	sampled := func(s ledger.Seq) bool { return s%step == 0 || s+40 > head }
	for size := range head + 1 {
		if !sampled(size) {
			continue
		}
		got, err := l.TreeRoot(ctx, size)
		if err != nil {
			t.Fatalf("TreeRoot(%d): %v", size, err)
		}
		if !bytes.Equal(got, roots[size]) {
			t.Fatalf("TreeRoot(%d) = %x, recomputed %x", size, got, roots[size])
		}
	}
	for seq := ledger.Seq(1); seq <= head; seq++ {
		if !sampled(seq) {
			continue
		}
		p, err := l.InclusionProof(ctx, seq, head)
		if err != nil {
			t.Fatalf("InclusionProof(%d, %d): %v", seq, head, err)
		}
		if err := proof.VerifyInclusion(th, uint64(seq-1), uint64(head), leaves[seq-1], p, roots[head]); err != nil {
			t.Fatalf("inclusion of %d in %d: %v", seq, head, err)
		}
		c, err := l.ConsistencyProof(ctx, seq, head)
		if err != nil {
			t.Fatalf("ConsistencyProof(%d, %d): %v", seq, head, err)
		}
		if err := proof.VerifyConsistency(th, uint64(seq), uint64(head), c, roots[seq], roots[head]); err != nil {
			t.Fatalf("consistency %d→%d: %v", seq, head, err)
		}
	}
}

func appendTree(t testing.TB, l *ledger.Ledger, n, batch int) {
	t.Helper()
	for i := 0; i < n; i += batch {
		ds := make([]events.Draft, min(batch, n-i))
		for j := range ds {
			ds[j] = draft("a1", "s1", i+j)
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTreeIndexProofs: roots and proofs from the index match the tree
// recomputed from the events, across reopens that leave incomplete blocks.
func TestTreeIndexProofs(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	checkTree(t, l, 1) // empty
	appendTree(t, l, 37, 5)
	checkTree(t, l, 1)
	l.Close()
	l = open(t, dir) // reopen mid-block: the compact range is restored
	appendTree(t, l, 300, 256)
	checkTree(t, l, 1)
	l.Close()
	size, present, nodes := ledgertest.TreeIndex(t, dir)
	if !present || size != 337 || nodes == 0 {
		t.Fatalf("m/tree %d (present %v), %d nodes; want 337 and nodes", size, present, nodes)
	}
}

// TestTreeIndexBuiltOnOpen: a ledger without the index proves correctly
// read-only (from the events) and gets the index built by a writable Open.
func TestTreeIndexBuiltOnOpen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	appendTree(t, l, 523, 100)
	want, _ := l.TreeRoot(context.Background(), 523)
	l.Close()
	_, _, nodes := ledgertest.TreeIndex(t, dir)
	ledgertest.DropTreeIndex(t, dir)
	if _, present, n := ledgertest.TreeIndex(t, dir); present || n != 0 {
		t.Fatalf("index not dropped: present %v, %d nodes", present, n)
	}

	ro, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, ro, 37)
	got, _ := ro.TreeRoot(context.Background(), 523)
	ro.Close()
	if !bytes.Equal(got, want) {
		t.Fatalf("read-only root without index %x, want %x", got, want)
	}
	if _, present, n := ledgertest.TreeIndex(t, dir); present || n != 0 {
		t.Fatalf("read-only open wrote the index: present %v, %d nodes", present, n)
	}

	l = open(t, dir)
	checkTree(t, l, 1)
	appendTree(t, l, 20, 7)
	checkTree(t, l, 1)
	l.Close()
	size, present, n := ledgertest.TreeIndex(t, dir)
	if !present || size != 543 || n < nodes {
		t.Fatalf("after writable open: m/tree %d (present %v), %d nodes (had %d)", size, present, n, nodes)
	}
}

// TestTreeRange: out-of-range arguments are ErrTreeRange.
func TestTreeRange(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	appendTree(t, l, 3, 3)
	ctx := context.Background()
	for name, err := range map[string]error{
		"root past head": func() error { _, err := l.TreeRoot(ctx, 4); return err }(),
		"seq 0":          func() error { _, err := l.InclusionProof(ctx, 0, 3); return err }(),
		"seq > size":     func() error { _, err := l.InclusionProof(ctx, 3, 2); return err }(),
		"size > head":    func() error { _, err := l.InclusionProof(ctx, 1, 4); return err }(),
		"from 0":         func() error { _, err := l.ConsistencyProof(ctx, 0, 3); return err }(),
		"from > to":      func() error { _, err := l.ConsistencyProof(ctx, 3, 2); return err }(),
		"to > head":      func() error { _, err := l.ConsistencyProof(ctx, 1, 4); return err }(),
	} {
		var le *ledger.Error
		if !errors.Is(err, ledger.ErrTreeRange) || !errors.As(err, &le) {
			t.Errorf("%s: %v, want a *ledger.Error wrapping ErrTreeRange", name, err)
		}
	}
}

// TestTreeCrashConsistent kills the crash harness's appender (crash_test.go)
// at random moments; after each reopen the index covers exactly the
// durable log and every proof checks.
func TestTreeCrashConsistent(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for n := 0; n < 200*(round+1) && sc.Scan(); n++ {
		}
		time.Sleep(time.Duration(round*7) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		go func() {
			for sc.Scan() {
			}
		}()
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child did not die by SIGKILL", round)
		}
		size, present, _ := ledgertest.TreeIndex(t, dir)
		l := open(t, dir)
		head := l.Head().Seq
		if !present || size != head {
			t.Fatalf("round %d: after the crash m/tree is %d (present %v), the head %d", round, size, present, head)
		}
		checkTree(t, l, 13)
		l.Close()
		t.Logf("round %d: head %d", round, head)
	}
}

// TestForkKeepsConsistentIndex: a forked directory opens, appends a
// different history and proves it consistently.
func TestForkKeepsConsistentIndex(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	appendTree(t, l, 100, 10)
	r40, _ := l.TreeRoot(context.Background(), 40)
	r100, _ := l.TreeRoot(context.Background(), 100)
	l.Close()
	ledgertest.Fork(t, dir, 40)
	if size, _, _ := ledgertest.TreeIndex(t, dir); size != 40 {
		t.Fatalf("m/tree %d after Fork(40)", size)
	}
	l = open(t, dir)
	defer l.Close()
	if l.Head().Seq != 40 {
		t.Fatalf("head %d after Fork(40)", l.Head().Seq)
	}
	for i := range 60 {
		if _, err := l.Append(context.Background(), draft("other", "s9", i)); err != nil {
			t.Fatal(err)
		}
	}
	checkTree(t, l, 1)
	g40, _ := l.TreeRoot(context.Background(), 40)
	g100, _ := l.TreeRoot(context.Background(), 100)
	if !bytes.Equal(g40, r40) || bytes.Equal(g100, r100) {
		t.Fatal(fmt.Sprintf("fork: root 40 kept %v, root 100 changed %v", bytes.Equal(g40, r40), !bytes.Equal(g100, r100)))
	}
}

// TestTreeStaleNodesDropped: a log truncated by hand (events and m/head cut
// back, the Merkle nodes and m/tree left as they were) opens with m/tree at
// the head and no node past it, and a different history appended then
// proves against its own events.
func TestTreeStaleNodesDropped(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	appendTree(t, l, 100, 10)
	l.Close()
	_, _, before := ledgertest.TreeIndex(t, dir)
	ledgertest.Fork(t, dir, 40)
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	// Put back a stale node of the old history past the new head and
	// the old m/tree.
	stale := keys.TreeNode(5, 2) // leaves 64..95
	if err := db.Set(stale, bytes.Repeat([]byte{7}, 32), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte(keys.TreeSize), keys.EncodeTreeSize(100), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if size, _, n := ledgertest.TreeIndex(t, dir); size != 100 || n <= 2 || n >= before {
		t.Fatalf("setup: m/tree %d, %d nodes (had %d)", size, n, before)
	}
	l = open(t, dir)
	l.Close()
	size, _, n := ledgertest.TreeIndex(t, dir)
	if size != 40 || n != 3 { // within 40 leaves: nodes 4/0, 4/1 and 5/0
		t.Fatalf("after open: m/tree %d, %d nodes; want 40 and the 3 nodes within it", size, n)
	}
	l = open(t, dir)
	defer l.Close()
	appendTree(t, l, 60, 7)
	checkTree(t, l, 1)
}
