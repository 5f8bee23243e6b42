package ledger_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// BenchmarkAppend measures the commit pipeline (sealing, the Merkle node
// index, one fsync per batch) in ns per event: one appender of 256-event
// calls, and 64 concurrent appenders of one event each. Compare builds with
// benchstat or the ratio of ns/event (the committer's cost of the index is
// the difference against a build without it).
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct{ appenders, batch int }{{1, 256}, {64, 1}} {
		b.Run(fmt.Sprintf("appenders=%d/batch=%d", bc.appenders, bc.batch), func(b *testing.B) {
			l, err := ledger.Open(ledger.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ds := make([]events.Draft, bc.batch)
			for i := range ds {
				ds[i] = draft("act-1", "s1", i)
			}
			per := bc.batch
			b.ResetTimer()
			if bc.appenders == 1 {
				for range b.N {
					if _, err := l.Append(context.Background(), ds...); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(max(1, bc.appenders/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := l.Append(context.Background(), ds...); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/event")
		})
	}
}
