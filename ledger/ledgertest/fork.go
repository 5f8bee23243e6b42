package ledgertest

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// Fork rewrites the closed data directory dir so that it keeps only its
// first keep events with a consistent m/head and m/tree — what an operator
// who rewrites history would leave: the later events, their index entries,
// idempotency records, Merkle nodes and projection snapshots (p/) covering
// any of them are gone. Opening it and appending different events then
// yields a forked history that verify alone cannot
// tell apart from an honest one; only a checkpoint signed before can.
func Fork(t testing.TB, dir string, keep ledger.Seq) {
	t.Helper()
	db := openRaw(t, dir)
	defer closeRaw(t, db)
	b := db.NewBatch()
	defer b.Close()
	del := func(k []byte) {
		if err := b.Delete(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	var headHash events.Hash
	if keep > 0 {
		v, closer, err := db.Get(keys.Event(keep))
		if err != nil {
			t.Fatalf("ledgertest: Fork: event %d: %v", keep, err)
		}
		env, err := events.Decode(v)
		closer.Close()
		if err != nil {
			t.Fatalf("ledgertest: Fork: event %d: %v", keep, err)
		}
		headHash = env.Hash
	}
	eachKey(t, db, nil, func(k, v []byte) {
		switch string(k[:2]) {
		case keys.PrefixEvent, keys.PrefixActivation, keys.PrefixSession, keys.PrefixKind:
			if seq, ok := keys.SeqOf(k); ok && seq > keep {
				del(k)
			}
		case keys.PrefixTree:
			if level, index, ok := keys.DecodeTreeNode(k); ok && (index+1)<<level > uint64(keep) {
				del(k)
			}
		case keys.PrefixSnapshot:
			// A projection snapshot covering a dropped event: a forger
			// deletes it too, so the projection rebuilds from the events.
			if len(v) < 8 || ledger.Seq(binary.BigEndian.Uint64(v[:8])) > keep {
				del(k)
			}
		case keys.PrefixIdem:
			if r, ok := keys.DecodeIdem(v); ok && r.First+ledger.Seq(r.Count)-1 > keep {
				del(k)
			}
		}
	})
	if err := b.Set([]byte(keys.Head), keys.EncodeHead(keep, headHash), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Set([]byte(keys.TreeSize), keys.EncodeTreeSize(keep), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// DropTreeIndex deletes the Merkle node index (every t/ key and m/tree) of
// the closed data directory dir: a ledger as written before the index
// existed.
func DropTreeIndex(t testing.TB, dir string) {
	t.Helper()
	db := openRaw(t, dir)
	defer closeRaw(t, db)
	if err := db.DeleteRange([]byte(keys.PrefixTree), keys.UpperBound([]byte(keys.PrefixTree)), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete([]byte(keys.TreeSize), pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// TreeIndex reports the Merkle node index of the closed data directory dir:
// m/tree (present false when missing) and the number of t/ nodes.
func TreeIndex(t testing.TB, dir string) (size ledger.Seq, present bool, nodes int) {
	t.Helper()
	db := openRaw(t, dir)
	defer closeRaw(t, db)
	v, closer, err := db.Get([]byte(keys.TreeSize))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		t.Fatal(err)
	default:
		size, present = keys.DecodeTreeSize(v)
		closer.Close()
	}
	eachKey(t, db, []byte(keys.PrefixTree), func([]byte, []byte) { nodes++ })
	return size, present, nodes
}

func openRaw(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func closeRaw(t testing.TB, db *pebble.DB) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// eachKey calls fn with every key (with prefix, when not nil) and value.
func eachKey(t testing.TB, db *pebble.DB, prefix []byte, fn func(k, v []byte)) {
	t.Helper()
	o := &pebble.IterOptions{}
	if prefix != nil {
		o.LowerBound, o.UpperBound = prefix, keys.UpperBound(prefix)
	}
	it, err := db.NewIter(o)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if len(it.Key()) >= 2 {
			fn(it.Key(), it.Value())
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
}
