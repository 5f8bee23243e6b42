package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"github.com/leaseledger/leaseledger/projector/live"
)

// BenchmarkSummarizeStored: Projection.Summarize over a log of 120,000
// events and 3,000 activations, nearly all retired and stored as parts,
// against audit.Summarize of the plain in-memory state of a full replay
// (the baseline, timed in the same run). It reports ratio = stored /
// in-memory time per call, for the control API's limit (100 listed) and
// for every unconfirmed one.
//
//	go test -run '^$' -bench SummarizeStored -benchtime 20x ./projector/live/
func BenchmarkSummarizeStored(b *testing.B) {
	p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: b.TempDir()}, SnapshotEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	appendAll(b, p.Ledger(), eventgen.Workload(120_000, 3000))
	if err := p.Snapshot(); err != nil {
		b.Fatal(err)
	}
	want := replayState(b, p.Ledger())
	for _, limit := range []int{100, audit.All} {
		name := "limit100"
		if limit == audit.All {
			name = "all"
		}
		b.Run(name, func(b *testing.B) {
			var mem, stored time.Duration
			for range b.N {
				start := time.Now()
				audit.Summarize(want, limit)
				mem += time.Since(start)
				start = time.Now()
				if _, err := p.Summarize(context.Background(), limit); err != nil {
					b.Fatal(err)
				}
				stored += time.Since(start)
			}
			b.ReportMetric(float64(stored)/float64(b.N)/1e3, "stored-µs/op")
			b.ReportMetric(float64(mem)/float64(b.N)/1e3, "mem-µs/op")
			b.ReportMetric(float64(stored)/float64(mem), "ratio")
		})
	}
}
