package testproc

import (
	"errors"
	"testing"
	"time"
)

// HangBound is how long Eventually polls a condition before it fails the
// test. It bounds a hang, it does not time anything: a condition that is
// going to hold holds far sooner, even under the race detector on a
// loaded machine, so a test that reaches the bound is waiting for
// something that is not going to happen. It is long so that no amount of
// slowness short of that fails a test, and shorter than go test's default
// -timeout so that the failure names what was awaited instead of dumping
// every goroutine.
const HangBound = 60 * time.Second

// pollMax caps the pause between two polls: short enough that a test
// notices the condition soon after it holds, long enough that polling
// does not steal much CPU from what the test waits for.
const pollMax = 20 * time.Millisecond

// Eventually waits until cond holds: it polls cond, pausing a little
// longer each time up to pollMax, and fails the test with what and the
// condition's last error if it still does not hold after HangBound. A
// cond returning error holds when it returns nil (its error says what is
// still missing, for the failure message); a cond returning bool holds
// when it returns true.
//
// It is for states no channel or hook announces (process tables, counters,
// another process's output); a test that can wait on a channel waits on
// the channel. It is never a pause: a test that needs time to pass says
// why and sleeps.
func Eventually[C func() error | func() bool](t testing.TB, what string, cond C) {
	t.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() error:
			return c()
		case func() bool:
			if c() {
				return nil
			}
			return errNotYet
		}
		panic("unreachable")
	}
	eventually(t, HangBound, what, check)
}

// eventually is Eventually with its bound as a parameter, for the test.
func eventually(t testing.TB, bound time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Await(bound, cond); err != nil {
		t.Fatalf("not within %v: %s: %v", bound, what, err)
	}
}

// errNotYet is the last error of a bool condition that never held.
var errNotYet = errors.New("the condition does not hold")

// Await polls cond as Eventually does until it returns nil or bound
// passes, and returns cond's last error (nil once it held). It is for a
// wait that has more to do on failure than fail the test: kill what it
// waited for, or report through an example's output.
func Await(bound time.Duration, cond func() error) error {
	deadline := time.Now().Add(bound)
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, pollMax)
	}
}
