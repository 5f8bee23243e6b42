package verify

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// A cancel during the index pass's localisation (many damaged windows)
// ends the verification promptly with the context's error.
func TestVerifyCancelDuringLocalise(t *testing.T) {
	dir := t.TempDir()
	const n = 3 * progressEvery
	writeRawLedger(t, dir, n, layoutBulk)
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: silent{}})
	if err != nil {
		t.Fatal(err)
	}
	var del [][]byte
	it, _ := db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PrefixKind), UpperBound: keys.UpperBound([]byte(keys.PrefixKind))})
	for ok := it.First(); ok; ok = it.Next() {
		if q, _ := keys.SeqOf(it.Key()); q%64 == 0 {
			del = append(del, append([]byte(nil), it.Key()...))
		}
	}
	it.Close()
	for _, k := range del {
		_ = db.Delete(k, pebble.NoSync)
	}
	db.Close()
	t.Logf("deleted %d entries", len(del))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan time.Time, 1)
	start := time.Now()
	_, err = Dir(ctx, dir, Options{buckets: 4096, window: 8, Progress: func(d, _ uint64) {
		if d == n {
			select {
			case <-done:
			default:
				go func() { time.Sleep(100 * time.Millisecond); cancel(); done <- time.Now() }()
			}
		}
	}})
	end := time.Now()
	select {
	case at := <-done:
		t.Logf("returned %v after the cancel (total %v): %v", end.Sub(at), end.Sub(start), err)
		if !errors.Is(err, context.Canceled) || end.Sub(at) > 2*time.Second {
			t.Fatalf("after a cancel: %v, %v later; want context.Canceled promptly", err, end.Sub(at))
		}
	default:
		t.Logf("returned before the cancel fired (total %v): %v", end.Sub(start), err)
	}
}

// Many damaged buckets cost one more scan of the index, not one per
// bucket or window: the second pass reads the index once.
func TestIndexLocaliseScansOnce(t *testing.T) {
	dir := t.TempDir()
	const n = 2000
	writeRawLedger(t, dir, n, layoutBulk)
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: silent{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var del [][]byte
	it, _ := db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PrefixKind), UpperBound: keys.UpperBound([]byte(keys.PrefixKind))})
	for ok := it.First(); ok; ok = it.Next() {
		if q, _ := keys.SeqOf(it.Key()); q%16 == 5 {
			del = append(del, append([]byte(nil), it.Key()...))
		}
	}
	it.Close()
	for _, k := range del {
		if err := db.Delete(k, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	snap := db.NewSnapshot()
	defer snap.Close()
	cfg := &passConfig{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
	s := newIndexSums(cfg, n, 256)
	differ := make([]bool, 256)
	for b := range differ {
		differ[b] = b%2 == 0 // many damaged buckets
	}
	k := slices.Index(keys.IndexPrefixes[:], keys.PrefixKind)
	err = s.localise(context.Background(), snap, k, differ, badEntry{pos: -1}, n, func(_ string, _, _ uint64, err error) error { return err })
	var ve *Error
	if !errors.As(err, &ve) || ve.Seq != 5 || ve.Fault != FaultIndex {
		t.Fatalf("localise: %v, want the missing entry of seq 5", err)
	}
	if s.scans != 1 {
		t.Fatalf("the second pass scanned the index %d times, want 1", s.scans)
	}
}
