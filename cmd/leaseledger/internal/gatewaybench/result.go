package gatewaybench

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// The figures of a run: latency distributions, phases, sides, the
// issue's ratios and the printed table.

// Latency is a distribution of call (or fsync) latencies.
type Latency struct {
	N    int           `json:"n"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	Mean time.Duration `json:"mean_ns"`
}

// latencyOf sorts ds (in place) and reads its percentiles.
func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{N: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99), Mean: sum / time.Duration(len(ds))}
}

// Phase is one load on one side, summed over the rounds.
type Phase struct {
	// Sessions is the concurrency: 1 for the sequential phase.
	Sessions int           `json:"sessions"`
	Calls    int           `json:"calls"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// CPU is this process's CPU time over the phase (the in-process
	// clients, proxies, gateway stack and HTTP upstream; not the stdio
	// servers or guardian helpers, which are other processes).
	CPU time.Duration `json:"cpu_ns"`
	// Events and Commits are what the ledger appended and committed
	// (each commit one fsync) over the phase (gateway sides), CommitTime
	// the ledger's summed commit time (apply to fsync observed).
	Events     uint64        `json:"ledger_events,omitempty"`
	Commits    uint64        `json:"ledger_commits,omitempty"`
	CommitTime time.Duration `json:"ledger_commit_ns,omitempty"`
	// FrontConns are the TCP connections the side's clients opened to
	// the endpoint they call (upstream, proxy or gateway), UpstreamConns
	// those the HTTP upstream accepted (HTTP sides), over the phase:
	// with keep-alive working both stay near 0 once sessions are open.
	FrontConns    int64 `json:"front_conns"`
	UpstreamConns int64 `json:"upstream_conns"`
}

func (p *Phase) add(o Phase) {
	p.Calls += o.Calls
	p.Elapsed += o.Elapsed
	p.CPU += o.CPU
	p.Events += o.Events
	p.Commits += o.Commits
	p.CommitTime += o.CommitTime
	p.FrontConns += o.FrontConns
	p.UpstreamConns += o.UpstreamConns
}

// Rate is calls per second.
func (p Phase) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Calls) / p.Elapsed.Seconds()
}

// CPUPerCall is this process's CPU per call.
func (p Phase) CPUPerCall() time.Duration { return p.CPU / time.Duration(max(p.Calls, 1)) }

// EventsPerCall and CommitsPerCall are the ledger's events and commits
// (Pebble batches; the batches applied during one fsync share the next)
// per call.
func (p Phase) EventsPerCall() float64  { return float64(p.Events) / float64(max(p.Calls, 1)) }
func (p Phase) CommitsPerCall() float64 { return float64(p.Commits) / float64(max(p.Calls, 1)) }

// MeanCommit is the ledger's mean commit time, apply to fsync observed:
// against the fsync floor's mean it is what the ledger's commit adds to
// the disk's own durable write (hand-offs between its stages and Pebble's
// WAL writer, waits behind other commits, the wake-ups on a busy machine).
func (p Phase) MeanCommit() time.Duration { return p.CommitTime / time.Duration(max(p.Commits, 1)) }

// Side is one side's figures.
type Side struct {
	Name string `json:"name"`
	// Sequential is the latency of the sequential phase's calls.
	Sequential Latency `json:"sequential"`
	// Phases are the sequential phase, then one per Config.Sessions level.
	Phases []Phase `json:"phases"`
	// Gateway reports a gateway side (its ledger figures are meaningful).
	Gateway bool `json:"gateway"`
}

// Throughput returns the phase of the given concurrency.
func (s Side) Throughput(sessions int) (Phase, bool) {
	for _, p := range s.Phases[1:] {
		if p.Sessions == sessions {
			return p, true
		}
	}
	return Phase{}, false
}

// Ratio is one of the ratios.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Goal is "<= x" or ">= x", empty for a ratio given as context.
	Goal string `json:"goal,omitempty"`
	Met  bool   `json:"met"`
}

