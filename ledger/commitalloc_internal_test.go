package ledger

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
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
