//go:build linux

package helper

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// killRounds bounds how many scan-kill-reap rounds killAll runs: killing an
// orphan can orphan its own children, which then reparent to us in turn.
const killRounds = 8

// reapWait bounds how long one kill round waits for killed pids to become
// reapable.
const reapWait = 200 * time.Millisecond

// descendants tracks processes that reparented to the helper because it is
// their child subreaper. Every method runs on the helper's main goroutine.
//
// Why kill(2) by pid is safe here: a pid listed with our pid as parent is our
// child, and a child's pid cannot be reused until its parent reaps it — and
// only this tracker reaps them, by exact pid (never Wait4(-1), which would
// steal the direct child's status from its one reaper).
type descendants struct {
	self, target int
	seen         map[int]bool
	order        []int
	live         map[int]bool // our children other than the target, not yet reaped
	killed       []int
	reaped       []int
	dropped      int

	source childSource    // how candidates lists children
	buf    []byte         // reused by readChildren
	chld   chan os.Signal // SIGCHLD notifications for poll; nil before the first poll
}

func newDescendants(self, target int) descendants {
	return descendants{self: self, target: target, seen: map[int]bool{}, live: map[int]bool{}}
}

// scan finds the helper's children other than the direct child, records
// them, and returns the pids found with their state byte.
//
// Candidates come from the children files of the helper's threads (see
// childPIDs), or from a listing of all of /proc when those are missing or
// did not settle; either way each candidate counts only if its
// /proc/<pid>/stat names the helper as its parent, as in the full scan.
func (d *descendants) scan() map[int]byte {
	found := d.find(d.candidates())
	for _, pid := range slices.Sorted(maps.Keys(found)) {
		d.live[pid] = true
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

// find keeps the candidates that are children of the helper other than the
// direct child, with their state byte. It records nothing.
func (d *descendants) find(candidates []int) map[int]byte {
	found := map[int]byte{}
	for _, pid := range candidates {
		if pid == d.target || pid == d.self {
			continue
		}
		if ppid, state, ok := procStat(pid); ok && ppid == d.self {
			found[pid] = state
		}
	}
	return found
}

// candidates lists pids that may be children of the helper: its threads'
// children when the kernel provides the files (probed once, see
// childSource), else every process in /proc.
func (d *descendants) candidates() []int {
	if fullScanBaseline || d.source == sourceProc {
		return procPIDs()
	}
	pids, err := d.childPIDs()
	switch {
	case err == nil:
		d.source = sourceChildren
		return pids
	case d.source == sourceUnknown && errors.Is(err, errNoChildrenFile):
		d.source = sourceProc // CONFIG_PROC_CHILDREN is off: for good
	}
	return procPIDs()
}

// procPIDs lists every process in /proc: the full scan, whose cost grows
// with the number of processes on the host.
func procPIDs() []int {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat reads the parent pid and state of pid from /proc/<pid>/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseStat(b)
}

// parseStat extracts ppid and state from the contents of /proc/<pid>/stat.
func parseStat(b []byte) (ppid int, state byte, ok bool) {
	// "pid (comm) S ppid ..."; comm may contain spaces and ')', so cut at
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	p, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, false
	}
	return p, f[0][0], true
}

// poll is the session's periodic descendant check (serve's tick): it scans
// and reaps only when a child changed state since the last poll, and always
// on the first one.
//
// Nothing else needs a scan while the session runs. Every child of ours
// other than the direct child stays ours until we reap it, and we reap only
// what a scan found, so each one is still there for the scans of the
// cleanup sequence (step 7 at the latest) to record; what cannot wait is
// reaping the ones that exit, and each exit sends us SIGCHLD — an orphan
// that reparents already dead too, and every orphan reparents with
// SIGCHLD as its exit signal. The notification is registered before the
// first scan, so a child that exits before it is found by that scan.
func (d *descendants) poll() {
	if d.chld == nil {
		d.chld = make(chan os.Signal, 1)
		signal.Notify(d.chld, unix.SIGCHLD)
	} else if !fullScanBaseline {
		select {
		case <-d.chld:
		default:
			return // no child changed state: nothing to record or reap
		}
	}
	d.scan()
	d.reap()
}

// reap collects the exit status of exited descendants, by exact pid.
func (d *descendants) reap() {
	for pid := range d.live {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		switch {
		case wpid == pid:
			delete(d.live, pid)
			d.reaped = append(d.reaped, pid)
		case err == unix.ECHILD:
			delete(d.live, pid) // not (or no longer) our child
		}
	}
}

// killAll SIGKILLs every orphaned descendant and reaps it, repeating while
// new orphans appear, within killRounds.
func (d *descendants) killAll(target int) {
	for range killRounds {
		found := d.scan()
		sent := 0
		for pid, state := range found {
			if pid == target || state == 'Z' {
				continue // zombies are already dead; reap collects them
			}
			if unix.Kill(pid, unix.SIGKILL) == nil {
				if !slices.Contains(d.killed, pid) {
					d.killed = append(d.killed, pid)
				}
				sent++
			}
		}
		deadline := time.Now().Add(reapWait)
		for {
			d.reap()
			if len(d.live) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if sent == 0 && len(d.live) == 0 {
			return
		}
	}
}

func (d *descendants) fill(rc *wire.Receipt) {
	rc.DescendantsSeen = slices.Clone(d.order)
	rc.DescendantsKilled = slices.Clone(d.killed)
	rc.DescendantsReaped = slices.Clone(d.reaped)
	rc.DescendantsDropped = d.dropped
}