// Result is a finished Run.
type Result struct {
	Config Config `json:"config"`
	// Fsync is the raw fsync floor: 4 KiB write + fdatasync on a growing
	// file in Config.Dir.
	Fsync Latency `json:"fsync"`
	// FsyncWritten is the fsync floor over written blocks: 4 KiB
	// overwrite + fdatasync in a file written and synced before, whose
	// size does not change (writtenFsyncFloor).
	FsyncWritten Latency `json:"fsync_written"`
	// PebbleCommit is the raw Pebble floor: sequential Sync commits of
	// six events' keys and values as the ledger writes them, in a fresh
	// Pebble in Config.Dir.
	PebbleCommit Latency `json:"pebble_commit"`
	Sides        []Side  `json:"sides"`
	Ratios       []Ratio `json:"ratios"`
	// Profiles lists the profiled phases (Config.Profile).
	Profiles []Profiled `json:"profiles,omitempty"`
}

// Side returns the named side.
func (r Result) Side(name string) (Side, bool) {
	for _, s := range r.Sides {
		if s.Name == name {
			return s, true
		}
	}
	return Side{}, false
}

// ratios computes the ratios from r's sides.
func (r Result) ratios() []Ratio {
	get := func(n string) Side { s, _ := r.Side(n); return s }
	ms := func(d time.Duration) float64 { return float64(d) }
	var out []Ratio
	le := func(name string, v, goal float64) {
		out = append(out, Ratio{Name: name, Value: v, Goal: fmt.Sprintf("<= %.2f", goal), Met: v <= goal})
	}
	ge := func(name string, v, goal float64) {
		out = append(out, Ratio{Name: name, Value: v, Goal: fmt.Sprintf(">= %.2f", goal), Met: v >= goal})
	}
	info := func(name string, v float64) { out = append(out, Ratio{Name: name, Value: v}) }
	div := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	f := ms(r.Fsync.P50)
	for _, t := range []struct{ label, direct, proxy, floor, gw string }{
		{"http", DirectHTTP, ProxyHTTP, ProxyHTTP, GatewayHTTP},
		{"stdio", DirectStdio, ProxyStdio, ProxyGuardian, GatewayStdio},
	} {
		gw, floor, proxy, direct := get(t.gw), get(t.floor), get(t.proxy), get(t.direct)
		what := "proxy"
		if t.floor != t.proxy {
			what = "proxy through the guardian"
		}
		le(fmt.Sprintf("%s: gateway p50 / (%s p50 + fsync p50)", t.label, what), div(ms(gw.Sequential.P50), ms(floor.Sequential.P50)+f), LatencyGoal)
		info(fmt.Sprintf("%s: gateway p50 / (%s p50 + fsync on written blocks p50)", t.label, what), div(ms(gw.Sequential.P50), ms(floor.Sequential.P50)+ms(r.FsyncWritten.P50)))
		info(fmt.Sprintf("%s: gateway p50 / (%s p50 + raw Pebble commit p50)", t.label, what), div(ms(gw.Sequential.P50), ms(floor.Sequential.P50)+ms(r.PebbleCommit.P50)))
		info(fmt.Sprintf("%s: gateway p50 / %s p50", t.label, what), div(ms(gw.Sequential.P50), ms(floor.Sequential.P50)))
		if t.floor != t.proxy {
			info(t.label+": proxy through the guardian p50 / proxy p50", div(ms(floor.Sequential.P50), ms(proxy.Sequential.P50)))
		}
		info(t.label+": proxy p50 / direct p50", div(ms(proxy.Sequential.P50), ms(direct.Sequential.P50)))
		info(fmt.Sprintf("%s: ledger mean commit (apply to fsync observed), sequential / fsync mean", t.label), div(ms(gw.Phases[0].MeanCommit()), ms(r.Fsync.Mean)))
		info(fmt.Sprintf("%s: ledger mean commit, sequential / raw Pebble commit mean", t.label), div(ms(gw.Phases[0].MeanCommit()), ms(r.PebbleCommit.Mean)))
		for _, n := range r.Config.Sessions {
			g, _ := gw.Throughput(n)
			p, _ := proxy.Throughput(n)
			ge(fmt.Sprintf("%s: gateway / proxy calls/s at %d sessions", t.label, n), div(g.Rate(), p.Rate()), ThroughputGoal)
			if t.floor != t.proxy {
				fl, _ := floor.Throughput(n)
				info(fmt.Sprintf("%s: gateway / proxy through the guardian calls/s at %d sessions", t.label, n), div(g.Rate(), fl.Rate()))
			}
		}
	}
	return out
}

