package testproc

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Leftovers must notice a child that is still there, and be quiet once it
// is reaped.
func TestLeftoversSeesChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := Leftovers()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err == nil || !strings.Contains(err.Error(), "child processes left behind") {
		t.Fatalf("Leftovers with a live child: %v", err)
	}
	if err := Leftovers(); err != nil {
		t.Fatalf("Leftovers after reaping: %v", err)
	}
}

// fatalRecorder is a testing.TB whose Fatalf only records its message
// (eventually returns right after it).
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

// Eventually returns once its condition holds, however many polls that
// takes, and fails the test, naming what it waited for and the
// condition's last error, when the condition never holds within the
// bound.
func TestEventually(t *testing.T) {
	polls := 0
	Eventually(t, "the fifth poll", func() bool { polls++; return polls == 5 })
	if polls != 5 {
		t.Fatalf("returned after %d polls, want 5", polls)
	}
	polls = 0
	Eventually(t, "the third poll", func() error {
		if polls++; polls < 3 {
			return errors.New("too early")
		}
		return nil
	})
	if polls != 3 {
		t.Fatalf("returned after %d polls, want 3", polls)
	}

	r := &fatalRecorder{TB: t}
	eventually(r, 10*time.Millisecond, "a door to open", func() error { return errors.New("still shut") })
	if !strings.Contains(r.msg, "a door to open") || !strings.Contains(r.msg, "still shut") {
		t.Fatalf("failure message %q does not name what was awaited and its last error", r.msg)
	}
}
