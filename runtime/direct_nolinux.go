//go:build !linux

package runtime

// awaitExit cannot wait without reaping here: the reaper marks the child
// exited right after its reap.
func awaitExit(int) bool { return false }

// dying is not observable here: the checks after a failed call decide.
func (d *directChild) dying() bool { return false }

// exitedNow reports whether the reaper has seen the child exit: here it
// marks the exit right after the reap.
func (d *directChild) exitedNow() bool { return d.markedExited() }
