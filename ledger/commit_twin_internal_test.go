package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/oklog/ulid/v2"
)

const twinDigest = "abababababababababababababababababababababababababababababababab"

// twinLedger opens a ledger whose clock and ULID entropy are fixed, so that
// two of them fed the same appends in the same order store the same bytes.
// inline selects the sequential pipeline (the committer applies each batch
// itself); applies counts its inline applies.
func twinLedger(t *testing.T, dir string, inline bool, applies *atomic.Int64) *Ledger {
	t.Helper()
	opts := twinOptions(dir)
	if inline {
		opts.hooks = &testHooks{hookInlineApply: func() { applies.Add(1) }}
	}
	return openTwin(t, opts)
}

// twinOptions are the options of a twin ledger at dir: its own clock.
func twinOptions(dir string) Options {
	var ticks atomic.Int64
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	return Options{Dir: dir, MaxBatchEvents: 64, IdempotencyWindow: 8,
		// Every request reads the clock once (add): the n-th request gets
		// the same time on both ledgers. Some share a millisecond, so the
		// monotonic entropy's increments are exercised too.
		Now: func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * 300 * time.Microsecond) }}
}

// openTwin opens a twin ledger with opts (twinOptions) and its fixed
// entropy.
func openTwin(t *testing.T, opts Options) *Ledger {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Before the first append: the enqueue that follows orders this write
	// before every read of the committer.
	l.entropy = ulid.Monotonic(rand.NewChaCha8([32]byte{7}), 0)
	return l
}

