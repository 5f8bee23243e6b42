package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// lockedBuffer is a log sink safe for the ledger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// quietPebble drops Pebble's log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// rawDB runs fn on the closed data directory dir opened with Pebble alone.
func rawDB(t *testing.T, dir string, fn func(db *pebble.DB)) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	fn(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// partialIndex leaves the index covering only the first keep leaves.
func partialIndex(t *testing.T, dir string, keep uint64) {
	t.Helper()
	rawDB(t, dir, func(db *pebble.DB) {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PrefixTree), UpperBound: keys.UpperBound([]byte(keys.PrefixTree))})
		if err != nil {
			t.Fatal(err)
		}
		var del [][]byte
		for it.First(); it.Valid(); it.Next() {
			if lv, ix, ok := keys.DecodeTreeNode(it.Key()); ok && (ix+1)<<lv > keep {
				del = append(del, append([]byte(nil), it.Key()...))
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		for _, k := range del {
			if err := db.Delete(k, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Set([]byte(keys.TreeSize), keys.EncodeTreeSize(ledger.Seq(keep)), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTreeMissingNodeComputed: a stored node missing below the head (the
// index damaged by hand) does not fail a root or a proof: it is computed
// from the events, logged once, and written back by a writable ledger; a
// read-only ledger computes it too.
func TestTreeMissingNodeComputed(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	appendTree(t, l, 1000, 100)
	l.Close()
	missing := [][]byte{keys.TreeNode(4, 1), keys.TreeNode(6, 3), keys.TreeNode(9, 0)}
	drop := func() {
		rawDB(t, dir, func(db *pebble.DB) {
			for _, k := range missing {
				if err := db.Delete(k, pebble.Sync); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	drop()
	_, _, before := ledgertest.TreeIndex(t, dir)

	ro, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, ro, 7)
	ro.Close()

	var logs lockedBuffer
	l, err = ledger.Open(ledger.Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ConsistencyProof(context.Background(), 16, l.Head().Seq); err != nil {
		t.Fatalf("ConsistencyProof(16, head) with node 4/1 missing: %v", err)
	}
	appendTree(t, l, 10, 10)
	checkTree(t, l, 7)
	l.Close()
	if n := strings.Count(logs.String(), "missing from the index"); n != 1 {
		t.Fatalf("the missing nodes were logged %d times, want once:\n%s", n, logs.String())
	}
	if _, _, after := ledgertest.TreeIndex(t, dir); after < before+len(missing) {
		t.Fatalf("%d nodes before the repair, %d after: want the %d missing written back", before, after, len(missing))
	}
	rawDB(t, dir, func(db *pebble.DB) {
		for _, k := range missing {
			if _, closer, err := db.Get(k); err != nil {
				t.Fatalf("node %x not written back: %v", k, err)
			} else {
				closer.Close()
			}
		}
	})
}

// TestTreeReadOnlyPartialIndex: a read-only ledger whose index covers only
// a prefix (at every kind of boundary) proves against its events, and a
// writable Open then completes the index.
func TestTreeReadOnlyPartialIndex(t *testing.T) {
	for _, keep := range []uint64{1, 16, 17, 255, 256, 300, 522} {
		dir := t.TempDir()
		l := open(t, dir)
		appendTree(t, l, 523, 100)
		l.Close()
		partialIndex(t, dir, keep)
		ro, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, ro, 11)
		ro.Close()
		l = open(t, dir)
		checkTree(t, l, 11)
		appendTree(t, l, 37, 5)
		checkTree(t, l, 11)
		l.Close()
	}
}

// TestTreeReadOnlyCache: a read-only ledger without the index keeps the
// stored-level nodes its first proof computed from the events (at most
// TreeCacheNodes), so later proofs do not scan the log again, and they
// still verify.
func TestTreeReadOnlyCache(t *testing.T) {
	const n = 2000
	dir := t.TempDir()
	l := open(t, dir)
	appendTree(t, l, n, 500)
	l.Close()
	ledgertest.DropTreeIndex(t, dir)
	ro, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got := ledger.TreeCacheLen(ro); got != 0 {
		t.Fatalf("%d nodes cached before any proof", got)
	}
	if _, err := ro.InclusionProof(context.Background(), 1, n); err != nil {
		t.Fatal(err)
	}
	// Every stored-level node of the tree of n leaves: n/16 + n/32 + …
	want := 0
	for lv := keys.TreeStoredLevel; n>>lv > 0; lv++ {
		want += n >> lv
	}
	// All but those on the path of leaf 0 (the proof holds their siblings).
	path := 0
	for lv := keys.TreeStoredLevel; 1<<lv <= n; lv++ {
		path++
	}
	if got := ledger.TreeCacheLen(ro); got != want-path || got > ledger.TreeCacheNodes {
		t.Fatalf("%d nodes cached after a proof over the whole log, want %d (bound %d)", got, want-path, ledger.TreeCacheNodes)
	}
	checkTree(t, ro, 13)
	if got := ledger.TreeCacheLen(ro); got != want {
		t.Fatalf("%d nodes cached after more proofs, want %d", got, want)
	}
}

// TestForkDropsSnapshotsPastKeep: Fork deletes the projection snapshots
// covering events past keep (what a forger does to keep the projection
// consistent) and keeps the others.
func TestForkDropsSnapshotsPastKeep(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	appendTree(t, l, 50, 10)
	for name, covers := range map[string]ledger.Seq{"early": 20, "edge": 30, "late": 31, "head": 50} {
		if err := l.SaveSnapshot(name, covers, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	ledgertest.Fork(t, dir, 30)
	l = open(t, dir)
	defer l.Close()
	for name, kept := range map[string]bool{"early": true, "edge": true, "late": false, "head": false} {
		_, data, err := l.LoadSnapshot(name)
		switch {
		case kept && (err != nil || string(data) != name):
			t.Errorf("snapshot %s: %q, %v; want it kept", name, data, err)
		case !kept && !errors.Is(err, ledger.ErrNoSnapshot):
			t.Errorf("snapshot %s: %v; want ErrNoSnapshot", name, err)
		}
	}
}
