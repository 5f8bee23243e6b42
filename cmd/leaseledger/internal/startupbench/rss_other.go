//go:build !linux

package startupbench

import "os"

// peakRSS is 0 (unknown): ru_maxrss's unit differs between systems.
func peakRSS(*os.ProcessState) int64 { return 0 }
