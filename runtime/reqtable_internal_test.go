package runtime

import (
	"testing"
	"time"
)

// awaitWorkers counts the workers neither exited nor parked: it reports
// the running ones at the deadline, and returns as soon as the last one
// running exits or parks (a park wakes it like an exit), whatever the
// order.
func TestAwaitWorkersCountsParked(t *testing.T) {
	for _, lastParks := range []bool{true, false} {
		var rt reqTable
		rt.workers = 3
		rt.park()       // the first waits for the close
		rt.workerExit() // the second exited
		if n := rt.awaitWorkers(time.Now()); n != 1 {
			t.Fatalf("%d workers running at the deadline, want 1", n)
		}
		done := make(chan int, 1)
		go func() { done <- rt.awaitWorkers(time.Now().Add(time.Hour)) }()
		if lastParks {
			rt.park()
		} else {
			rt.workerExit()
		}
		select {
		case n := <-done:
			if n != 0 {
				t.Fatalf("lastParks %v: %d running, want 0", lastParks, n)
			}
		case <-time.After(time.Minute):
			t.Fatalf("lastParks %v: awaitWorkers not woken by the last worker", lastParks)
		}
		rt.unpark()
		if lastParks {
			rt.unpark()
		}
		if rt.parked != 0 {
			t.Fatalf("%d still parked after every unpark", rt.parked)
		}
	}
}
