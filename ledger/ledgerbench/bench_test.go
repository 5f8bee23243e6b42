package ledgerbench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/cputime"
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
	var sum, records, cpu float64
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
		cpu += res.CPURatio()
		b.ReportMetric(float64(res.Ledger.Events)/float64(max(1, res.Ledger.Commits)), "events/commit")
		b.ReportMetric(res.Ledger.Cores(), "ledger-cores")
	}
	b.ReportMetric(sum/float64(b.N), "ratio-same")
	b.ReportMetric(cpu/float64(b.N), "cpu-ratio-same")
	b.ReportMetric(records/float64(b.N), "ratio-records")
}

// BenchmarkAppend64 compares durable Append from 64 goroutines with raw
// Pebble Sync commits of the same bytes from 64 goroutines (goal ≥ 0.7).
func BenchmarkAppend64(b *testing.B) { benchmarkRatio(b, 64, 1) }

// BenchmarkAppendBatch256 compares Append with 256 events per call with raw
// Pebble 256-value batches (goal ≥ 0.5).
func BenchmarkAppendBatch256(b *testing.B) { benchmarkRatio(b, 4, 256) }

// TestSideCPU: a side's CPU per event, cores and the CPU ratio follow from
// its readings (zero without them), and a real run reads the process's CPU
// for every side while its writers run.
func TestSideCPU(t *testing.T) {
	a := Side{Events: 1000, Elapsed: time.Second, CPU: 1500 * time.Millisecond}
	b := Side{Events: 1000, Elapsed: time.Second, CPU: 500 * time.Millisecond}
	if a.CPUPerEvent() != 1500*time.Microsecond || a.Cores() != 1.5 {
		t.Fatalf("cpu/event %v cores %v", a.CPUPerEvent(), a.Cores())
	}
	if w := (Side{Events: 1, Elapsed: time.Second, CPU: time.Second, CPUWindow: 2 * time.Second}); w.Cores() != 0.5 {
		t.Fatalf("cores over a 2 s CPU window: %v, want 0.5", w.Cores())
	}
	if got := CPURatio(a, b); got != 1.0/3 {
		t.Fatalf("cpuRatio %v, want 1/3", got)
	}
	if CPURatio(a, Side{Events: 1}) != 0 || (Side{}).CPUPerEvent() != 0 || (Side{}).Cores() != 0 || CPUCell(Side{}) != "" {
		t.Fatal("a side without readings must read zero")
	}
	if _, err := cputime.Process(); err != nil {
		t.Skip("no process CPU readings on this platform")
	}
	res, err := Run(context.Background(), Config{Dir: t.TempDir(), Concurrency: 4, Batch: 3, Events: 3000, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Side{"ledger": res.Ledger, "raw same": res.RawSame, "raw records": res.RawRecords} {
		if s.CPU <= 0 || s.Cores() <= 0 {
			t.Fatalf("%s side: no CPU read (%+v)", name, s)
		}
	}
	if res.CPURatio() <= 0 {
		t.Fatalf("cpu ratio %v", res.CPURatio())
	}
}

// TestSealChains: Seal gives seqs 1…n in draft order, each event chained to
// the one before, its stored bytes beside it; an invalid draft is an error
// naming its index.
func TestSealChains(t *testing.T) {
	drafts := []events.Draft{SampleDraft(0), SampleDraft(1), SampleDraft(2)}
	s, err := Seal(drafts)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Envelopes) != 3 || len(s.Raw) != 3 || s.MeanEventBytes() < 200 {
		t.Fatalf("%d envelopes, %d raw, mean %d bytes", len(s.Envelopes), len(s.Raw), s.MeanEventBytes())
	}
	var prev events.Hash
	for i, env := range s.Envelopes {
		if env.Seq != events.Seq(i+1) || env.Prev != prev || env.Activation != drafts[i].Activation {
			t.Fatalf("envelope %d: seq %d prev %x (want %x), activation %s", i, env.Seq, env.Prev, prev, env.Activation)
		}
		prev = env.Hash
	}
	bad := SampleDraft(3)
	bad.Activation = "not a valid id"
	if _, err := Seal(append(drafts, bad)); err == nil {
		t.Fatal("Seal took an invalid draft")
	}
}

// TestRunRawCallsAfterEachCommit: RunRaw writes every sealed event, calls
// after once per batch with ranges that cover each event exactly once, and
// measures one latency per batch; an error from after ends the side with it.
func TestRunRawCallsAfterEachCommit(t *testing.T) {
	const n, batch = 100, 7
	drafts := make([]events.Draft, n)
	for i := range drafts {
		drafts[i] = SampleDraft(i)
	}
	s, err := Seal(drafts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := make([]int, n)
	side, lat, err := RunRaw(context.Background(), t.TempDir()+"/raw", Config{Concurrency: 3, Batch: batch}, s, func(first, k int) error {
		mu.Lock()
		defer mu.Unlock()
		for i := first; i < first+k; i++ {
			seen[i]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("event %d seen by after %d times", i, c)
		}
	}
	if side.Events != n || len(lat) != (n+batch-1)/batch {
		t.Fatalf("side %+v, %d latencies", side, len(lat))
	}
	boom := errors.New("boom")
	if _, _, err := RunRaw(context.Background(), t.TempDir()+"/raw", Config{Concurrency: 2, Batch: batch}, s, func(int, int) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("after's error: %v", err)
	}
}
