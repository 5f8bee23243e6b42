package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// tamperFixture writes n events through the ledger, closes it and reopens
// the directory as a raw Pebble DB for the test to damage.
func tamperFixture(t *testing.T, n int) *pebble.DB {
	t.Helper()
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	digest := strings.Repeat("ef", 32)
	for i := range n {
		d := events.Draft{Activation: fmt.Sprintf("a%d", i%3), Session: fmt.Sprintf("s%d", i%2),
			Payload: &events.CallFinished{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Outcome: "ok", DurationNS: int64(i), ArgsSHA256: digest}}
		if _, err := l.Append(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: silent{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := verifyDB(context.Background(), db, Options{}); err != nil {
		t.Fatalf("fixture does not verify: %v", err)
	}
	return db
}

func mustGet(t *testing.T, db *pebble.DB, key []byte) []byte {
	t.Helper()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...)
}

func expectFault(t *testing.T, db *pebble.DB, seq ledger.Seq, what string) *Error {
	t.Helper()
	_, err := verifyDB(context.Background(), db, Options{})
	var ve *Error
	if !errors.As(err, &ve) || !errors.Is(err, ErrVerify) {
		t.Fatalf("%s: verify = %v, want a *Error", what, err)
	}
	if ve.Seq != seq {
		t.Fatalf("%s: verify named seq %d (%v), want %d", what, ve.Seq, ve, seq)
	}
	return ve
}

// Every single-byte change of a stored event is found and named by seq.
func TestVerifyFindsEveryFlippedByte(t *testing.T) {
	db := tamperFixture(t, 30)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, seq := range []ledger.Seq{1, 17, 30} {
		key := keys.Event(seq)
		orig := mustGet(t, db, key)
		for off := range orig {
			mut := append([]byte(nil), orig...)
			mut[off] ^= byte(1 + rng.IntN(255))
			if err := db.Set(key, mut, pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			expectFault(t, db, seq, fmt.Sprintf("seq %d byte %d", seq, off))
		}
		if err := db.Set(key, orig, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := verifyDB(context.Background(), db, Options{}); err != nil {
		t.Fatalf("restored log does not verify: %v", err)
	}
}

func TestVerifyFindsDeletion(t *testing.T) {
	db := tamperFixture(t, 10)
	if err := db.Delete(keys.Event(4), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if ve := expectFault(t, db, 4, "delete seq 4"); ve.Fault != FaultGap {
		t.Fatalf("fault %s, want gap", ve.Fault)
	}
}

func TestVerifyFindsTruncatedTail(t *testing.T) {
	db := tamperFixture(t, 10)
	if err := db.Delete(keys.Event(10), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if ve := expectFault(t, db, 10, "delete last"); ve.Fault != FaultHeadMismatch {
		t.Fatalf("fault %s, want head_mismatch", ve.Fault)
	}
}

func TestVerifyFindsSwap(t *testing.T) {
	db := tamperFixture(t, 10)
	a, b := mustGet(t, db, keys.Event(3)), mustGet(t, db, keys.Event(7))
	_ = db.Set(keys.Event(3), b, pebble.NoSync)
	_ = db.Set(keys.Event(7), a, pebble.NoSync)
	if ve := expectFault(t, db, 3, "swap 3 and 7"); ve.Fault != FaultSeqMismatch {
		t.Fatalf("fault %s, want seq_mismatch", ve.Fault)
	}
}

// A re-sealed event (valid hash over altered facts) breaks the link to its
// successor, which names the successor's seq.
func TestVerifyFindsResealedEvent(t *testing.T) {
	db := tamperFixture(t, 10)
	env, err := events.Decode(mustGet(t, db, keys.Event(5)))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := events.Prepare(events.Draft{Activation: env.Activation, Session: env.Session, Payload: &events.LeaseTerminated{Reason: events.TerminatedHostLost}})
	_, forged := events.Seal(p, 5, env.ID, env.Time, env.Prev)
	_ = db.Set(keys.Event(5), forged, pebble.NoSync)
	if ve := expectFault(t, db, 6, "resealed 5"); ve.Fault != FaultBrokenLink {
		t.Fatalf("fault %s, want broken_link", ve.Fault)
	}
}

func TestVerifyFindsIndexTampering(t *testing.T) {
	db := tamperFixture(t, 10)
	// seq 4 has activation a0 (i=3): point its entry at a1 instead.
	_ = db.Delete(keys.Index(keys.PrefixActivation, "a0", 4), pebble.NoSync)
	_ = db.Set(keys.Index(keys.PrefixActivation, "a1", 4), nil, pebble.NoSync)
	if ve := expectFault(t, db, 4, "moved index entry"); ve.Fault != FaultIndex {
		t.Fatalf("fault %s, want index", ve.Fault)
	}
	_ = db.Delete(keys.Index(keys.PrefixActivation, "a1", 4), pebble.NoSync)
	if ve := expectFault(t, db, 4, "deleted index entry"); ve.Fault != FaultIndex || !strings.Contains(ve.Detail, "missing") {
		t.Fatalf("deleted index entry: %v", ve)
	}
}

// A deleted entry of any index is reported at the seq of the event that
// lacks it, never at seq 0, wherever it sits in the index's key order.
func TestVerifyPinsDeletedIndexEntryToItsSeq(t *testing.T) {
	for _, tc := range []struct {
		prefix, id string
		seq        ledger.Seq
	}{
		{keys.PrefixActivation, "a2", 9}, // i=8: a2
		{keys.PrefixActivation, "a0", 1},
		{keys.PrefixSession, "s1", 10}, // i=9: s1, the last event
		{keys.PrefixKind, "call.finished", 6},
	} {
		db := tamperFixture(t, 10)
		_ = db.Delete(keys.Index(tc.prefix, tc.id, tc.seq), pebble.NoSync)
		ve := expectFault(t, db, tc.seq, "deleted "+tc.prefix+tc.id)
		if ve.Op != "indexes" || ve.Fault != FaultIndex || !strings.Contains(ve.Error(), fmt.Sprintf("seq %d:", tc.seq)) {
			t.Fatalf("deleted %s%s/%d: %v", tc.prefix, tc.id, tc.seq, ve)
		}
	}
}

func TestVerifyReportsProgress(t *testing.T) {
	db := tamperFixture(t, 5)
	var last, total uint64
	if _, err := verifyDB(context.Background(), db, Options{Progress: func(d, tt uint64) { last, total = d, tt }}); err != nil {
		t.Fatal(err)
	}
	if last != 5 || total != 5 {
		t.Fatalf("final progress %d/%d", last, total)
	}
}

// Cutting off the tail and rewriting m/head to match leaves a consistent
// shorter chain: only an anchor recorded elsewhere reveals it.
func TestVerifyAnchorFindsRewrittenTail(t *testing.T) {
	db := tamperFixture(t, 10)
	anchor := mustHead(t, db)
	seq9, err := events.Decode(mustGet(t, db, keys.Event(9)))
	if err != nil {
		t.Fatal(err)
	}
	env10, _ := events.Decode(mustGet(t, db, keys.Event(10)))
	for _, k := range keys.For(&env10) {
		_ = db.Delete(k, pebble.NoSync)
	}
	_ = db.Set([]byte(keys.Head), keys.EncodeHead(9, seq9.Hash), pebble.NoSync)
	if _, err := verifyDB(context.Background(), db, Options{}); err != nil {
		t.Fatalf("without an anchor the shorter chain is consistent, got %v", err)
	}
	_, err = verifyDB(context.Background(), db, Options{Anchors: []ledger.Head{anchor}})
	var ve *Error
	if !errors.As(err, &ve) || ve.Fault != FaultAnchor || ve.Seq != 10 {
		t.Fatalf("anchored verify: %v", err)
	}
	// A correct anchor inside the chain passes; a wrong hash at it fails.
	if _, err := verifyDB(context.Background(), db, Options{Anchors: []ledger.Head{{Seq: 9, Hash: seq9.Hash}}}); err != nil {
		t.Fatal(err)
	}
	_, err = verifyDB(context.Background(), db, Options{Anchors: []ledger.Head{{Seq: 9, Hash: anchor.Hash}}})
	if !errors.As(err, &ve) || ve.Fault != FaultAnchor || ve.Seq != 9 {
		t.Fatalf("wrong anchor hash: %v", err)
	}
}

func mustHead(t *testing.T, db *pebble.DB) ledger.Head {
	seq, hash, ok := keys.DecodeHead(mustGet(t, db, []byte(keys.Head)))
	if !ok {
		t.Fatal("bad head")
	}
	return ledger.Head{Seq: seq, Hash: hash}
}
