//go:build unix

package wire

import (
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SignalName names a signal the way receipts and results record it: the
// kernel's name without the "SIG" prefix ("TERM", "KILL", "USR1"), or the
// decimal number for a signal without a name. Host and helper both use it,
// so a name means the same signal on both sides.
func SignalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig))
}
