//go:build linux

package runtime

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// awaitExit blocks until the child pid has exited, without reaping it
// (waitid WNOWAIT), and reports whether it saw that; the reaper then marks
// it exited before reaping, so no signal is sent after the reap.
func awaitExit(pid int) bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			return err == nil
		}
	}
}

// dying reports whether the direct child is gone or on its way out (see
// guardianChild.dying); the host is its parent.
func (d *directChild) dying() bool { return d.probe.dying(d.pid, os.Getpid()) }

// exitedNow reports whether the direct child's exit had begun by itself:
// the reaper saw it exit; the kernel holds it exited and unreaped (a
// zombie: waitid with WNOHANG and WNOWAIT answers without waiting or
// reaping); or /proc shows it exiting, gone or killed (SIGKILL pending).
// The close asks it first, before its own steps could cause an exit: the
// reaper may not have run since the child exited, and a child's stdout
// reaches EOF, which may begin the close, while it is still exiting.
func (d *directChild) exitedNow() bool {
	if d.markedExited() {
		return true
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, d.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err == nil && info.Signo == int32(unix.SIGCHLD) {
			return true
		}
		break
	}
	parent := os.Getpid()
	return d.probe.exiting(d.pid, parent) || d.probe.dying(d.pid, parent)
}
