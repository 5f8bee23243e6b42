//go:build linux

package gatewaybench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/guardian"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Binaries built once by TestMain: the guardian helper and the go-sdk test
// server the stdio sides run.
var (
	helperBin     = &testproc.Binary{Out: guardian.HelperName, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger-guardian"}
	testserverBin = &testproc.Binary{Out: "testserver", Pkg: StdioServerPkg}
)

// TestMain fails the run when a test leaves a goroutine or a child process
// (stdio servers, guardian helpers) behind.
func TestMain(m *testing.M) { testproc.Main(m, helperBin, testserverBin) }

// TestRunTiny runs the whole benchmark on a few calls, with the profiled
// pass: every side is measured at every level, every ratio is finite and
// positive, every profile is written and every trace read back. It
// asserts no timing.
func TestRunTiny(t *testing.T) {
	dir := t.TempDir()
	profDir := t.TempDir()
	res, err := Run(context.Background(), Config{Calls: 3, PhaseTime: time.Nanosecond, Sessions: []int{2, 3}, Rounds: 2, Dir: dir,
		HelperPath: helperBin.Out, StdioServer: testserverBin.Out,
		Profile: ProfileConfig{Dir: profDir, Calls: 4, Sides: []string{GatewayHTTP, GatewayStdio}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fsync.N != 6 || res.Fsync.P50 <= 0 {
		t.Errorf("fsync floor: %+v", res.Fsync)
	}
	if res.FsyncWritten.N != 6 || res.FsyncWritten.P50 <= 0 {
		t.Errorf("fsync floor on written blocks: %+v", res.FsyncWritten)
	}
	if res.PebbleCommit.N != 6 || res.PebbleCommit.P50 <= 0 {
		t.Errorf("raw Pebble floor: %+v", res.PebbleCommit)
	}
	if len(res.Sides) != len(SideNames) {
		t.Fatalf("%d sides, want %d", len(res.Sides), len(SideNames))
	}
	for i, s := range res.Sides {
		if s.Name != SideNames[i] {
			t.Errorf("side %d is %q, want %q", i, s.Name, SideNames[i])
		}
		if s.Sequential.N != 6 || s.Sequential.P50 <= 0 || len(s.Phases) != 3 {
			t.Errorf("%s: sequential %+v, %d phases", s.Name, s.Sequential, len(s.Phases))
		}
		for j, n := range []int{2, 3} {
			p, ok := s.Throughput(n)
			// Each session makes its least calls: the phase time has
			// passed by then.
			if !ok || p.Calls != 2*n*minCallsPerSession || p.Rate() <= 0 || s.Phases[1+j].Sessions != n {
				t.Errorf("%s at %d sessions: %+v", s.Name, n, p)
			}
		}
		gw := s.Name == GatewayHTTP || s.Name == GatewayStdio
		if s.Gateway != gw {
			t.Errorf("%s: Gateway %v", s.Name, s.Gateway)
		}
		if gw && (s.Phases[0].EventsPerCall() < 1 || s.Phases[0].CommitsPerCall() <= 0 || s.Phases[0].MeanCommit() <= 0) {
			t.Errorf("%s: %.2f ledger events and %.2f commits per call: the calls were not recorded", s.Name, s.Phases[0].EventsPerCall(), s.Phases[0].CommitsPerCall())
		}
	}
	// Per transport: the latency ratio and its context (against the fsync
	// floor on written blocks, the ledger's commit against the fsync and
	// raw Pebble floors among it), then per level.
	if want := 2 * (7 + 2*2); len(res.Ratios) != want-1 {
		t.Errorf("%d ratios, want %d", len(res.Ratios), want-1)
	}
	for _, q := range res.Ratios {
		if math.IsNaN(q.Value) || math.IsInf(q.Value, 0) || q.Value <= 0 {
			t.Errorf("ratio %q = %v", q.Name, q.Value)
		}
	}
	if len(res.Profiles) != 4 {
		t.Fatalf("%d profiled phases, want 4", len(res.Profiles))
	}
	for _, p := range res.Profiles {
		if (p.Sessions == 1) != (p.Path != nil) {
			t.Errorf("%s at %d sessions: critical path %v", p.Side, p.Sessions, p.Path)
		}
		if p.Path != nil {
			// Every traced call shows its total, the ledger's stages (both
			// profiled sides are gateways), what follows the ack and the
			// upstream hop: an HTTP request, or a JSON-RPC call to the
			// stdio server.
			want := []string{stageTotal, stageRequestIn, stageSeal, stageWALWait, stageFsync,
				stageAck, stageAckToSend, stageUpstream, stageResponseOut}
			for _, name := range want {
				i := slices.IndexFunc(p.Path.Stages, func(s Stage) bool { return s.Name == name })
				if i < 0 || p.Path.Stages[i].N < 1 || p.Path.Stages[i].P50 < 0 {
					t.Errorf("%s: no stage %q in %+v", p.Side, name, p.Path)
				}
			}
			if p.Path.Calls < p.Calls {
				t.Errorf("%s: %d calls traced, want at least the phase's %d", p.Side, p.Path.Calls, p.Calls)
			}
		}
		// The traced run's goroutines ran, their shares add up to the
		// whole, and the ledger's committer (both profiled sides are
		// gateways) is among them.
		if p.Cores == nil || p.Cores.PerCall <= 0 || p.Cores.share("ledger.(*Ledger).committer") <= 0 {
			t.Errorf("%s at %d sessions: cores %+v", p.Side, p.Sessions, p.Cores)
		} else {
			sum := 0.0
			for _, s := range p.Cores.Shares {
				sum += s.PerCall
			}
			if math.Abs(sum-p.Cores.PerCall) > 1e-6*p.Cores.PerCall {
				t.Errorf("%s at %d sessions: shares add up to %v, not %v", p.Side, p.Sessions, sum, p.Cores.PerCall)
			}
		}
		for _, f := range []string{p.CPU, p.Block, p.BlockBase, p.Mutex, p.MutexBase, p.Trace, p.Allocs, p.AllocsBase} {
			if st, err := os.Stat(f); err != nil || st.Size() == 0 {
				t.Errorf("profile %s: %v", f, err)
			}
		}
	}
	out := res.String()
	for _, name := range append(SideNames, "fsync floor", "fsync floor on written blocks", "raw Pebble floor", "gateway p50 / (proxy p50 + fsync p50)", "fsync on written blocks p50", "raw Pebble commit p50", "ledger mean commit", "calls/s at 3 sessions", "critical path of a sequential call", "time on a core per call under load") {
		if !strings.Contains(out, name) {
			t.Errorf("the table has no %q:\n%s", name, out)
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Error(err)
	}
	t.Log("\n" + out)
}

// TestConfigRefused: a config missing what a run needs is refused before
// anything starts.
func TestConfigRefused(t *testing.T) {
	base := Config{Calls: 1, Rounds: 1, Dir: t.TempDir(), HelperPath: "h", StdioServer: "s"}
	for name, mut := range map[string]func(*Config){
		"calls":        func(c *Config) { c.Calls = 0 },
		"rounds":       func(c *Config) { c.Rounds = 0 },
		"sessions":     func(c *Config) { c.Sessions = []int{16, 0} },
		"helper":       func(c *Config) { c.HelperPath = "" },
		"server":       func(c *Config) { c.StdioServer = "" },
		"profile side": func(c *Config) { c.Profile = ProfileConfig{Dir: t.TempDir(), Sides: []string{"nope"}} },
	} {
		c := base
		mut(&c)
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
