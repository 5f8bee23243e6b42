package ledger

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkWALFill compares a ledger whose write-ahead logs are written
// ahead with zeros (walfill.go) against one whose logs grow as written,
// two ledgers on the same disk in one run, their phases alternating, with
// 1 and 16 writers of one-event calls each waiting for its ack. It reports
// filled over plain: calls per second (throughput-ratio), ack p50 and p99
// (p50-ratio, p99-ratio: the commits whose fsync flushes a fill's zeros
// are about one in a few hundred) and process CPU per call (cpu-ratio).
// Both ledgers are fresh, so every commit lands in their first log, the
// one Pebble does not recycle.
func BenchmarkWALFill(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			var sides [2]*overlapSide
			for i, plain := range []bool{true, false} {
				opts, fs := gatedOptions(b.TempDir())
				opts.plainWAL = plain
				l, err := Open(opts)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				sides[i] = &overlapSide{l: l, fs: fs}
			}
			calls := 512 * writers
			round := 0
			for b.Loop() {
				for k := range 2 {
					sides[(round+k)%2].phase(b, writers, calls)
				}
				round++
			}
			plain, filled := sides[0], sides[1]
			rate := func(s *overlapSide) float64 { return float64(s.calls) / s.elapsed.Seconds() }
			cpu := func(s *overlapSide) float64 { return float64(s.cpu) / float64(s.calls) }
			b.ReportMetric(rate(filled)/rate(plain), "throughput-ratio")
			b.ReportMetric(float64(filled.p50())/float64(plain.p50()), "p50-ratio")
			b.ReportMetric(float64(p99(filled.lat))/float64(p99(plain.lat)), "p99-ratio")
			b.ReportMetric(cpu(filled)/cpu(plain), "cpu-ratio")
			b.ReportMetric(rate(plain), "plain-calls/s")
		})
	}
}

// p99 is the 99th percentile of lat, which it sorts.
func p99(lat []time.Duration) time.Duration {
	slices.Sort(lat)
	return lat[len(lat)*99/100]
}
