package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
)

func drafts(a string, n int) []events.Draft {
	ds := make([]events.Draft, n)
	for i := range ds {
		ds[i] = draft(a, "s1", i)
	}
	return ds
}

// A retried keyed append is answered with the original acknowledgements
// and writes nothing; different content under the same key is refused;
// the record survives a reopen; the chain and the events are untouched.
func TestAppendIdempotent(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l := open(t, dir)
	first, replayed, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "req-1"}, drafts("a1", 3)...)
	if err != nil || replayed || len(first) != 3 || first[0].Seq != 1 {
		t.Fatalf("first: %v %v %v", first, replayed, err)
	}
	again, replayed, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "req-1"}, drafts("a1", 3)...)
	if err != nil || !replayed || !slices.Equal(again, first) {
		t.Fatalf("retry: %v %v %v, want %v", again, replayed, err, first)
	}
	if _, _, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "req-1"}, drafts("a2", 3)...); !errors.Is(err, ledger.ErrIdempotencyConflict) {
		t.Fatalf("other content under the same key: %v", err)
	}
	for _, k := range []string{"", "a/b", string(make([]byte, ledger.MaxIdempotencyKeyLen+1))} {
		if _, _, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: k}, drafts("a1", 1)...); !errors.Is(err, ledger.ErrIdempotencyKey) {
			t.Fatalf("key %q: %v", k, err)
		}
	}
	if h := l.Head().Seq; h != 3 {
		t.Fatalf("head %d after one append and refused retries", h)
	}
	if _, err := l.Append(ctx, drafts("a3", 2)...); err != nil { // unkeyed appends still work
		t.Fatal(err)
	}
	l.Close()
	l = open(t, dir)
	defer l.Close()
	again, replayed, err = l.AppendIdempotent(ctx, ledger.Idempotency{Key: "req-1"}, drafts("a1", 3)...)
	if err != nil || !replayed || !slices.Equal(again, first) {
		t.Fatalf("retry after reopen: %v %v %v", again, replayed, err)
	}
	if rep, err := verify.Ledger(ctx, l, verify.Options{}); err != nil || rep.Events != 5 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// Retries racing the original (queued, sealing, awaiting the fsync) are
// all matched: the events are written once and every caller gets the
// same acknowledgements.
func TestAppendIdempotentConcurrentRetries(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	ctx := context.Background()
	const keysN, retries = 20, 6
	var wg sync.WaitGroup
	results := make([][][]ledger.Ack, keysN)
	for k := range keysN {
		results[k] = make([][]ledger.Ack, retries)
		for r := range retries {
			wg.Go(func() {
				acks, _, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: fmt.Sprintf("k%d", k)}, drafts(fmt.Sprintf("a%d", k), 4)...)
				if err != nil {
					t.Error(err)
				}
				results[k][r] = acks
			})
		}
	}
	wg.Wait()
	if h := l.Head().Seq; h != keysN*4 {
		t.Fatalf("head %d, want %d: a retry was written", h, keysN*4)
	}
	for k := range keysN {
		for r := 1; r < retries; r++ {
			if !slices.Equal(results[k][r], results[k][0]) {
				t.Fatalf("key %d: %v vs %v", k, results[k][r], results[k][0])
			}
		}
	}
}

// The window keeps the most recent keys: beyond it the oldest is
// forgotten (a retry is a new append), and a smaller window at reopen
// trims the records.
func TestIdempotencyWindow(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := ledger.Open(ledger.Options{Dir: dir, IdempotencyWindow: 3})
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for i := range 4 {
		if _, _, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: fmt.Sprintf("k%d", i)}, drafts("a", 1)...); err != nil {
			t.Fatal(err)
		}
	}
	if _, replayed, _ := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "k0"}, drafts("a", 1)...); replayed {
		t.Fatal("k0 is still remembered beyond a window of 3")
	}
	// Now remembered: k2, k3, k0.
	if _, replayed, _ := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "k2"}, drafts("a", 1)...); !replayed {
		t.Fatal("k2 forgotten within the window")
	}
	l.Close()
	l, err = ledger.Open(ledger.Options{Dir: dir, IdempotencyWindow: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	head := l.Head().Seq
	if acks, replayed, _ := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "k0"}, drafts("a", 1)...); !replayed || acks[0].Seq != head {
		t.Fatalf("the newest key after trimming: %v %v", acks, replayed)
	}
	// A retry of a forgotten key whose first attempt was sent before the
	// newest eviction cannot be matched: refused, not written again.
	if _, _, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "k3", FirstSent: sent}, drafts("a", 1)...); !errors.Is(err, ledger.ErrIdempotencyExpired) || l.Head().Seq != head {
		t.Fatalf("late retry of k3: %v (head %d, was %d)", err, l.Head().Seq, head)
	}
	if _, replayed, _ := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "k3"}, drafts("a", 1)...); replayed {
		t.Fatal("k3 kept beyond a window of 1")
	}
}

// A first-sent time far in the future is refused (it cannot be true, and
// would overflow nanoseconds); nothing is written.
func TestIdempotencyFirstSentInTheFuture(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	for _, fs := range []time.Time{time.Now().Add(time.Hour), time.UnixMilli(math.MaxInt64)} {
		_, _, err := l.AppendIdempotent(context.Background(), ledger.Idempotency{Key: "k", FirstSent: fs}, drafts("act-1", 1)...)
		if !errors.Is(err, ledger.ErrIdempotencyKey) {
			t.Fatalf("first sent %v: %v, want ErrIdempotencyKey", fs, err)
		}
	}
	if h := l.Head().Seq; h != 0 {
		t.Fatalf("a refused append wrote: head %d", h)
	}
	if _, _, err := l.AppendIdempotent(context.Background(), ledger.Idempotency{Key: "k", FirstSent: time.Now().Add(30 * time.Second)}, drafts("act-1", 1)...); err != nil {
		t.Fatalf("first sent within the clock slack: %v", err)
	}
}
