package cputime_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/cputime"
)

// grow is how much CPU the test has its thread spend: several of the
// kernel's accounting ticks, so both readings move well past rounding.
const grow = 20 * time.Millisecond

// hangBound bounds the spinning. It is not a timing assertion: however
// little of the machine the thread gets, its CPU time grows while it
// runs, so only a reading that never moves reaches the bound.
const hangBound = time.Minute

// read returns one reading, failing the test if it cannot be taken.
func read(t *testing.T, clock func() (time.Duration, error)) time.Duration {
	t.Helper()
	d, err := clock()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestReadingsGrowWithWork: while the calling thread works, neither the
// thread's nor the process's reading ever goes back, the thread's grows
// (the test spins until it has grown by grow: a condition on the reading,
// not an amount of wall time, so a loaded machine only makes it spin
// longer), and the process's grows by at least as much, the thread being
// one of its own.
func TestReadingsGrowWithWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The process is read before the thread at the start and after it at
	// the end, so its interval holds the thread's.
	p0 := read(t, cputime.Process)
	t0 := read(t, cputime.Thread)
	p, th := p0, t0
	deadline := time.Now().Add(hangBound)
	for sink := 0; th-t0 < grow; {
		if time.Now().After(deadline) {
			t.Fatalf("the thread's CPU time grew by %v in %v of spinning, want %v", th-t0, hangBound, grow)
		}
		for i := range 10000 {
			sink += i * i // work between readings
		}
		p1 := read(t, cputime.Process)
		t1 := read(t, cputime.Thread)
		if p1 < p || t1 < th {
			t.Fatalf("a reading went back: process %v → %v, thread %v → %v", p, p1, th, t1)
		}
		p, th = p1, t1
	}
	p = read(t, cputime.Process)
	// A millisecond of slack for the kernel summing the process's threads
	// apart from reading one.
	if p-p0 < th-t0-time.Millisecond {
		t.Fatalf("the process (+%v) used less than one of its threads (+%v)", p-p0, th-t0)
	}
}
