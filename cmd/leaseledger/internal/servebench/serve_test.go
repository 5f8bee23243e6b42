package servebench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/cputime"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgerbench"
	"github.com/leaseledger/leaseledger/projector/live"
)

// TestRunServeSmall runs the serve path on a tiny workload: every side
// writes every event, the subscribers (the bus's and the bare NATS side's)
// receive them all, the side with snapshots stored one and the side
// without none, and latencies and CPU are read.
func TestRunServeSmall(t *testing.T) {
	res, err := RunServe(context.Background(), Config{Config: ledgerbench.Config{Dir: t.TempDir(), Concurrency: 4, Batch: 2, Events: 400, Rounds: 1}, SnapshotEvery: 50})
	if err != nil {
		t.Fatal(err)
	}
	if res.Serve.Events != 400 || res.Snapshots.Events != 400 || res.Raw.Events != 400 ||
		res.Serve.Delivered != 400 || res.Snapshots.Delivered != 400 ||
		res.Snapshots.Snapshots != 1 || res.Serve.Snapshots != 0 ||
		res.Ratio() <= 0 || res.P99Ratio() <= 0 || res.Serve.Latency.P50 <= 0 || res.RawLat.P99 <= 0 {
		t.Fatalf("result %+v", res)
	}
	if res.RawBus.Events != 400 || res.RawBus.Delivered != 400 || res.BusFloorRatio() <= 0 || res.RawBusLat.P50 <= 0 {
		t.Fatalf("raw + bare NATS side %+v (latency %+v)", res.RawBus, res.RawBusLat)
	}
	if _, err := cputime.Process(); err == nil && (res.Serve.CPU <= 0 || res.Snapshots.CPU <= 0 || res.Raw.CPU <= 0 || res.CPURatio() <= 0) {
		t.Fatalf("CPU not read on every side: %+v", res)
	}
}

// TestWriterStreams: the workload splits exactly n events among the
// writers, each activation's lifecycle whole and in order within one
// writer, every draft valid.
func TestWriterStreams(t *testing.T) {
	const n, writers = 1000, 7
	streams := writerStreams(n, writers)
	total := 0
	owner := map[string]int{}
	for w, s := range streams {
		total += len(s)
		for _, d := range s {
			if _, err := events.Prepare(d); err != nil {
				t.Fatal(err)
			}
			if o, ok := owner[d.Activation]; ok && o != w {
				t.Fatalf("activation %s written by writers %d and %d", d.Activation, o, w)
			}
			owner[d.Activation] = w
		}
	}
	if total != n {
		t.Fatalf("%d events, want %d", total, n)
	}
	if lc := gatewayLifecycle("a", "s", 1); len(lc) != activationEvents {
		t.Fatalf("lifecycle of %d events, want activationEvents=%d", len(lc), activationEvents)
	}
}

func benchmarkServe(b *testing.B, concurrency, batch int) {
	var sum, p99, cpu, floor float64
	for b.Loop() {
		res, err := RunServe(context.Background(), Config{Config: ledgerbench.Config{Dir: b.TempDir(), Concurrency: concurrency, Batch: batch, Events: 50000, Rounds: 1}, SnapshotEvery: 50000 / 8})
		if err != nil {
			b.Fatal(err)
		}
		sum += res.Ratio()
		p99 += res.P99Ratio()
		cpu += res.CPURatio()
		floor += res.BusFloorRatio()
		b.ReportMetric(res.Serve.Rate(), "serve-events/s")
		b.ReportMetric(res.Raw.Rate(), "raw-same-events/s")
		b.ReportMetric(res.Serve.Cores(), "serve-cores")
		b.ReportMetric(float64(res.Serve.CPUPerEvent().Nanoseconds()), "serve-cpu-ns/event")
		b.ReportMetric(float64(res.Raw.CPUPerEvent().Nanoseconds()), "raw-cpu-ns/event")
	}
	b.ReportMetric(sum/float64(b.N), "ratio-same")
	b.ReportMetric(cpu/float64(b.N), "cpu-ratio-same")
	b.ReportMetric(floor/float64(b.N), "ratio-raw-bus")
	b.ReportMetric(p99/float64(b.N), "p99-snapshot-ratio")
}

// BenchmarkServe64 compares the full serve path (projection, bus, a
// tailing subscriber) from 64 writers of one event per call with raw Pebble
// Sync commits of the same bytes (goal ≥ 0.7), and reports the ack p99 with
// snapshots running over the p99 without (goal ≤ 2).
func BenchmarkServe64(b *testing.B) { benchmarkServe(b, 64, 1) }

// BenchmarkServeBatch256 is BenchmarkServe64 with 256 events per call
// (goal ≥ 0.6).
func BenchmarkServeBatch256(b *testing.B) { benchmarkServe(b, 64, 256) }

// TestLatencyPercentiles: p50 and p99 are read at their ranks of the sorted
// durations, whatever their order, and an empty set reads zero.
func TestLatencyPercentiles(t *testing.T) {
	ds := make([]time.Duration, 0, 200)
	for i := 200; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := latency(ds)
	if got.P50 != 101*time.Millisecond || got.P99 != 199*time.Millisecond || got.Max != 200*time.Millisecond {
		t.Fatalf("%+v", got)
	}
	if (latency(nil) != Latency{}) {
		t.Fatal("empty set")
	}
	if (ServeResult{}).P99Ratio() != 0 {
		t.Fatal("P99Ratio without a measurement")
	}
}

// TestGrow: Grow writes exactly the events asked for, each activation's
// lifecycle in order from its first event, a session's activations one
// after the other (single-flight: a lease key never has two live
// activations), leaves a snapshot covering its head, and refuses a ledger
// that already holds events.
func TestGrow(t *testing.T) {
	dir := t.TempDir()
	const n = 8000 // 125 activations: more than the 97 sessions of writerStreams
	h, err := Grow(context.Background(), GrowConfig{Dir: dir, Events: n, Concurrency: 4, Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != n {
		t.Fatalf("head %d, want %d", h.Seq, n)
	}
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}       // activation → index of its next lifecycle event
	current := map[string]string{} // session → its activation under way
	for env, err := range l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		i := next[env.Activation]
		want := gatewayLifecycle(env.Activation, "", 0)[i].Payload.Kind()
		if env.Kind != want {
			t.Fatalf("seq %d: %s event %d is %s, want %s", env.Seq, env.Activation, i, env.Kind, want)
		}
		next[env.Activation] = i + 1
		if prev := current[env.Session]; prev != env.Activation {
			if prev != "" && next[prev] != activationEvents {
				t.Fatalf("seq %d: session %s starts %s while %s is at event %d", env.Seq, env.Session, env.Activation, prev, next[prev])
			}
			current[env.Session] = env.Activation
		}
	}
	if want := (n + activationEvents - 1) / activationEvents; len(next) < want {
		t.Fatalf("%d activations, want at least %d", len(next), want)
	}
	seq, _, err := l.LoadSnapshot(live.DefaultSnapshotName)
	if err != nil || seq != n {
		t.Fatalf("snapshot at %d (%v), want %d", seq, err, n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Grow(context.Background(), GrowConfig{Dir: dir, Events: 10, Concurrency: 1, Batch: 1}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("second Grow: %v, want ErrNotEmpty", err)
	}
}
