//go:build linux || darwin

package helper

import (
	"errors"
	"os"
	"syscall"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// procOS is the operating system's part of a session: how the helper
// prepares itself, starts, reaps and signals the direct child. Each system
// with a helper implements it in its own file — Linux in proc_linux.go
// (child subreaper, parent-death signals, pidfd), macOS in proc_darwin.go
// (kqueue, the target's own process group) — and so does the tracker of
// the target's descendants (type descendants, see descendantTracker).
// Everything else is shared and so is tested on Linux for both: the
// protocol, the stdio relay (relay.go), the trigger rank (serve.go) and the
// numbered cleanup sequence and its receipt (cleanup.go).
type procOS interface {
	// prepare runs in Main before the hello and reports whether orphaned
	// descendants of the target reparent to the helper (Hello.Subreaper).
	prepare() (subreaper bool)
	// sysProcAttr is the target's start attributes.
	sysProcAttr() *syscall.SysProcAttr
	// watch takes the direct child just started and reports whether it is
	// held by a pidfd (Receipt.PIDFD). It runs before wait and signal.
	watch(p *os.Process) (pidfd bool)
	// wait blocks until the direct child has exited and reaps it: the one
	// and only reaper, run on its own goroutine.
	wait() exitInfo
	// signal sends sig to the exact direct child, never to a process that
	// reused its pid, and only while the child is unreaped and has not
	// exited; when it had, nothing is sent and the answer is errChildGone.
	signal(sig syscall.Signal) error
}

// errChildGone: procOS.signal sent nothing because the direct child had
// exited or been reaped.
var errChildGone = errors.New("direct child exited")

// descendantTracker is what the shared code uses of type descendants, which
// each system defines with its own notion of the target's descendants
// (Linux: orphans reparented to the helper; macOS: the members of the
// target's process group). Every method runs on the main goroutine.
type descendantTracker interface {
	// scan records the descendants found now, and returns them with their
	// state byte ('Z': exited, not yet reaped).
	scan() map[int]byte
	// poll is the session tick's check: a scan (and reap) when needed.
	poll()
	// reap collects the exit status of the descendants the helper may reap.
	reap()
	// killAll SIGKILLs the descendants (never the direct child, target).
	killAll(target int)
	// fill puts what was observed into the receipt.
	fill(rc *wire.Receipt)
}

var _ descendantTracker = (*descendants)(nil)
