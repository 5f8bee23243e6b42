package cputime_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/cputime"
)

// spin burns about d of CPU on the calling goroutine.
func spin(d time.Duration) int {
	n, start := 0, time.Now()
	for time.Since(start) < d {
		n++
	}
	return n
}

// TestReadingsGrowWithWork: after the calling thread spins for 50 ms, both
// the process's and the thread's CPU time have grown by a good part of it
// (a loaded machine may run the spinning thread less than all the time),
// and neither ever goes back.
func TestReadingsGrowWithWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p0, err := cputime.Process()
	if err != nil {
		t.Fatal(err)
	}
	t0, err := cputime.Thread()
	if err != nil {
		t.Fatal(err)
	}
	spin(50 * time.Millisecond)
	p1, err := cputime.Process()
	if err != nil {
		t.Fatal(err)
	}
	t1, err := cputime.Thread()
	if err != nil {
		t.Fatal(err)
	}
	if p1-p0 < 10*time.Millisecond || t1-t0 < 10*time.Millisecond {
		t.Fatalf("after 50 ms of spinning: process +%v, thread +%v", p1-p0, t1-t0)
	}
	if p1-p0 < t1-t0-time.Millisecond {
		t.Fatalf("the process (+%v) used less than one of its threads (+%v)", p1-p0, t1-t0)
	}
}
