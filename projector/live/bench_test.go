package live_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// BenchmarkReplayVsPebble builds a log of LEASELEDGER_BENCH_EVENTS events
// (default 1,000,000; the workload of eventgen: leases, calls, confirmed
// HTTP requests, guardian receipts, closes) once, then in each iteration
// times, over the same log in the same run:
//
//   - raw: a Pebble forward iteration over the e/ keys, touching every value;
//   - projector: a full replay — ledger.Scan (the same iteration) feeding
//     every stored event to State.ApplyRaw — into a fresh state.
//
// It reports both rates and their ratio (goal ≥ 0.4).
//
//	go test -run '^$' -bench ReplayVsPebble -benchtime 3x ./projector/live/
func BenchmarkReplayVsPebble(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("LEASELEDGER_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	dir := b.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	appendAll(b, l, eventgen.Workload(n, max(n/2000, 1)))
	events := uint64(l.Head().Seq)
	ctx := context.Background()
	var rawDur, projDur time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		it, err := l.DB().NewIter(&pebble.IterOptions{LowerBound: []byte("e/"), UpperBound: []byte("e0")})
		if err != nil {
			b.Fatal(err)
		}
		var count, bytes uint64
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				b.Fatal(err)
			}
			bytes += uint64(len(v))
			count++
		}
		it.Close()
		rawDur += time.Since(start)
		if count != events {
			b.Fatalf("raw iteration saw %d of %d events", count, events)
		}

		start = time.Now()
		s := projector.New()
		if err := l.Scan(ctx, ledger.Query{}, func(_ ledger.Seq, raw []byte) error { return s.ApplyRaw(raw) }); err != nil {
			b.Fatal(err)
		}
		projDur += time.Since(start)
		if s.Seq() != events {
			b.Fatalf("projector applied up to %d of %d", s.Seq(), events)
		}
	}
	rawRate := float64(events) * float64(b.N) / rawDur.Seconds()
	projRate := float64(events) * float64(b.N) / projDur.Seconds()
	b.ReportMetric(float64(events), "events")
	b.ReportMetric(rawRate, "raw_events/s")
	b.ReportMetric(projRate, "projector_events/s")
	b.ReportMetric(projRate/rawRate, "ratio")
}
