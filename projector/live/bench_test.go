package live_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/internal/cputime"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// BenchmarkReplayVsPebble builds a log of LEASELEDGER_BENCH_EVENTS events
// (default 1,000,000; the workload of eventgen: leases, calls, confirmed
// HTTP requests, guardian receipts, closes) once, then in each iteration
// times, over the same log in the same run:
//
//   - raw: a Pebble forward iteration over the e/ keys, touching every value
//     (the directory opened read-only by Pebble itself: the ledger does not
//     hand out its database);
//   - projector: a full replay as live.Open replays a tail —
//     ledger.ScanAhead (the same iteration, run on a goroutine of its own
//     and copying each event into chunks) feeding every stored event to
//     State.ApplyRaw on this goroutine — into a fresh state.
//
// Opening and closing are outside the timings.
//
// It reports both rates and their ratio (goal ≥ 0.5), two CPU ratios (raw
// over projector, steadier on a loaded machine than ratio) and how many
// threads the replay kept busy:
//
//   - cpu_ratio: from the CPU time of this goroutine's thread, which runs
//     the whole raw pass but only the applying half of the projector pass
//     (ScanAhead's reader runs on another thread): it measures the
//     applying thread alone, not the replay's cost, and leaves out the
//     garbage collector's background work;
//   - proc_cpu_ratio: from the whole process's CPU time (getrusage
//     RUSAGE_SELF) around each pass: both of the replay's threads and the
//     garbage collector, the replay's full CPU cost;
//   - proj_cpu_per_wall: the replay pass's process CPU time over its
//     wall-clock time, how many threads ran at once on average (above 1
//     only when the machine had a core to spare for the reader).
//
// Run it with:
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
	appendAll(b, l, eventgen.Workload(n, max(n/2000, 1)))
	events := uint64(l.Head().Seq)
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var rawDur, projDur, rawCPU, projCPU, rawProc, projProc time.Duration
	// Both passes run on this goroutine (the projector pass's reader
	// aside); locked to one thread, that thread's CPU time measures its
	// share of each pass without the time a loaded machine keeps it
	// waiting (wall-clock ratios swing with other load).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, FormatMajorVersion: pebble.FormatNewest, Logger: quiet{}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start, cpu, pcpu := time.Now(), threadCPU(b), processCPU(b)
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("e/"), UpperBound: []byte("e0")})
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
		rawCPU += threadCPU(b) - cpu
		rawProc += processCPU(b) - pcpu
		b.StopTimer()
		db.Close()
		if count != events {
			b.Fatalf("raw iteration saw %d of %d events", count, events)
		}
		l, err := ledger.Open(ledger.Options{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start, cpu, pcpu = time.Now(), threadCPU(b), processCPU(b)
		s := projector.New()
		if err := l.ScanAhead(ctx, ledger.Query{}, func(_ ledger.Seq, raw []byte) error { return s.ApplyRaw(raw) }); err != nil {
			b.Fatal(err)
		}
		projDur += time.Since(start)
		projCPU += threadCPU(b) - cpu
		projProc += processCPU(b) - pcpu
		b.StopTimer()
		l.Close()
		b.StartTimer()
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
	b.ReportMetric(rawCPU.Seconds()/projCPU.Seconds(), "cpu_ratio")
	b.ReportMetric(rawProc.Seconds()/projProc.Seconds(), "proc_cpu_ratio")
	b.ReportMetric(projProc.Seconds()/projDur.Seconds(), "proj_cpu_per_wall")
}

// threadCPU is the CPU time (user and system) of the calling thread.
func threadCPU(b *testing.B) time.Duration {
	d, err := cputime.Thread()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// processCPU is the CPU time (user and system) of the whole process.
func processCPU(b *testing.B) time.Duration {
	d, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// quiet keeps Pebble's informational logs out of benchmark output.
type quiet struct{}

func (quiet) Infof(string, ...any)           {}
func (quiet) Errorf(string, ...any)          {}
func (quiet) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
