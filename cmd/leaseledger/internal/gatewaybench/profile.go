package gatewaybench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"time"
)

// ProfileConfig describes the profiled pass: after the measured rounds,
// each of Sides runs a sequential load and a load at the first
// Config.Sessions level, each twice: once under a CPU profile, once with
// blocking and mutex contention recorded (recording unwinds a stack per
// event, which would distort the CPU profile), written to Dir as
// <side>-<load>.cpu.pprof, .block.pprof and .mutex.pprof. The blocking and mutex profiles are
// cumulative over the process's life, so each comes with the profile as it
// was when the phase began (.block.base.pprof, .mutex.base.pprof): read the
// phase alone with `go tool pprof -diff_base X.block.base.pprof
// X.block.pprof`. A third run of the same load writes an execution trace
// (<side>-<load>.trace): the scheduling latencies and the hand-offs
// between goroutines that neither profile shows (`go tool trace
// -pprof=sched X.trace` profiles the time goroutines waited, runnable, for
// a core); every trace is read back into the time its goroutines ran per
// call (cores.go), and the sequential phase's also into the critical path
// of its calls (critpath.go). The CPU run also records what
// was allocated: the heap's cumulative allocation profile before it
// (.allocs.base.pprof) and after it (.allocs.pprof); `go tool pprof
// -sample_index=alloc_space -diff_base X.allocs.base.pprof X.allocs.pprof`
// reads the phase's bytes allocated, the garbage collector's work. The
// profiled phases are not part of the figures.
type ProfileConfig struct {
	// Dir receives the profiles; empty: no profiled pass.
	Dir string `json:"dir,omitempty"`
	// Calls is the number of calls of each profiled phase;
	// DefaultProfileCalls when zero.
	Calls int `json:"calls,omitempty"`
	// Sides are the sides profiled; DefaultProfileSides when empty.
	Sides []string `json:"sides,omitempty"`
}

// DefaultProfileCalls gives a sequential gateway phase a few seconds: a
// few hundred CPU samples at the default 100 Hz.
const DefaultProfileCalls = 2000

// DefaultProfileSides are the gateway sides and the floors they are held
// against.
var DefaultProfileSides = []string{ProxyHTTP, GatewayHTTP, ProxyGuardian, GatewayStdio}

func (p *ProfileConfig) validate() error {
	if p.Dir == "" {
		return nil
	}
	if p.Calls < 0 {
		return errors.New("gatewaybench: profile calls must not be negative")
	}
	if p.Calls == 0 {
		p.Calls = DefaultProfileCalls
	}
	if len(p.Sides) == 0 {
		p.Sides = slices.Clone(DefaultProfileSides)
	}
	for _, s := range p.Sides {
		if !slices.Contains(SideNames, s) {
			return fmt.Errorf("gatewaybench: no side %q to profile (sides: %v)", s, SideNames)
		}
	}
	return nil
}

// Profiled is one profiled phase and where its profiles are.
type Profiled struct {
	Side      string  `json:"side"`
	Sessions  int     `json:"sessions"`
	Calls     int     `json:"calls"`
	Rate      float64 `json:"calls_per_s"`
	CPU       string  `json:"cpu"`
	Block     string  `json:"block"`
	BlockBase string  `json:"block_base"`
	Mutex     string  `json:"mutex"`
	MutexBase string  `json:"mutex_base"`
	Trace     string  `json:"trace"`
	// Path is the critical path of the sequential phase's calls, read
	// from its trace (nil for the phase with sessions).
	Path *CriticalPath `json:"critical_path,omitempty"`
	// Cores is the time the traced run's goroutines ran per call, by
	// start function (cores.go).
	Cores *CoreTime `json:"cores,omitempty"`
	// Allocs and AllocsBase are the heap's allocation profile after and
	// before the CPU run.
	Allocs     string `json:"allocs"`
	AllocsBase string `json:"allocs_base"`
}

// blockRate records every blocking event of a profiled phase (ns).
const blockRate = 1

