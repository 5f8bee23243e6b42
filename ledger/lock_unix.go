//go:build unix

package ledger

import (
	"errors"
	"os"
	"syscall"
)

// lockCall names the system call of lockFileNB in its errors.
const lockCall = "flock"

// lockFileNB takes flock on f without blocking: shared or exclusive. flock
// locks the open file description, so a second open in this very process
// conflicts as a second process would (see lockFile). A lock held by
// someone else yields errLockHeld.
func lockFileNB(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLockHeld
	}
	if err != nil {
		return err
	}
	return nil
}

// freeBytes is the space an unprivileged writer may still use on dir's
// file system.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
