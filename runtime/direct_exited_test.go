//go:build linux

package runtime

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
)

// TestDirectExitedNow: a running child has not exited; one killed from
// outside counts as exited before any reaper ran (here none runs at all),
// and once reaped. The close asks this first, so exited_before_close does
// not depend on the reaper's goroutine having run, nor on the child's
// exit having ended before its stdout's EOF began the close
// (TestModes/direct/kill9_idle).
func TestDirectExitedNow(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &directChild{pid: cmd.Process.Pid}
	reaped := false
	defer func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	if d.exitedNow() {
		t.Fatal("a running child counts as exited")
	}
	if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Blocks until the child is a zombie, without reaping it.
	if !awaitExit(d.pid) {
		t.Fatal("waitid did not see the child exit")
	}
	if !d.exitedNow() {
		t.Fatal("a killed, unreaped child does not count as exited")
	}
	if d.markedExited() {
		t.Fatal("no reaper ran, yet the child is marked")
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("a killed child exited cleanly")
	}
	reaped = true
	if !d.exitedNow() {
		t.Fatal("a reaped child does not count as exited")
	}
	d.probe.close()
}

// TestStatExiting: stat shows an exit under way by the state (zombie,
// dead) or by PF_EXITING in the flags, whatever the command name holds.
func TestStatExiting(t *testing.T) {
	line := func(comm string, state byte, flags uint64) []byte {
		return []byte(fmt.Sprintf("42 (%s) %c 1 42 42 0 -1 %d 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0", comm, state, flags))
	}
	for _, c := range []struct {
		b    []byte
		want bool
	}{
		{line("srv", 'S', 0x400000), false},
		{line("srv", 'R', 0x400000), false},
		{line("srv", 'R', 0x400000|pfExiting), true},
		{line("s) R 1 (x", 'S', pfExiting), true},
		{line("s) Z 1 (x", 'S', 0), false},
		{line("srv", 'Z', 0), true},
		{line("srv", 'X', 0), true},
		{[]byte("42 (srv"), false},
		{[]byte("42 (srv) S 1"), false},
	} {
		if got := statExiting(c.b); got != c.want {
			t.Errorf("statExiting(%q) = %v, want %v", c.b, got, c.want)
		}
	}
}
