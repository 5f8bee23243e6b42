//go:build linux

package guardian

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// pipeSize is the capacity asked for the host ⇄ helper pipes: fewer, larger
// transfers per context switch. 1 MiB is the default unprivileged maximum
// (/proc/sys/fs/pipe-max-size); failure just keeps the 64 KiB default.
const pipeSize = 1 << 20

func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

func helperSysProcAttr() *syscall.SysProcAttr {
	// If we die, the helper learns it three ways: EOF on its stdin (the
	// primary signal), this parent-death signal, and its periodic parent
	// check. SIGUSR1, not TERM: the helper checks getppid on it, because it
	// also fires when only our forking thread exits.
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGUSR1}
}
