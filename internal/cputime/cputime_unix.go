//go:build unix

package cputime

import (
	"fmt"
	"syscall"
	"time"
)

// Process is the CPU time (user and system, every thread) the process has
// used so far.
func Process() (time.Duration, error) {
	return rusage(syscall.RUSAGE_SELF)
}

func rusage(who int) (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0, fmt.Errorf("cputime: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
