//go:build darwin

package helper

import (
	"errors"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// darwinOS is procOS on macOS, which has no child subreaper, no
// parent-death signal and no pidfd. In their place:
//
//   - the direct child's exit is observed with kqueue (EVFILT_PROC,
//     NOTE_EXIT), which does not reap it; the reaper reaps only after that
//     event, holding mu, and signal sends only while holding mu and only if
//     the child is unreaped, so a signal can never reach a process that
//     reused the child's pid (an unreaped child keeps its pid);
//   - the target starts in a process group of its own (Setpgid: its pgid is
//     its pid), so its descendants are the members of that group (see
//     descendants below);
//   - the host's death is seen as EOF on the helper's stdin or a changed
//     getppid on the tick (serve), as on Linux without the signal.
//
// The helper's own death does not take the target with it (no
// PR_SET_PDEATHSIG): the target sees EOF on its stdin, whose only writer
// was the helper, and a stdio server exits on that.
type darwinOS struct {
	proc *os.Process
	kq   int // kqueue with the child's NOTE_EXIT registered; -1 if none

	// mu is held by wait while it reaps and by signal while it checks and
	// sends, so the two never overlap.
	mu     sync.Mutex
	reaped bool        // guarded by mu
	exited atomic.Bool // NOTE_EXIT arrived (the reaper is about to reap)
}

func newProcOS() procOS { return &darwinOS{kq: -1} }

// prepare has nothing to set up: orphans of the target reparent to launchd,
// never to the helper.
func (o *darwinOS) prepare() bool { return false }

func (o *darwinOS) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// watch registers the child's NOTE_EXIT. The registration fails with ESRCH
// for a child that has exited already (a zombie until wait reaps it), which
// is then known to have exited.
func (o *darwinOS) watch(p *os.Process) bool {
	o.proc = p
	kq, err := unix.Kqueue()
	if err != nil {
		return false // awaitExit then polls the process table
	}
	var ev unix.Kevent_t
	unix.SetKevent(&ev, p.Pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	ev.Fflags = unix.NOTE_EXIT
	if _, err := unix.Kevent(kq, []unix.Kevent_t{ev}, nil, nil); err != nil {
		_ = unix.Close(kq)
		if errors.Is(err, unix.ESRCH) {
			o.exited.Store(true) // it can only be our zombie: it is unreaped
		}
		return false // otherwise awaitExit polls the process table
	}
	o.kq = kq
	return false
}

// wait reaps the child once it is known to have exited, holding mu: as
// the child has exited, the lock is held only for a wait4 that returns at
// once, and signal, which waits for it, then sends nothing.
func (o *darwinOS) wait() exitInfo {
	o.awaitExit()
	o.exited.Store(true)
	o.mu.Lock()
	st, err := o.proc.Wait()
	o.reaped = true
	o.mu.Unlock()
	return exitInfo{state: st, err: err, at: time.Now().UTC()}
}

// exitPoll is how often awaitExit checks the process table when kqueue
// could not be used.
const exitPoll = 10 * time.Millisecond

// awaitExit returns once the direct child has exited, without reaping it:
// at its NOTE_EXIT, or at once when it had exited before watch, or (kqueue
// unavailable) when the process table shows it a zombie. It never returns
// for a running child: the reaper must not take mu, which signal needs,
// while the child runs.
func (o *darwinOS) awaitExit() {
	if o.exited.Load() {
		return
	}
	if o.kq >= 0 {
		defer unix.Close(o.kq)
		events := make([]unix.Kevent_t, 1)
		for {
			n, err := unix.Kevent(o.kq, nil, events, nil)
			if n == 1 {
				return
			}
			if err != nil && err != unix.EINTR {
				break // kqueue failed: fall back to the process table
			}
		}
	}
	for !zombie(o.proc.Pid) {
		time.Sleep(exitPoll)
	}
}

// signal sends sig by pid while holding mu: the child is unreaped, so the
// pid is still its own. It sends nothing once NOTE_EXIT arrived or the
// process table says the child is a zombie (a signal to one "succeeds").
func (o *darwinOS) signal(sig syscall.Signal) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reaped || o.exited.Load() || zombie(o.proc.Pid) {
		return errChildGone
	}
	err := o.proc.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return errChildGone
	}
	return err
}

// sZomb is p_stat of an exited, unreaped process (<sys/proc.h>).
const sZomb = 5

// zombie reports whether pid is an exited process not yet reaped.
func zombie(pid int) bool {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	return err == nil && kp.Proc.P_pid == int32(pid) && kp.Proc.P_stat == sZomb
}