// profile runs the profiled pass over sides (see ProfileConfig).
func profile(ctx context.Context, cfg Config, sides []*side) ([]Profiled, error) {
	if err := os.MkdirAll(cfg.Profile.Dir, 0o755); err != nil {
		return nil, err
	}
	c := cfg.Sessions[0]
	var out []Profiled
	for _, name := range cfg.Profile.Sides {
		i := slices.IndexFunc(sides, func(s *side) bool { return s.name == name })
		s := sides[i]
		for _, sessions := range []int{1, c} {
			load := "seq"
			if sessions > 1 {
				load = fmt.Sprintf("c%d", sessions)
			}
			base := filepath.Join(cfg.Profile.Dir, name+"-"+load)
			p := Profiled{Side: name, Sessions: sessions, CPU: base + ".cpu.pprof",
				Block: base + ".block.pprof", BlockBase: base + ".block.base.pprof",
				Mutex: base + ".mutex.pprof", MutexBase: base + ".mutex.base.pprof", Trace: base + ".trace",
				Allocs: base + ".allocs.pprof", AllocsBase: base + ".allocs.base.pprof"}
			run := func() (Phase, error) {
				if sessions == 1 {
					ph, _, err := s.sequential(ctx, cfg.Profile.Calls)
					return ph, err
				}
				return s.concurrent(ctx, sessions, perSession(cfg.Profile.Calls, sessions), 0)
			}
			// The CPU profile first, alone: recording every blocking
			// event unwinds a stack each time, which would show in it.
			// The allocation profile is always on (sampled every
			// runtime.MemProfileRate bytes) and cumulative: its phase is
			// the difference from the base.
			if err := writeProfile("allocs", p.AllocsBase); err != nil {
				return out, err
			}
			f, err := os.Create(p.CPU)
			if err != nil {
				return out, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return out, errors.Join(err, f.Close())
			}
			ph, err := run()
			pprof.StopCPUProfile()
			if err = errors.Join(err, f.Close(), writeProfile("allocs", p.Allocs)); err != nil {
				return out, err
			}
			// Then the same load again with blocking and contention recorded.
			if err := errors.Join(writeProfile("block", p.BlockBase), writeProfile("mutex", p.MutexBase)); err != nil {
				return out, err
			}
			runtime.SetBlockProfileRate(blockRate)
			runtime.SetMutexProfileFraction(1)
			_, err = run()
			runtime.SetBlockProfileRate(0)
			runtime.SetMutexProfileFraction(0)
			if err != nil {
				return out, err
			}
			if err := errors.Join(writeProfile("block", p.Block), writeProfile("mutex", p.Mutex)); err != nil {
				return out, err
			}
			// And once more under the execution tracer.
			if f, err = os.Create(p.Trace); err != nil {
				return out, err
			}
			if err := trace.Start(f); err != nil {
				return out, errors.Join(err, f.Close())
			}
			traced, err := run()
			trace.Stop()
			if err = errors.Join(err, f.Close()); err != nil {
				return out, err
			}
			ct, err := readCoreTime(p.Trace, traced.Calls)
			if err != nil {
				return out, err
			}
			p.Cores = &ct
			if sessions == 1 {
				cp, err := readCriticalPath(p.Trace, name)
				if err != nil {
					return out, err
				}
				p.Path = &cp
			}
			p.Calls, p.Rate = ph.Calls, ph.Rate()
			out = append(out, p)
			cfg.logf("profiled %s at %d session(s): %d calls in %v", name, sessions, ph.Calls, ph.Elapsed.Round(time.Millisecond))
		}
	}
	return out, nil
}

// writeProfile writes the named runtime profile to path. The allocation
// profile counts what the last completed garbage collection saw, so one
// runs first: the profile then holds every allocation made until now.
func writeProfile(name, path string) error {
	if name == "allocs" {
		runtime.GC()
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(name).WriteTo(f, 0), f.Close())
}
