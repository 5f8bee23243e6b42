package verify

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// BenchmarkProofs measures proofs on one ledger of 10^6 events (built once,
// about a minute; LEASELEDGER_PROOF_BENCH_EVENTS changes the count): making
// an inclusion proof of a random seq against the head, checking it, making
// a consistency proof from a random size to the head, and a checkpoint of
// the head from the index. proof-bytes is the proof's hashes.
// LEASELEDGER_PROOF_BENCH_DIR names an existing ledger to use instead,
// opened read-only (a 10^7-event one takes minutes to write: write it once,
// e.g. with TestVerifyMemoryBound's writer, and reuse it).
func BenchmarkProofs(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("LEASELEDGER_PROOF_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	dir, given := os.LookupEnv("LEASELEDGER_PROOF_BENCH_DIR")
	if !given {
		dir = b.TempDir()
	}
	l, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: given})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if given {
		n = 0
	}
	start := time.Now()
	const batch = ledger.MaxAppendEvents
	ds := make([]events.Draft, batch)
	for i := 0; i < n; i += batch {
		ds = ds[:min(batch, n-i)]
		for j := range ds {
			ds[j] = events.Draft{Activation: "act-1", Session: "s1", Payload: &events.LeaseRevoked{Reason: "r", CallsInFlight: i + j}}
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("built %d events in %v", n, time.Since(start))
	ctx := context.Background()
	head := l.Head().Seq
	rng := rand.New(rand.NewPCG(1, 2))
	seq := func() ledger.Seq { return ledger.Seq(1 + rng.Uint64N(uint64(head))) }
	c, err := CheckpointAt(ctx, l, "bench", head)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("inclusion", func(b *testing.B) {
		var size int
		for b.Loop() {
			h, err := l.InclusionProof(ctx, seq(), head)
			if err != nil {
				b.Fatal(err)
			}
			size = 32 * len(h)
		}
		b.ReportMetric(float64(size), "proof-bytes")
	})
	b.Run("verify-inclusion", func(b *testing.B) {
		s := seq()
		h, err := l.InclusionProof(ctx, s, head)
		if err != nil {
			b.Fatal(err)
		}
		raw, err := l.GetRaw(s)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := VerifyInclusion(c, s, raw, h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("consistency", func(b *testing.B) {
		var size int
		for b.Loop() {
			h, err := l.ConsistencyProof(ctx, seq(), head)
			if err != nil {
				b.Fatal(err)
			}
			size = 32 * len(h)
		}
		b.ReportMetric(float64(size), "proof-bytes")
	})
	b.Run("checkpoint", func(b *testing.B) {
		for b.Loop() {
			if _, err := CheckpointAt(ctx, l, "bench", head); err != nil {
				b.Fatal(err)
			}
		}
	})
}
