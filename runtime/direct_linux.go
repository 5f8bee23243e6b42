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
