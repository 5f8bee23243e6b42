package gatewaybench

import (
	"math"
	"testing"

	"golang.org/x/exp/trace"
)

// TestCoreTime: a goroutine's running time is every span from its
// becoming running to its leaving that state, a goroutine running when
// the trace begins counts from its first transition and one running when
// it ends counts to its end; it is summed under the start function the
// first of its transitions showed, or as not traced when none did.
func TestCoreTime(t *testing.T) {
	const us = 1000 // trace.Time is in nanoseconds
	trs := []goTransition{
		{t: 0, g: 2, from: trace.GoUndetermined, to: trace.GoRunning},
		{t: 5 * us, g: 3, from: trace.GoRunnable, to: trace.GoRunning},
		{t: 8 * us, g: 1, from: trace.GoNotExist, to: trace.GoRunnable, start: "pkg.a"},
		{t: 10 * us, g: 1, from: trace.GoRunnable, to: trace.GoRunning},
		{t: 15 * us, g: 3, from: trace.GoRunning, to: trace.GoWaiting},
		{t: 20 * us, g: 2, from: trace.GoRunning, to: trace.GoWaiting, start: "pkg.b"},
		{t: 25 * us, g: 3, from: trace.GoWaiting, to: trace.GoRunnable}, // woken, not run
		{t: 30 * us, g: 1, from: trace.GoRunning, to: trace.GoSyscall, start: "pkg.later"},
		{t: 40 * us, g: 1, from: trace.GoSyscall, to: trace.GoRunning},
		{t: 50 * us, g: 1, from: trace.GoRunning, to: trace.GoNotExist},
		{t: 90 * us, g: 4, from: trace.GoRunnable, to: trace.GoRunning, start: "pkg.a"},
	}
	ct := coreTime(trs, 100*us, 10)
	want := []CoreShare{{"pkg.a", 4}, {"pkg.b", 2}, {unknownStart, 1}}
	if len(ct.Shares) != len(want) {
		t.Fatalf("shares %+v, want %+v", ct.Shares, want)
	}
	for i, w := range want {
		if g := ct.Shares[i]; g.Func != w.Func || math.Abs(g.PerCall-w.PerCall) > 1e-9 {
			t.Errorf("share %d = %+v, want %+v", i, g, w)
		}
	}
	if math.Abs(ct.PerCall-7) > 1e-9 {
		t.Errorf("per call %v µs, want 7", ct.PerCall)
	}
	if got := ct.share("pkg.b"); got != 2 {
		t.Errorf("share(pkg.b) = %v", got)
	}
	if got := ct.share("pkg.none"); got != 0 {
		t.Errorf("share(pkg.none) = %v", got)
	}
}

// TestStartFunc: a goroutine's start is its stack's outermost frame other
// than runtime.goexit, without the package path.
func TestStartFunc(t *testing.T) {
	s := trace.MakeStack([]trace.StackFrame{
		{PC: 1, Func: "github.com/x/y/ledger.(*Ledger).add"},
		{PC: 2, Func: "github.com/x/y/ledger.(*Ledger).committer"},
		{PC: 3, Func: "runtime.goexit"},
	})
	if got := startFunc(s); got != "ledger.(*Ledger).committer" {
		t.Errorf("start %q", got)
	}
	if got := startFunc(trace.MakeStack([]trace.StackFrame{{PC: 1, Func: "main.main"}})); got != "main.main" {
		t.Errorf("start %q", got)
	}
	if got := startFunc(trace.NoStack); got != "" {
		t.Errorf("empty stack: start %q", got)
	}
}
