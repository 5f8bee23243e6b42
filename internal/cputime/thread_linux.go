package cputime

import "time"

// rusageThread is Linux's RUSAGE_THREAD.
const rusageThread = 1

// Thread is the CPU time (user and system) the calling thread has used so
// far. The caller locks its goroutine to the thread
// (runtime.LockOSThread) for readings to be of one thread.
func Thread() (time.Duration, error) { return rusage(rusageThread) }
