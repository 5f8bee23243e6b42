//go:build !unix

package wire

import (
	"strconv"
	"syscall"
)

// SignalName names a signal by number: the helper runs only on Linux, so
// on other platforms no receipt carries a signal to name.
func SignalName(sig syscall.Signal) string { return strconv.Itoa(int(sig)) }
