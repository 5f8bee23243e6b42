//go:build !linux

package wire

import "os"

// PipeSize is the capacity GrowPipe asks for on Linux; elsewhere pipes keep
// their default size.
const PipeSize = 1 << 20

// GrowPipe does nothing outside Linux, where F_SETPIPE_SZ does not exist.
func GrowPipe(*os.File) {}
