package ledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/cputime"
)

// overlapSide is one ledger of BenchmarkCommitOverlap and its totals.
type overlapSide struct {
	l                     *Ledger
	fs                    *walGateFS
	elapsed, cpu          time.Duration
	calls, commits, syncs int64
	lat                   []time.Duration
}

// phase has writers append calls one-event calls between them, each waiting
// for its ack, and adds what it took to the side's totals.
func (s *overlapSide) phase(b *testing.B, writers, calls int) {
	ctx := context.Background()
	c0, s0 := s.l.Stats().Commits, s.fs.syncs.Load()
	cpu0, err := cputime.Process()
	if err != nil {
		b.Skip("no process CPU readings here")
	}
	lats := make([][]time.Duration, writers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range calls / writers {
				t := time.Now()
				if _, err := s.l.Append(ctx, pipeDraft(w*calls+i)); err != nil {
					b.Error(err)
					return
				}
				lats[w] = append(lats[w], time.Since(t))
			}
		})
	}
	wg.Wait()
	s.elapsed += time.Since(start)
	cpu1, _ := cputime.Process()
	s.cpu += cpu1 - cpu0
	s.calls += int64(calls / writers * writers)
	s.commits += int64(s.l.Stats().Commits - c0)
	s.syncs += s.fs.syncs.Load() - s0
	for _, l := range lats {
		s.lat = append(s.lat, l...)
	}
}

func (s *overlapSide) p50() time.Duration {
	slices.Sort(s.lat)
	return s.lat[len(s.lat)/2]
}

// BenchmarkCommitOverlap compares the overlapped pipeline (inflightBatches
// batches past the committer: batch N+1 applied while N's fsync runs)
// against classic group commit (one: the next batch applied only once the
// previous fsync is observed), two ledgers on the same disk in one run,
// their phases alternating, with 16 and 64 writers of one-event calls each
// waiting for its ack. It reports overlapped over classic: calls per
// second (throughput-ratio), ack p50 (p50-ratio), process CPU per call
// (cpu-ratio); and each side's events per commit and per WAL fsync.
//
// busy=2 runs two goroutines beside the writers that keep both cores of a
// two-core machine busy in short slices (yielding every few microseconds),
// as the other goroutines of a loaded serve do: each hand-off between the
// pipeline's goroutines then waits its turn for a core.
func BenchmarkCommitOverlap(b *testing.B) {
	for _, c := range []struct{ writers, busy int }{{16, 0}, {64, 0}, {16, 2}, {64, 2}} {
		writers := c.writers
		b.Run(fmt.Sprintf("writers=%d/busy=%d", writers, c.busy), func(b *testing.B) {
			stop := make(chan struct{})
			var spin sync.WaitGroup
			for range c.busy {
				spin.Go(func() { burn(stop) })
			}
			defer spin.Wait()
			defer close(stop)
			var sides [2]*overlapSide
			for i, inflight := range []int{1, inflightBatches} {
				opts, fs := gatedOptions(b.TempDir())
				opts.inflight = inflight
				l, err := Open(opts)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				sides[i] = &overlapSide{l: l, fs: fs}
			}
			const calls = 4096
			round := 0
			for b.Loop() {
				for k := range 2 {
					sides[(round+k)%2].phase(b, writers, calls)
				}
				round++
			}
			classic, over := sides[0], sides[1]
			rate := func(s *overlapSide) float64 { return float64(s.calls) / s.elapsed.Seconds() }
			cpu := func(s *overlapSide) float64 { return float64(s.cpu) / float64(s.calls) }
			b.ReportMetric(rate(over)/rate(classic), "throughput-ratio")
			b.ReportMetric(float64(over.p50())/float64(classic.p50()), "p50-ratio")
			b.ReportMetric(cpu(over)/cpu(classic), "cpu-ratio")
			b.ReportMetric(float64(classic.calls)/float64(classic.commits), "classic-events/commit")
			b.ReportMetric(float64(over.calls)/float64(over.commits), "overlap-events/commit")
			b.ReportMetric(float64(classic.calls)/float64(classic.syncs), "classic-events/fsync")
			b.ReportMetric(float64(over.calls)/float64(over.syncs), "overlap-events/fsync")
			b.ReportMetric(rate(classic), "classic-calls/s")
		})
	}
}

// burn spends CPU in short slices until stop is closed, yielding between
// them.
func burn(stop <-chan struct{}) {
	var x [32]byte
	for {
		select {
		case <-stop:
			return
		default:
		}
		for range 64 {
			x = sha256.Sum256(x[:])
		}
		runtime.Gosched()
	}
}
