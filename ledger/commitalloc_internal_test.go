package ledger

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/oklog/ulid/v2"
)

// newID gives the ULIDs and errors ulid.New gives with the same monotonic
// entropy: same milliseconds repeated (the monotonic increment), time
// moving forward and back, and a time ULIDs cannot hold.
func TestNewIDTwin(t *testing.T) {
	seed := [32]byte{1, 2, 3}
	want := ulid.Monotonic(rand.NewChaCha8(seed), 0)
	got := ulid.Monotonic(rand.NewChaCha8(seed), 0)
	var scratch [10]byte
	ms := uint64(1_700_000_000_000)
	steps := []uint64{ms, ms, ms, ms + 1, ms + 1, ms + 5, ms + 2, ms + 2, ulid.MaxTime() + 1, ms + 9}
	for i := range 2000 {
		steps = append(steps, ms+10+uint64(i/7))
	}
	for i, s := range steps {
		w, werr := ulid.New(s, want)
		g, gerr := newID(got, &scratch, s)
		if w != g || !errors.Is(gerr, werr) || (werr == nil) != (gerr == nil) {
			t.Fatalf("step %d (ms %d): newID = %s, %v; ulid.New = %s, %v", i, s, g, gerr, w, werr)
		}
	}
}

// seal allocates nothing beyond events.Seal: the ULID it draws costs no
// allocation.
func TestSealIDAllocs(t *testing.T) {
	p, err := events.Prepare(pipeDraft(1))
	if err != nil {
		t.Fatal(err)
	}
	l := &Ledger{entropy: ulid.Monotonic(rand.NewChaCha8([32]byte{7}), 0)}
	c := &committerLocal{}
	now := time.Unix(1_700_000_000, 0).UTC()
	id := ulid.Make()
	sealOnly := testing.AllocsPerRun(200, func() { events.Seal(p, 1, id, now, events.Hash{}) })
	viaLedger := testing.AllocsPerRun(200, func() { l.seal(c, p, now) })
	if viaLedger > sealOnly {
		t.Fatalf("seal allocates %.1f per event, events.Seal alone %.1f", viaLedger, sealOnly)
	}
}

// recordsPrealloc leaves a quarter of headroom over the last batch's
// events and never exceeds the batch bound.
func TestRecordsPrealloc(t *testing.T) {
	for _, bc := range []struct{ last, limit, want int }{
		{0, DefaultMaxBatchEvents, 0},
		{1, DefaultMaxBatchEvents, 1},
		{100, DefaultMaxBatchEvents, 125},
		{4000, DefaultMaxBatchEvents, 5000},
		{DefaultMaxBatchEvents, DefaultMaxBatchEvents, DefaultMaxBatchEvents},
		{100, 10, 10},
	} {
		if got := recordsPrealloc(bc.last, bc.limit); got != bc.want {
			t.Errorf("recordsPrealloc(%d, %d) = %d, want %d", bc.last, bc.limit, got, bc.want)
		}
	}
}

// takeAcks hands each call zeroed Acks of its own, capacity n (an append
// by the caller copies), one allocation per ackSlabLen one-event calls.
func TestTakeAcks(t *testing.T) {
	c := &committerLocal{}
	var got [][]Ack
	for i := range 3 * ackSlabLen {
		n := 1 + i%(ackSlabLen/4+2) // also calls too large for a slab
		a := c.takeAcks(n)
		if len(a) != n || cap(a) != n {
			t.Fatalf("takeAcks(%d): len %d cap %d", n, len(a), cap(a))
		}
		for j := range a {
			if a[j] != (Ack{}) {
				t.Fatalf("takeAcks(%d)[%d] not zero: %+v", n, j, a[j])
			}
			a[j].Seq = Seq(i + 1)
		}
		_ = append(a, Ack{Seq: 1 << 40}) // must not write into another call's acks
		got = append(got, a)
	}
	for i, a := range got {
		for j := range a {
			if a[j].Seq != Seq(i+1) {
				t.Fatalf("call %d's ack %d overwritten: seq %d", i, j, a[j].Seq)
			}
		}
	}
	c = &committerLocal{}
	allocs := testing.AllocsPerRun(10, func() {
		for range ackSlabLen {
			c.takeAcks(1)
		}
	})
	if allocs > 1 {
		t.Fatalf("%d one-event calls: %.1f allocations, want at most 1", ackSlabLen, allocs)
	}
}

// indexKeys writes exactly the entries it was given, each once with an
// empty value, in key order whatever the order they came in, and holds
// none of them after writeTo (the next batch starts empty).
func TestIndexKeysWrittenInKeyOrder(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: twinQuiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(7, 11))
	prefixes := []string{keys.PrefixActivation, keys.PrefixSession, keys.PrefixKind}
	var x indexKeys
	for round := range 5 {
		var want [][]byte
		for range 1 + rng.IntN(300) {
			prefix := prefixes[rng.IntN(len(prefixes))]
			id := string(rune('a' + rng.IntN(4)))
			if rng.IntN(3) == 0 {
				id += id // an id that another extends
			}
			seq := uint64(rng.IntN(1 << 20))
			key := append([]byte(prefix+id+"/"), byte(seq>>56), byte(seq>>48), byte(seq>>40), byte(seq>>32), byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq))
			if slices.ContainsFunc(want, func(k []byte) bool { return bytes.Equal(k, key) }) {
				continue // a seq is never indexed twice under one prefix and id
			}
			x.add(prefix, id, seq)
			want = append(want, key)
		}
		b := db.NewBatch()
		x.writeTo(b)
		var got [][]byte
		for r := b.Reader(); ; {
			kind, k, v, ok, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if kind != pebble.InternalKeyKindSet || len(v) != 0 {
				t.Fatalf("round %d: entry %q is %v with value %q", round, k, kind, v)
			}
			got = append(got, bytes.Clone(k))
		}
		b.Close()
		slices.SortFunc(want, bytes.Compare)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("round %d: wrote %d entries %q, want %d in key order %q", round, len(got), got, len(want), want)
		}
		if len(x.buf) != 0 || len(x.spans) != 0 {
			t.Fatalf("round %d: %d entries still held after writeTo", round, len(x.spans))
		}
	}
}
