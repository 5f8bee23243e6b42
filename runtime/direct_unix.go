//go:build unix

package runtime

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ownGroup starts the direct child as the leader of a process group of
// its own, so the host's TERM and KILL reach the descendants that stay in
// it, and a terminal's signals to the host's group do not reach it.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signalChild sends TERM or KILL to the child's process group (its pid:
// the child leads it, and the id cannot be reused while the child is
// unreaped), or to the child alone when the group cannot be signalled.
// It reports whether the group was signalled and whether anything was.
func signalChild(p *os.Process, kill bool) (group, ok bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if syscall.Kill(-p.Pid, sig) == nil {
		return true, true
	}
	return false, p.Signal(sig) == nil
}

// exitOf is a reaped child's wait status.
func exitOf(s *os.ProcessState) ExitStatus {
	if s == nil {
		return ExitStatus{Code: -1}
	}
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitStatus{Code: -1, Signal: signalName(ws.Signal())}
	}
	return ExitStatus{Code: s.ExitCode()}
}

// signalName names a signal as receipts do: the kernel's name without
// "SIG" ("KILL"), or its number.
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig))
}
