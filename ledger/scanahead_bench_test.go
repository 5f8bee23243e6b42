package ledger_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/cputime"
	"github.com/leaseledger/leaseledger/ledger"
)

// BenchmarkScanAhead compares ScanAhead with Scan over the same
// 100,000-event log in the same run, with an fn that does nothing and one
// that hashes each event (work for the caller's goroutine to overlap with
// the reader). It reports wall-clock and whole-process CPU time per event
// (proc_cpu_ns/event: both threads and the garbage collector); with a core
// to spare, ScanAhead's ns/event falls below its proc_cpu_ns/event.
//
//	go test -run '^$' -bench ScanAhead -benchtime 5x -count 3 ./ledger/
func BenchmarkScanAhead(b *testing.B) {
	const n = 100_000
	l := aheadLog(b, n)
	ctx := context.Background()
	fns := []struct {
		name string
		fn   func(ledger.Seq, []byte) error
	}{
		{"noop", func(ledger.Seq, []byte) error { return nil }},
		{"hash", func(_ ledger.Seq, raw []byte) error { sha256.Sum256(raw); return nil }},
	}
	for _, f := range fns {
		for _, scan := range []struct {
			name string
			run  func(context.Context, ledger.Query, func(ledger.Seq, []byte) error) error
		}{{"scan", l.Scan}, {"ahead", l.ScanAhead}} {
			b.Run(f.name+"/"+scan.name, func(b *testing.B) {
				cpu := processCPU(b)
				for range b.N {
					if err := scan.run(ctx, ledger.Query{}, f.fn); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
				b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N*n), "proc_cpu_ns/event")
			})
		}
	}
}

// processCPU is the CPU time (user and system) of the whole process.
func processCPU(b *testing.B) time.Duration {
	d, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return d
}
