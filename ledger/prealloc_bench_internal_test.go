package ledger

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/leaseledger/leaseledger/events"
	"github.com/oklog/ulid/v2"
)

// BenchmarkBatchPrealloc seals the same sequence of batches (event counts
// varying ±10% around a mean, as under a steady load) into real Pebble
// batches preallocated after the last batch's size, exactly (the former
// policy) and with batchPrealloc's headroom, interleaved in one run. It
// reports the headroom policy's time as a ratio of the exact one's, and the
// fraction of batches each policy let Pebble grow (double and copy).
func BenchmarkBatchPrealloc(b *testing.B) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: twinQuiet{}})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const mean = 4000
	envs := make([]events.Envelope, mean+mean/10)
	raws := make([][]byte, len(envs))
	for i := range envs {
		p, err := events.Prepare(pipeDraft(i))
		if err != nil {
			b.Fatal(err)
		}
		envs[i], raws[i] = events.Seal(p, Seq(i+1), ulid.ULID{byte(i), byte(i >> 8)}, time.Unix(0, 0).UTC(), events.Hash{})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]int, 32)
	for i := range sizes {
		sizes[i] = mean - mean/10 + rng.IntN(mean/5)
	}
	var buf []byte
	var ix indexKeys
	run := func(policy func(int) int) (time.Duration, int) {
		last, grown := 0, 0
		start := time.Now()
		for _, n := range sizes {
			bt := db.NewBatchWithSize(policy(last))
			c0 := cap(bt.Repr())
			for i := range n {
				buf = setEvent(bt, buf, &ix, &envs[i], raws[i])
			}
			ix.writeTo(bt)
			if cap(bt.Repr()) != c0 {
				grown++
			}
			last = bt.Len()
			bt.Close()
		}
		return time.Since(start), grown
	}
	exact := func(last int) int { return last }
	var tExact, tHead time.Duration
	var gExact, gHead, rounds int
	for b.Loop() {
		d, g := run(exact)
		tExact, gExact = tExact+d, gExact+g
		d, g = run(batchPrealloc)
		tHead, gHead = tHead+d, gHead+g
		rounds++
	}
	b.ReportMetric(float64(tHead)/float64(tExact), "headroom/exact")
	b.ReportMetric(float64(gExact)/float64(rounds*len(sizes)), "grown-exact")
	b.ReportMetric(float64(gHead)/float64(rounds*len(sizes)), "grown-headroom")
}
