//go:build linux

package wire

import (
	"os"

	"golang.org/x/sys/unix"
)

// PipeSize is the capacity GrowPipe asks for: fewer, larger transfers per
// context switch. 1 MiB is the default unprivileged maximum
// (/proc/sys/fs/pipe-max-size).
const PipeSize = 1 << 20

// GrowPipe asks the kernel to give the pipe behind f PipeSize bytes of
// buffer. Failure is not an error: the pipe keeps its 64 KiB default and
// the relay is merely slower.
func GrowPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, PipeSize) })
	}
}