// String prints r as a table.
func (r Result) String() string {
	var b []byte
	pf := func(format string, a ...any) { b = fmt.Appendf(b, format, a...) }
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	levels := ""
	for i, n := range r.Config.Sessions {
		if i > 0 {
			levels += ","
		}
		levels += fmt.Sprint(n)
	}
	pf("bench gateway: %d sequential calls per side per round, throughput at %s sessions, %d rounds, MCP %s\n",
		r.Config.Calls, levels, r.Config.Rounds, ProtocolVersion)
	pf("fsync floor (4 KiB write + fdatasync, growing file, ledger's disk): p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  mean %.3f ms  (n=%d)\n\n",
		ms(r.Fsync.P50), ms(r.Fsync.P90), ms(r.Fsync.P99), ms(r.Fsync.Mean), r.Fsync.N)
	pf("fsync floor on written blocks (4 KiB overwrite + fdatasync, file written before): p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  mean %.3f ms  (n=%d)\n\n",
		ms(r.FsyncWritten.P50), ms(r.FsyncWritten.P90), ms(r.FsyncWritten.P99), ms(r.FsyncWritten.Mean), r.FsyncWritten.N)
	pf("raw Pebble floor (Sync commits of %d events' keys as the ledger writes them, one at a time): p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  mean %.3f ms  (n=%d)\n\n",
		pebbleCommitEvents, ms(r.PebbleCommit.P50), ms(r.PebbleCommit.P90), ms(r.PebbleCommit.P99), ms(r.PebbleCommit.Mean), r.PebbleCommit.N)
	pf("%-22s %9s %9s %9s %10s", "side", "p50 ms", "p90 ms", "p99 ms", "cpu µs/call")
	for _, n := range r.Config.Sessions {
		pf(" %12s", fmt.Sprintf("calls/s@%d", n))
	}
	pf("  ledger: events/call, commits/call seq")
	for _, n := range r.Config.Sessions {
		pf(",@%d", n)
	}
	pf("\n")
	for _, s := range r.Sides {
		pf("%-22s %9.3f %9.3f %9.3f %10.0f", s.Name, ms(s.Sequential.P50), ms(s.Sequential.P90), ms(s.Sequential.P99), float64(s.Phases[0].CPUPerCall())/1e3)
		for _, p := range s.Phases[1:] {
			pf(" %12.0f", p.Rate())
		}
		if s.Gateway {
			pf("  %.2f", s.Phases[0].EventsPerCall())
			for i, p := range s.Phases {
				sep := ", "
				if i > 0 {
					sep = "/"
				}
				pf("%s%.2f", sep, p.CommitsPerCall())
			}
		}
		pf("\n")
	}
	pf("\nledger mean commit ms (apply to fsync observed): sequential")
	for _, n := range r.Config.Sessions {
		pf(", @%d", n)
	}
	pf("\n")
	for _, s := range r.Sides {
		if !s.Gateway {
			continue
		}
		pf("%-22s", s.Name)
		for _, p := range s.Phases {
			pf(" %8.3f", ms(p.MeanCommit()))
		}
		pf("\n")
	}
	pf("\nnew TCP connections per 100 calls, to the endpoint called / to the HTTP upstream: sequential")
	for _, n := range r.Config.Sessions {
		pf(", @%d", n)
	}
	pf("\n")
	for _, s := range r.Sides {
		pf("%-22s", s.Name)
		for _, p := range s.Phases {
			pf(" %6.1f / %-6.1f", 100*float64(p.FrontConns)/float64(max(p.Calls, 1)), 100*float64(p.UpstreamConns)/float64(max(p.Calls, 1)))
		}
		pf("\n")
	}
	pf("\nratios (goal):\n")
	for _, q := range r.Ratios {
		verdict := ""
		if q.Goal != "" {
			verdict = "  goal " + q.Goal
			if q.Met {
				verdict += "  met"
			} else {
				verdict += "  not met"
			}
		}
		pf("  %-72s %7.3f%s\n", q.Name, q.Value, verdict)
	}
	r.printPaths(pf)
	r.printCores(pf)
	for _, p := range r.Profiles {
		pf("profiled %s at %d session(s): %d calls, %.0f calls/s; go tool pprof -top %s", p.Side, p.Sessions, p.Calls, p.Rate, p.CPU)
		pf("; blocking: go tool pprof -top -diff_base %s %s; allocations: go tool pprof -top -sample_index=alloc_space -diff_base %s %s; scheduling: go tool trace -pprof=sched %s\n", p.BlockBase, p.Block, p.AllocsBase, p.Allocs, p.Trace)
	}
	return string(b[:len(b)-1])
}

