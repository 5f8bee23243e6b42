package startupbench

import (
	"os"
	"syscall"
)

// peakRSS is the reaped child's peak resident set in bytes (getrusage's
// ru_maxrss, in KiB on Linux).
func peakRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}
