package collector_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// benchEvents is the backlog of BenchmarkCatchUp: LEASELEDGER_BENCH_EVENTS,
// default 10^5.
func benchEvents(b *testing.B) int {
	if s := os.Getenv("LEASELEDGER_BENCH_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("LEASELEDGER_BENCH_EVENTS=%q: want a positive count", s)
		}
		return n
	}
	return 100_000
}

// benchBatch is the events of one Append call in the benchmarks: serve's
// gateway appends a call's few events at a time; concurrency makes the
// group commits.
const benchBatch, benchWriters = 16, 8

// appendTimed appends n events to h from benchWriters goroutines and
// returns how long until the last was acknowledged, and when each seq was.
func appendTimed(b testing.TB, h *testHost, n int) (time.Duration, map[events.Seq]time.Time) {
	acks := make(map[events.Seq]time.Time, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := range benchWriters {
		wg.Go(func() {
			for i := w * benchBatch; i < n; i += benchWriters * benchBatch {
				var ds []events.Draft
				for j := i; j < min(n, i+benchBatch); j++ {
					ds = append(ds, bustest.Draft(fmt.Sprintf("a%d", j%50), "s1", j))
				}
				seqs, err := h.l.Append(context.Background(), ds...)
				now := time.Now()
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				for _, s := range seqs {
					acks[s] = now
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return time.Since(start), acks
}

// storeTimes records when the mirror stored each seq (a Watch observer).
type storeTimes struct {
	mu   sync.Mutex
	at   map[events.Seq]time.Time
	want events.Seq
	done chan struct{}
}

func (s *storeTimes) Committed(batch []ledger.Record) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range batch {
		s.at[r.Env.Seq] = now
		if r.Env.Seq == s.want {
			close(s.done)
		}
	}
}

// BenchmarkCollectorIngest compares the collector's live ingest rate with
// the host's own append rate in the same run (ingest/append, 1 = the
// collector keeps pace) and reports the lag from a host's ack to the
// mirror's store (p50, p99).
func BenchmarkCollectorIngest(b *testing.B) {
	n := 20_000
	for b.Loop() {
		b.StopTimer()
		f := newFleet(b, "h1")
		h := f.hosts["h1"]
		c := f.collector(b.TempDir(), []string{"h1"}, nil)
		base := h.l.Head().Seq
		waitStatus(b, c, "h1", "live", func(s collector.HostStatus) bool { return s.Head == base })
		st := &storeTimes{at: map[events.Seq]time.Time{}, want: base + events.Seq(n), done: make(chan struct{})}
		unwatch := c.Mirror("h1").Watch(st)
		b.StartTimer()
		start := time.Now()
		appendDur, acks := appendTimed(b, h, n)
		select {
		case <-st.done:
		case <-time.After(waitFor):
			b.Fatalf("mirror did not reach %d", st.want)
		}
		mirrorDur := time.Since(start)
		b.StopTimer()
		unwatch()
		var lags []time.Duration
		st.mu.Lock()
		for seq, ack := range acks {
			lags = append(lags, st.at[seq].Sub(ack))
		}
		st.mu.Unlock()
		slices.Sort(lags)
		b.ReportMetric(float64(n)/appendDur.Seconds(), "append-events/s")
		b.ReportMetric(float64(n)/mirrorDur.Seconds(), "ingest-events/s")
		b.ReportMetric(appendDur.Seconds()/mirrorDur.Seconds(), "ingest/append")
		b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "lag-p50-ms")
		b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "lag-p99-ms")
		c.Close()
		b.StartTimer()
	}
}

// BenchmarkCatchUp measures how long a collector takes to mirror a host
// that is LEASELEDGER_BENCH_EVENTS events ahead, against the time the host
// took to append them (catch-up/append: 1 = as fast as they were written).
func BenchmarkCatchUp(b *testing.B) {
	n := benchEvents(b)
	for b.Loop() {
		b.StopTimer()
		f := newFleet(b, "h1")
		h := f.hosts["h1"]
		appendDur, _ := appendTimed(b, h, n)
		want := h.l.Head().Seq
		b.StartTimer()
		start := time.Now()
		c := f.collector(b.TempDir(), []string{"h1"}, nil)
		waitStatusFor(b, c, "h1", "caught up", time.Hour, func(s collector.HostStatus) bool { return s.Head == want })
		d := time.Since(start)
		b.StopTimer()
		b.ReportMetric(d.Seconds(), "catchup-s")
		b.ReportMetric(float64(n)/d.Seconds(), "catchup-events/s")
		b.ReportMetric(float64(n)/appendDur.Seconds(), "append-events/s")
		b.ReportMetric(appendDur.Seconds()/d.Seconds(), "catchup/append")
		c.Close()
		b.StartTimer()
	}
}