// killRounds bounds how many list-kill rounds killAll runs: a killed
// member's exit can race a fork of another.
const killRounds = 8

// killWait bounds how long one kill round waits for the killed members to
// leave the group (their parents, not the helper, reap them).
const killWait = 200 * time.Millisecond

// descendants tracks the members of the target's process group other than
// the target: its children and their children, as long as none moved to
// another group or session (a daemon that calls setsid leaves it, as one
// does on Linux by reparenting to another subreaper). They are not the
// helper's children — orphans reparent to launchd — so the helper never
// reaps them (DescendantsReaped stays empty on macOS) and kills them by
// pid or by group.
//
// Why a kill by pid or group is believed safe here, without the guarantee
// a child gives on Linux: a member is killed only after the listing just
// made found it alive in the target's group, and a process group's id
// cannot be taken by a new process while the group has a member. What
// remains is the window between that listing and kill(2), in which the
// member could exit, be reaped by its parent and its pid be reused.
type descendants struct {
	self, target int // target: the direct child, whose pid is the group's id
	seen         map[int]bool
	order        []int
	killed       []int
	dropped      int
}

func newDescendants(self, target int) descendants {
	return descendants{self: self, target: target, seen: map[int]bool{}}
}

// members lists the target's process group with each member's state byte
// ('Z' for a zombie), the target included.
func (d *descendants) members() map[int]byte {
	if d.target <= 0 {
		return nil
	}
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.pgrp", d.target)
	if err != nil {
		// Every process, filtered by group: what the pgrp query returns.
		if procs, err = unix.SysctlKinfoProcSlice("kern.proc.all"); err != nil {
			return nil
		}
	}
	found := map[int]byte{}
	for i := range procs {
		p := &procs[i]
		if int(p.Eproc.Pgid) != d.target {
			continue
		}
		state := byte('R')
		if p.Proc.P_stat == sZomb {
			state = 'Z'
		}
		found[int(p.Proc.P_pid)] = state
	}
	return found
}

// scan records the members of the target's group other than the target
// and the helper, and returns them with their state byte.
func (d *descendants) scan() map[int]byte {
	found := d.members()
	delete(found, d.target)
	delete(found, d.self)
	for _, pid := range slices.Sorted(maps.Keys(found)) {
		if !d.seen[pid] {
			if len(d.order) >= wire.MaxDescendants {
				d.dropped++
				continue
			}
			d.seen[pid] = true
			d.order = append(d.order, pid)
		}
	}
	return found
}

// poll scans on every tick: no SIGCHLD announces a group member, since
// none is the helper's child.
func (d *descendants) poll() { d.scan() }

// reap has nothing to do: the helper is no member's parent.
func (d *descendants) reap() {}

// killAll SIGKILLs every live member of the target's group other than the
// target, repeating while members remain, within killRounds. While the
// target is alive (a kill-descendants request during the session) each
// member is killed by pid, so the target is spared; once it has exited, the
// whole group is killed with one kill(-pgid), which also reaches a member
// forked after the listing.
func (d *descendants) killAll(target int) {
	for range killRounds {
		all := d.members()
		targetAlive := all[target] == 'R'
		delete(all, target)
		delete(all, d.self)
		d.scan()
		var live []int
		for pid, state := range all {
			if state != 'Z' {
				live = append(live, pid)
			}
		}
		if len(live) == 0 {
			return
		}
		slices.Sort(live)
		if targetAlive {
			for _, pid := range live {
				if unix.Kill(pid, unix.SIGKILL) == nil {
					d.noteKilled(pid)
				}
			}
		} else if unix.Kill(-target, unix.SIGKILL) == nil {
			for _, pid := range live {
				d.noteKilled(pid)
			}
		}
		deadline := time.Now().Add(killWait)
		for time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			if !d.anyLive(target) {
				break
			}
		}
	}
}

// anyLive reports whether the target's group has a live member other than
// the target.
func (d *descendants) anyLive(target int) bool {
	for pid, state := range d.members() {
		if pid != target && pid != d.self && state != 'Z' {
			return true
		}
	}
	return false
}

func (d *descendants) noteKilled(pid int) {
	if !slices.Contains(d.killed, pid) {
		d.killed = append(d.killed, pid)
	}
}

func (d *descendants) fill(rc *wire.Receipt) {
	rc.DescendantsSeen = slices.Clone(d.order)
	rc.DescendantsKilled = slices.Clone(d.killed)
	rc.DescendantsDropped = d.dropped
}
