package verify

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
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
