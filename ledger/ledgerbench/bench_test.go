package ledgerbench

import (
	"context"
	"testing"
)

func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Config{Dir: t.TempDir(), Concurrency: 4, Batch: 3, Events: 300, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ledger.Events != 300 || res.RawSame.Events != 300 || res.RawRecords.Events != 300 || res.Ratio() <= 0 || res.RecordsRatio() <= 0 || res.EventBytes < 200 {
		t.Fatalf("result %+v", res)
	}
}

func benchmarkRatio(b *testing.B, concurrency, batch int) {
	var sum, records float64
	for b.Loop() {
		res, err := Run(context.Background(), Config{Dir: b.TempDir(), Concurrency: concurrency, Batch: batch, Events: 50000 * batch / max(1, batch/8), Rounds: 1})
		if err != nil {
			b.Fatal(err)
		}
		sum += res.Ratio()
		b.ReportMetric(res.Ledger.Rate(), "ledger-events/s")
		b.ReportMetric(res.RawSame.Rate(), "raw-same-events/s")
		b.ReportMetric(res.RawRecords.Rate(), "raw-records-events/s")
		records += res.RecordsRatio()
		b.ReportMetric(float64(res.Ledger.Events)/float64(max(1, res.Ledger.Commits)), "events/commit")
	}
	b.ReportMetric(sum/float64(b.N), "ratio-same")
	b.ReportMetric(records/float64(b.N), "ratio-records")
}

// BenchmarkAppend64 compares durable Append from 64 goroutines with raw
// Pebble Sync commits of the same bytes from 64 goroutines (goal ≥ 0.7).
func BenchmarkAppend64(b *testing.B) { benchmarkRatio(b, 64, 1) }

// BenchmarkAppendBatch256 compares Append with 256 events per call with raw
// Pebble 256-value batches (goal ≥ 0.5).
func BenchmarkAppendBatch256(b *testing.B) { benchmarkRatio(b, 4, 256) }
