package startupbench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// exeBin is the leaseledger executable, built once by TestMain: both sides
// are it, started again.
var exeBin = &testproc.Binary{Out: "leaseledger", Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger"}

// TestMain fails the run when a test leaves a goroutine or a child process
// (a serve or a floor) behind.
func TestMain(m *testing.M) { testproc.Main(m, exeBin) }

// TestRunTiny grows two tiny ledgers and measures one round: every side is
// measured on every ledger, serve started from the final snapshot the
// grower left, every ratio is finite and positive, and a second run with
// the same --keep directory reuses the ledgers. It asserts no timing.
func TestRunTiny(t *testing.T) {
	keep := t.TempDir()
	cfg := Config{Exe: exeBin.Out, Sizes: []int{3000, 2000}, Keep: keep, Rounds: 1, Warmup: -1, GrowConcurrency: 4, GrowBatch: 16}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sizes) != 2 || res.Sizes[0].Events != 2000 || res.Sizes[1].Events != 3000 {
		t.Fatalf("sizes %+v, want 2000 then 3000", res.Sizes)
	}
	for _, s := range res.Sizes {
		if s.Dir != filepath.Join(keep, "events-"+strconv.Itoa(s.Events)) || s.Bytes <= 0 {
			t.Errorf("%d events: dir %s, %d bytes", s.Events, s.Dir, s.Bytes)
		}
		for name, sd := range map[string]Side{"serve": s.Serve, "floor": s.Floor} {
			if len(sd.Ready) != 1 || sd.ReadyP50() <= 0 || len(sd.PeakRSS) != 1 || sd.RSSP50() <= 0 {
				t.Errorf("%d events, %s: %+v", s.Events, name, sd)
			}
		}
		// Grow closes its projection with a final snapshot: serve
		// starts from it and replays nothing.
		if s.SnapshotSeq != uint64(s.Events) || s.Replayed != 0 {
			t.Errorf("%d events: serve started from the snapshot at %d and replayed %d", s.Events, s.SnapshotSeq, s.Replayed)
		}
	}
	if got := len(res.Ratios()); got != 2+3 {
		t.Errorf("%d ratios, want 5", got)
	}
	for _, q := range res.Ratios() {
		if math.IsNaN(q.Value) || math.IsInf(q.Value, 0) || q.Value <= 0 {
			t.Errorf("ratio %q = %v", q.Name, q.Value)
		}
	}
	out := res.String()
	for _, want := range []string{"serve / floor at 2000 events", "serve / floor at 3000 events", "serve start-up, 3000 / 2000 events", "serve peak RSS"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table has no %q:\n%s", want, out)
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Error(err)
	}
	t.Log("\n" + out)

	// The kept ledgers are reused as they are, not grown again; compacted
	// on request.
	var log strings.Builder
	cfg.Sizes, cfg.Log, cfg.Compact = []int{2000}, &log, true
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "reusing") || strings.Contains(log.String(), "growing") || !strings.Contains(log.String(), "compacted") {
		t.Errorf("second run's log:\n%s", log.String())
	}
}

// TestKeptLedgerOfAnotherSize: a kept directory whose ledger does not hold
// exactly the requested events (an interrupted grow) is refused, not
// measured.
func TestKeptLedgerOfAnotherSize(t *testing.T) {
	keep := t.TempDir()
	if _, err := Run(context.Background(), Config{Exe: exeBin.Out, Sizes: []int{500}, Keep: keep, Rounds: 1, Warmup: -1, GrowConcurrency: 2, GrowBatch: 16}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(keep, "events-500"), filepath.Join(keep, "events-600")); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Config{Exe: exeBin.Out, Sizes: []int{600}, Keep: keep, Rounds: 1, Warmup: -1})
	if err == nil || !strings.Contains(err.Error(), "holds 500 events, not 600") {
		t.Fatalf("err = %v, want the size mismatch", err)
	}
}

// TestFloorRefusesMissingDir: the floor never creates a database where
// there was none (it would measure an empty open).
func TestFloorRefusesMissingDir(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out strings.Builder
	if err := Floor(ctx, filepath.Join(t.TempDir(), "none"), &out); err == nil {
		t.Fatal("Floor opened a missing directory")
	}
	if out.Len() != 0 {
		t.Errorf("Floor printed %q", out.String())
	}
}

// TestConfigRefused: a config missing what a run needs is refused before
// anything is grown or started.
func TestConfigRefused(t *testing.T) {
	for name, c := range map[string]Config{
		"exe":    {Sizes: []int{10}},
		"sizes":  {Exe: "x"},
		"size":   {Exe: "x", Sizes: []int{10, 0}},
		"rounds": {Exe: "x", Sizes: []int{10}, Rounds: -1},
	} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