// printPaths prints the critical paths of the profiled sequential phases
// side by side: each stage's p50 in µs ("-": the side has no such stage).
func (r Result) printPaths(pf func(string, ...any)) {
	var paths []Profiled
	for _, p := range r.Profiles {
		if p.Path != nil {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return
	}
	pf("critical path of a sequential call, from the profiled pass's traces (p50 µs; calls traced):\n")
	pf("  %-80s", "stage")
	for _, p := range paths {
		pf(" %22s", fmt.Sprintf("%s (%d)", p.Side, p.Path.Calls))
	}
	pf("\n")
	for _, name := range stageNames {
		pf("  %-80s", name)
		for _, p := range paths {
			cell := "-"
			for _, st := range p.Path.Stages {
				if st.Name == name {
					cell = fmt.Sprintf("%.1f", float64(st.P50)/1e3)
				}
			}
			pf(" %22s", cell)
		}
		pf("\n")
	}
}

// coreRows is how many start functions printCores shows per phase (the
// largest of each), beside the total.
const coreRows = 12

// printCores prints the time the goroutines of the profiled phases with
// sessions ran per call, by start function, side by side: the largest
// coreRows of every phase, largest first by their largest cell ("-": none
// of that phase's goroutines started there).
func (r Result) printCores(pf func(string, ...any)) {
	var phases []Profiled
	for _, p := range r.Profiles {
		if p.Cores != nil && p.Sessions > 1 {
			phases = append(phases, p)
		}
	}
	if len(phases) == 0 {
		return
	}
	var rows []string
	for _, p := range phases {
		for i, s := range p.Cores.Shares {
			if i < coreRows && !slices.Contains(rows, s.Func) {
				rows = append(rows, s.Func)
			}
		}
	}
	largest := func(fn string) float64 {
		v := 0.0
		for _, p := range phases {
			v = max(v, p.Cores.share(fn))
		}
		return v
	}
	slices.SortStableFunc(rows, func(a, b string) int { return cmp.Compare(largest(b), largest(a)) })
	pf("time on a core per call under load, by goroutine start function, from the profiled pass's traces (µs per call):\n")
	pf("  %-60s", "goroutines started in")
	for _, p := range phases {
		pf(" %22s", fmt.Sprintf("%s @%d", p.Side, p.Sessions))
	}
	pf("\n  %-60s", "all")
	for _, p := range phases {
		pf(" %22.1f", p.Cores.PerCall)
	}
	pf("\n")
	for _, fn := range rows {
		pf("  %-60s", fn)
		for _, p := range phases {
			cell := "-"
			if i := slices.IndexFunc(p.Cores.Shares, func(s CoreShare) bool { return s.Func == fn }); i >= 0 {
				cell = fmt.Sprintf("%.1f", p.Cores.Shares[i].PerCall)
			}
			pf(" %22s", cell)
		}
		pf("\n")
	}
}
