//go:build linux

package guardian

import "syscall"

func helperSysProcAttr() *syscall.SysProcAttr {
	// If we die, the helper learns it three ways: EOF on its stdin (the
	// primary signal), this parent-death signal, and its periodic parent
	// check. SIGUSR1, not TERM: the helper checks getppid on it, because it
	// also fires when only our forking thread exits.
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGUSR1}
}
