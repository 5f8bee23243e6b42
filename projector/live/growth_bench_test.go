package live_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"github.com/leaseledger/leaseledger/projector/live"
)

// growthEvents is LEASELEDGER_BENCH_EVENTS (default 1,000,000): the large
// history of the growth benchmarks; the small one is a tenth of it.
func growthEvents() int {
	if v, err := strconv.Atoi(os.Getenv("LEASELEDGER_BENCH_EVENTS")); err == nil && v > 0 {
		return v
	}
	return 1_000_000
}

// growLedger writes n workload events (40 per activation, 97 sessions)
// through the live projection with the default snapshot interval, as
// serve does, and closes it (final snapshot).
func growLedger(b *testing.B, dir string, n int) {
	p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: dir}})
	if err != nil {
		b.Fatal(err)
	}
	appendAll(b, p.Ledger(), eventgen.Workload(n, n/40))
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
}

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkOpenGrowth measures what serve's start-up costs as history
// grows: two ledgers written as serve writes them (live projection,
// periodic snapshots), of N/10 and N events (N = LEASELEDGER_BENCH_EVENTS,
// default 10^6; 40 events per activation). Each iteration opens and
// closes both; it reports the Open time and the Go heap held by the open
// projection (after a GC, less the heap before Open) of each, and their
// ratios large/small (goal: within 1.5); and, for comparison, the bare
// ledger.Open of each directory.
//
//	go test -run '^$' -bench OpenGrowth -benchtime 3x ./projector/live/
func BenchmarkOpenGrowth(b *testing.B) {
	n := growthEvents()
	sizes := [2]int{n / 10, n}
	var dirs [2]string
	for i, sz := range sizes {
		dirs[i] = b.TempDir()
		growLedger(b, dirs[i], sz)
	}
	var dur, ledgerDur [2]time.Duration
	var heap [2]uint64
	b.ResetTimer()
	for range b.N {
		for i := range sizes {
			// The bare ledger's own Open, for comparison.
			start := time.Now()
			l, err := ledger.Open(ledger.Options{Dir: dirs[i]})
			if err != nil {
				b.Fatal(err)
			}
			ledgerDur[i] += time.Since(start)
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			base := heapInuse()
			start = time.Now()
			p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: dirs[i]}})
			if err != nil {
				b.Fatal(err)
			}
			dur[i] += time.Since(start)
			if h := heapInuse(); h > base {
				heap[i] += h - base
			}
			if err := p.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	it := float64(b.N)
	b.ReportMetric(dur[0].Seconds()*1e3/it, "open_small_ms")
	b.ReportMetric(dur[1].Seconds()*1e3/it, "open_large_ms")
	b.ReportMetric(ledgerDur[0].Seconds()*1e3/it, "ledger_open_small_ms")
	b.ReportMetric(ledgerDur[1].Seconds()*1e3/it, "ledger_open_large_ms")
	b.ReportMetric(float64(heap[0])/it/(1<<20), "heap_small_MiB")
	b.ReportMetric(float64(heap[1])/it/(1<<20), "heap_large_MiB")
	b.ReportMetric(dur[1].Seconds()/dur[0].Seconds(), "open_ratio")
	b.ReportMetric(float64(heap[1])/float64(max(heap[0], 1)), "heap_ratio")
}

// BenchmarkSnapshotGrowth measures one periodic snapshot's cost against
// history: over ledgers of N/10 and N events (as BenchmarkOpenGrowth), each
// iteration appends the same 20,000 further events to both and times the
// Snapshot that covers them. It reports both and their ratio large/small
// (goal: about 1 — a snapshot encodes the live part and what changed,
// never history).
//
//	go test -run '^$' -bench SnapshotGrowth -benchtime 3x ./projector/live/
func BenchmarkSnapshotGrowth(b *testing.B) {
	n := growthEvents()
	sizes := [2]int{n / 10, n}
	var ps [2]*live.Projection
	for i, sz := range sizes {
		dir := b.TempDir()
		growLedger(b, dir, sz)
		p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: dir}, SnapshotEvery: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		ps[i] = p
	}
	var dur [2]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, p := range ps {
			b.StopTimer()
			appendAll(b, p.Ledger(), eventgen.Workload(20_000, 500))
			b.StartTimer()
			start := time.Now()
			if err := p.Snapshot(); err != nil {
				b.Fatal(err)
			}
			dur[i] += time.Since(start)
		}
	}
	b.StopTimer()
	it := float64(b.N)
	b.ReportMetric(dur[0].Seconds()*1e3/it, "snap_small_ms")
	b.ReportMetric(dur[1].Seconds()*1e3/it, "snap_large_ms")
	b.ReportMetric(dur[1].Seconds()/dur[0].Seconds(), "snap_ratio")
}
