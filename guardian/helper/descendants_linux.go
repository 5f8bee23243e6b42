//go:build linux

package helper

import (
	"bytes"
	"os"
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
}

func newDescendants(self, target int) descendants {
	return descendants{self: self, target: target, seen: map[int]bool{}, live: map[int]bool{}}
}

// scan lists /proc for children of the helper other than the direct child.
// It returns the pids found with their state byte.
func (d *descendants) scan() map[int]byte {
	found := map[int]byte{}
	dir, err := os.Open("/proc")
	if err != nil {
		return found
	}
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == d.target || pid == d.self {
			continue
		}
		ppid, state, ok := procStat(pid)
		if !ok || ppid != d.self {
			continue
		}
		found[pid] = state
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
