//go:build !unix

package ledgerbench

import "time"

// processCPU cannot be read here: sides report no CPU time.
func processCPU() (time.Duration, bool) { return 0, false }
