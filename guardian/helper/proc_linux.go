//go:build linux

package helper

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// linuxOS is procOS on Linux: the helper is the child subreaper of the
// target's orphans, the target dies with the helper (PR_SET_PDEATHSIG), and
// the direct child is signalled through the pidfd os.Process holds.
type linuxOS struct {
	proc *os.Process
}

func newProcOS() procOS { return &linuxOS{} }

func (o *linuxOS) prepare() bool {
	// Pdeathsig of the target follows the thread that forks it. Locking the
	// main goroutine (Main runs on it, and starts the target) to its thread
	// for the life of the process keeps that thread alive until the helper
	// itself exits.
	runtime.LockOSThread()
	// Orphans of the target reparent to us, so we can see and reap them.
	subreaper := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
	// The host also sets this at fork; setting it again is harmless and
	// covers a host that did not. SIGUSR1 so a false alarm (the host's
	// forking thread exited, the host lives) is told apart by getppid.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGUSR1), 0, 0, 0)
	return subreaper
}

func (o *linuxOS) sysProcAttr() *syscall.SysProcAttr {
	// SIGKILL when we die without cleaning up (e.g. we are SIGKILLed): the
	// target must not outlive its guardian.
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func (o *linuxOS) watch(p *os.Process) bool {
	o.proc = p
	return p.WithHandle(func(uintptr) {}) == nil
}

func (o *linuxOS) wait() exitInfo {
	st, err := o.proc.Wait()
	return exitInfo{state: st, err: err, at: time.Now().UTC()}
}

// signal sends sig through the pidfd (Signal returns os.ErrProcessDone once
// the child is reaped, so it cannot hit a reused pid), only while alive.
func (o *linuxOS) signal(sig syscall.Signal) error {
	if !o.alive() {
		return errChildGone
	}
	err := o.proc.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return errChildGone // reaped in between: nothing was sent
	}
	return err
}

// alive asks the kernel, without reaping, whether the direct child has
// exited. A signal to an exited-but-unreaped child also succeeds, so this is
// what lets a SignalFact say the signal hit a live process.
func (o *linuxOS) alive() bool {
	alive := true
	err := o.proc.WithHandle(func(fd uintptr) {
		var info unix.Siginfo
		if e := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil); e == nil {
			// With WNOHANG the kernel leaves si_signo zero when no child
			// is waitable; SIGCHLD there means it has exited.
			alive = info.Signo == 0
		} else {
			alive = false // ECHILD: already reaped by our reaper
		}
	})
	if errors.Is(err, os.ErrProcessDone) {
		return false
	}
	return alive
}
