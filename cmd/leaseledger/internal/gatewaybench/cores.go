package gatewaybench

// The cores' time of a profiled phase, read back from its execution trace:
// how long goroutines held a core (ran, outside system calls), summed by
// the function each goroutine started in and divided by the phase's calls.
// The critical path (critpath.go) says what one sequential call waits for;
// this says what the cores were busy with per call, and with sessions in
// parallel the cores are what bounds the calls per second. Side by side
// with the floor's, the difference between a gateway's column and its
// proxy's is the work the gateway adds per call, goroutine by goroutine:
// its handler's own, the ledger's pipeline, the bus, the garbage
// collector's mark workers. The tracer slows every side alike: compare
// the columns, not their absolute values with the measured rounds.

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// CoreShare is the time the goroutines started in one function ran, per
// call of the phase.
type CoreShare struct {
	Func    string  `json:"func"`
	PerCall float64 `json:"us_per_call"`
}

// CoreTime is the time a profiled phase's goroutines ran, per call: in
// all, and by start function, largest first.
type CoreTime struct {
	PerCall float64     `json:"us_per_call"`
	Shares  []CoreShare `json:"shares"`
}

// unknownStart names the goroutines whose start the trace never showed
// (no stack of theirs was recorded).
const unknownStart = "(start not traced)"

// goTransition is a goroutine state transition as coreTime reads it:
// start is the goroutine's start function when the transition's stack,
// which is the goroutine's own, shows it.
type goTransition struct {
	t        trace.Time
	g        trace.GoID
	from, to trace.GoState
	start    string
}

// readCoreTime reads the execution trace at path, of a phase of calls
// calls, into its cores' time per call.
func readCoreTime(path string, calls int) (CoreTime, error) {
	var trs []goTransition
	var end trace.Time
	err := goTransitions(path, func(ev *trace.Event, st trace.StateTransition) {
		from, to := st.Goroutine()
		trs = append(trs, goTransition{t: ev.Time(), g: st.Resource.Goroutine(), from: from, to: to, start: startFunc(st.Stack)})
	}, func(ev *trace.Event) { end = max(end, ev.Time()) })
	if err != nil {
		return CoreTime{}, err
	}
	return coreTime(trs, end, calls), nil
}

// startFunc is the outermost function of a goroutine's stack, without its
// package path; "" when the stack is empty.
func startFunc(s trace.Stack) string {
	start := ""
	for fr := range s.Frames() {
		if fr.Func != "runtime.goexit" {
			start = fr.Func
		}
	}
	return start[strings.LastIndexByte(start, '/')+1:]
}

// coreTime sums, per start function, how long goroutines ran in trs (in
// time order; the trace ends at end, where goroutines still running stop
// counting), divided by calls. A goroutine counts under the start
// function of the first of its transitions that shows one.
func coreTime(trs []goTransition, end trace.Time, calls int) CoreTime {
	start := map[trace.GoID]string{}
	since := map[trace.GoID]trace.Time{} // running since
	ran := map[trace.GoID]time.Duration{}
	for _, tr := range trs {
		if _, ok := start[tr.g]; !ok && tr.start != "" {
			start[tr.g] = tr.start
		}
		if t0, ok := since[tr.g]; ok && tr.from == trace.GoRunning {
			ran[tr.g] += tr.t.Sub(t0)
			delete(since, tr.g)
		}
		if tr.to == trace.GoRunning {
			since[tr.g] = tr.t
		}
	}
	for g, t0 := range since {
		ran[g] += end.Sub(t0)
	}
	by := map[string]time.Duration{}
	var all time.Duration
	for g, d := range ran {
		name := start[g]
		if name == "" {
			name = unknownStart
		}
		by[name] += d
		all += d
	}
	perCall := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(max(calls, 1)) }
	ct := CoreTime{PerCall: perCall(all)}
	for name, d := range by {
		ct.Shares = append(ct.Shares, CoreShare{Func: name, PerCall: perCall(d)})
	}
	slices.SortFunc(ct.Shares, func(a, b CoreShare) int {
		return cmp.Or(cmp.Compare(b.PerCall, a.PerCall), strings.Compare(a.Func, b.Func))
	})
	return ct
}

// share returns the time per call of the goroutines started in fn (0 when
// none ran).
func (c CoreTime) share(fn string) float64 {
	for _, s := range c.Shares {
		if s.Func == fn {
			return s.PerCall
		}
	}
	return 0
}
