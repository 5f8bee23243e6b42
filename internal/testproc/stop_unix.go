//go:build unix

package testproc

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// Stop sends SIGSTOP to pid and returns once every thread of it is
// stopped. kill returns before the stop takes effect: the group stop
// begins only when one of the process's threads takes the signal, and
// until then its other threads run on — on a busy machine long enough to
// read a request written after kill returned and answer it. Where
// /proc/<pid>/task cannot be read (not Linux) Stop returns after kill.
func Stop(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	tasks := "/proc/" + strconv.Itoa(pid) + "/task"
	if _, err := os.Stat(tasks); err != nil {
		return
	}
	Eventually(t, fmt.Sprintf("every thread of %d stopped", pid), func() error {
		ents, err := os.ReadDir(tasks)
		if err != nil {
			return err
		}
		for _, e := range ents {
			b, err := os.ReadFile(tasks + "/" + e.Name() + "/stat")
			if err != nil {
				continue // the thread exited
			}
			if st := stateOf(b); st != 'T' && st != 't' {
				return fmt.Errorf("thread %s in state %q", e.Name(), st)
			}
		}
		return nil
	})
}
