//go:build windows

package ledger

import (
	"errors"
	"math"
	"os"

	"golang.org/x/sys/windows"
)

// lockCall names the system call of lockFileNB in its errors.
const lockCall = "LockFileEx"

// lockFileNB takes LockFileEx on f without blocking: shared or exclusive,
// over the whole range of the file (the lock file stays empty, and a range
// beyond the end may be locked). Like flock, the lock belongs to this
// handle, so a second open in this very process conflicts as a second
// process would (see lockFile), and it is released when the handle closes.
// A lock held by someone else yields errLockHeld.
func lockFileNB(f *os.File, exclusive bool) error {
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	var ol windows.Overlapped
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, math.MaxUint32, math.MaxUint32, &ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return errLockHeld
	}
	if err != nil {
		return err
	}
	return nil
}

// freeBytes is the space the calling user may still use on dir's volume
// (GetDiskFreeSpaceEx honours per-user quotas, as Bavail does on unix).
func freeBytes(dir string) (uint64, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, err
	}
	var avail, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &totalFree); err != nil {
		return 0, err
	}
	return avail, nil
}
