package testproc

import (
	"os/exec"
	"syscall"
	"testing"
)

// Stop returns with the process stopped, not merely signalled (its state
// is T), and it runs again after SIGCONT.
func TestStopWaitsForTheStop(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	Stop(t, pid)
	if _, state, ok := Stat(pid); !ok || (state != 'T' && state != 't') {
		t.Fatalf("after Stop: state %q (ok %v), want T", state, ok)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the child running again", func() bool {
		_, state, ok := Stat(pid)
		return ok && state != 'T' && state != 't'
	})
}