// feedTwin appends the same sequence to l: async appends queued back to
// back (so that batches hold many requests and calls overflow them), calls
// of up to 200 events, events without session or activation, keyed appends
// with a retry and a conflict, and window evictions.
func feedTwin(t *testing.T, l *Ledger) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	mk := func(i int) events.Draft {
		d := events.Draft{Activation: fmt.Sprintf("act-%d", i%5), Session: fmt.Sprintf("s-%d", i%3), Server: "srv",
			Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Digest: twinDigest}}
		switch i % 7 {
		case 0:
			d.Session = ""
		case 1:
			d.Activation, d.Session = "", ""
		}
		return d
	}
	n := 0
	for round := range 6 {
		var waits []func(context.Context) ([]Seq, error)
		for range 40 {
			size := 1 + rng.IntN(5)
			if rng.IntN(10) == 0 {
				size = 30 + rng.IntN(170)
			}
			ds := make([]events.Draft, size)
			for j := range ds {
				ds[j] = mk(n)
				n++
			}
			w, err := l.AppendAsync(ctx, ds...)
			if err != nil {
				t.Fatal(err)
			}
			waits = append(waits, w)
		}
		for _, w := range waits {
			if _, err := w(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for k := range 5 {
			key := fmt.Sprintf("key-%d-%d", round, k)
			ds := []events.Draft{mk(n), mk(n + 1)}
			n += 2
			if _, _, err := l.AppendIdempotent(ctx, Idempotency{Key: key}, ds...); err != nil {
				t.Fatal(err)
			}
			if _, replayed, err := l.AppendIdempotent(ctx, Idempotency{Key: key}, ds...); err != nil || !replayed {
				t.Fatalf("retry: replayed %v, %v", replayed, err)
			}
			if _, _, err := l.AppendIdempotent(ctx, Idempotency{Key: key}, mk(n)); !errors.Is(err, ErrIdempotencyConflict) {
				t.Fatalf("conflict: %v", err)
			}
		}
	}
}

// dumpPebble returns every key and value stored in dir.
func dumpPebble(t *testing.T, dir string) (ks, vs [][]byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, FormatMajorVersion: pebble.FormatNewest, Logger: twinQuiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		ks = append(ks, bytes.Clone(it.Key()))
		vs = append(vs, bytes.Clone(it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return ks, vs
}

// TestPipelinedApplyTwin: the pipelined committer (batches applied by the
// applier while the committer seals the next, up to inflightBatches of them
// awaiting their fsyncs) stores byte-identical keys and values — events,
// indexes, head, Merkle nodes and tree size, idempotency records — and
// reaches the same chain head as the sequential pipeline (the committer
// applying each batch itself, one batch past it at a time), for the same
// appends.
func TestPipelinedApplyTwin(t *testing.T) {
	dirs := [2]string{t.TempDir(), t.TempDir()}
	var applies [2]atomic.Int64
	var heads [2]Head
	var commits [2]uint64
	for i, inline := range []bool{false, true} {
		l := twinLedger(t, dirs[i], inline, &applies[i])
		feedTwin(t, l)
		heads[i], commits[i] = l.Head(), l.Stats().Commits
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if applies[0].Load() != 0 || applies[1].Load() == 0 || uint64(applies[1].Load()) != commits[1] {
		t.Fatalf("inline applies: pipelined %d, sequential %d of %d commits", applies[0].Load(), applies[1].Load(), commits[1])
	}
	if heads[0] != heads[1] || heads[0].Seq < 1000 {
		t.Fatalf("heads differ or too short: %+v %+v", heads[0], heads[1])
	}
	if commits[0] < 10 {
		t.Fatalf("only %d commits: the batches were not exercised", commits[0])
	}
	k0, v0 := dumpPebble(t, dirs[0])
	k1, v1 := dumpPebble(t, dirs[1])
	if len(k0) != len(k1) {
		t.Fatalf("%d keys pipelined, %d sequential", len(k0), len(k1))
	}
	var tree, idem int
	for i := range k0 {
		if !bytes.Equal(k0[i], k1[i]) || !bytes.Equal(v0[i], v1[i]) {
			t.Fatalf("entry %d differs: %q=%x vs %q=%x", i, k0[i], v0[i], k1[i], v1[i])
		}
		switch {
		case bytes.HasPrefix(k0[i], []byte(keys.PrefixTree)):
			tree++
		case bytes.HasPrefix(k0[i], []byte(keys.PrefixIdem)):
			idem++
		}
	}
	if tree == 0 || idem == 0 {
		t.Fatalf("compared %d Merkle nodes and %d idempotency records: the twin did not cover them", tree, idem)
	}
}

// TestSetEventKeysTwin: setEvent writes exactly keys.For's keys, the record
// under the first and empty values under the index entries, whichever
// identifiers are empty, reusing its buffer across events.
func TestSetEventKeysTwin(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: twinQuiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var buf []byte
	var ix indexKeys
	for i, ids := range [][3]string{{"act-1", "s-1", ""}, {"", "s-2", "x"}, {"a", "", "srv"}, {"", "", ""}, {"a-very-long-activation-id-" + string(bytes.Repeat([]byte("z"), 100)), "s", "srv"}} {
		env := events.Envelope{Seq: Seq(1 + i*1000003), Kind: (&events.CallAdmitted{}).Kind(), Activation: ids[0], Session: ids[1], Server: ids[2]}
		raw := []byte(fmt.Sprintf("raw-%d", i))
		b := db.NewIndexedBatch()
		buf = setEvent(b, buf, &ix, &env, raw)
		ix.writeTo(b)
		it, err := b.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for ok := it.First(); ok; ok = it.Next() {
			got = append(got, bytes.Clone(it.Key()))
			want := []byte(nil)
			if bytes.Equal(it.Key(), keys.Event(env.Seq)) {
				want = raw
			}
			if !bytes.Equal(it.Value(), want) {
				t.Fatalf("event %d: %q = %q, want %q", i, it.Key(), it.Value(), want)
			}
		}
		it.Close()
		b.Close()
		want := keys.For(&env)
		if len(got) != len(want) {
			t.Fatalf("event %d: keys %q, want %q", i, got, want)
		}
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || bytes.Equal(g, w)
			}
			if !found {
				t.Fatalf("event %d: key %q missing from %q", i, w, got)
			}
		}
	}
}

// twinQuiet silences the Pebble opens of these tests.
type twinQuiet struct{}

func (twinQuiet) Infof(string, ...any)           {}
func (twinQuiet) Errorf(string, ...any)          {}
func (twinQuiet) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
