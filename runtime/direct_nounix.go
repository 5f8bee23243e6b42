//go:build !unix

package runtime

import (
	"os"
	"os/exec"
)

// ownGroup: no process groups here; the host signals the child alone.
func ownGroup(*exec.Cmd) {}

// signalChild: there is no TERM here (nothing is sent, the sequence
// goes on to KILL after its grace); KILL terminates the child alone.
func signalChild(p *os.Process, kill bool) (group, ok bool) {
	if !kill {
		return false, false
	}
	return false, p.Kill() == nil
}

// exitOf is a reaped child's exit code (no signals here).
func exitOf(s *os.ProcessState) ExitStatus {
	if s == nil {
		return ExitStatus{Code: -1}
	}
	return ExitStatus{Code: s.ExitCode()}
}
