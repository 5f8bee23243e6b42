//go:build linux

package helper

import (
	"errors"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// childSource is how the tracker lists candidate children.
type childSource int

const (
	sourceUnknown  childSource = iota // not probed yet
	sourceChildren                    // /proc/<self>/task/<tid>/children works
	sourceProc                        // no children file: scan all of /proc
)

// childrenListings bounds how many listings childPIDs takes while waiting
// for two consecutive ones to agree; past it the caller falls back to the
// full scan for that call.
const childrenListings = 4

// childrenBufLen is the first size of the buffer readChildren reads a
// children file into; it grows when a file does not fit.
const childrenBufLen = 4 << 10

var (
	// errNoChildrenFile: the main thread's children file does not exist,
	// which means the kernel lacks CONFIG_PROC_CHILDREN.
	errNoChildrenFile = errors.New("no /proc children file")
	// errUnsettled: consecutive listings kept differing.
	errUnsettled = errors.New("children listings did not settle")
)

// childPIDs lists the helper's children from the children files of all its
// threads, in pid order.
//
// A child attaches to a thread, not to the process: the one that forked it,
// or, for an orphan reparented to the subreaper, its first live thread; a
// thread that exits hands its children to another one. So every thread's
// file is read.
//
// The kernel walks a children list without holding it between entries, so
// a walk that crosses a concurrent removal (the direct child reaped by its
// reaper goroutine, a thread exiting) can skip a child that is there all
// along — which the full /proc scan never does. A skip needs an entry the
// walk already printed to leave the list; that entry is then missing from
// the next listing, or the skipped child is in it. So a listing counts only
// when the next one is the same; childPIDs lists until two consecutive
// listings agree, at most childrenListings times, else errUnsettled.
func (d *descendants) childPIDs() ([]int, error) {
	prev, err := d.listChildren(nil)
	if err != nil {
		return nil, err
	}
	var cur []int
	for range childrenListings - 1 {
		if cur, err = d.listChildren(cur[:0]); err != nil {
			return nil, err
		}
		if slices.Equal(prev, cur) {
			return cur, nil
		}
		prev, cur = cur, prev
	}
	return nil, errUnsettled
}

// listChildren appends to dst, sorted and without duplicates, the pids in
// the children files of every thread of the helper: one listing.
func (d *descendants) listChildren(dst []int) ([]int, error) {
	task := "/proc/" + strconv.Itoa(d.self) + "/task/"
	dir, err := os.Open(task)
	if err != nil {
		return nil, err
	}
	tids, err := dir.Readdirnames(-1)
	_ = dir.Close()
	if err != nil {
		return nil, err
	}
	self := strconv.Itoa(d.self)
	for _, tid := range tids {
		b, err := d.readChildren(task + tid + "/children")
		switch {
		case errors.Is(err, unix.ENOENT) && tid == self:
			// The main thread lives as long as the helper (Main locks it),
			// so its file is missing only when the kernel has none.
			return nil, errNoChildrenFile
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH):
			continue // the thread exited; its children moved to another one
		case err != nil:
			return nil, err
		}
		dst = appendPIDs(dst, b)
	}
	slices.Sort(dst)
	return slices.Compact(dst), nil
}

// readChildren reads the file at path into d.buf with as few read calls as
// possible: the kernel restarts its walk of the list at each read after the
// first, by position, which is where concurrent removals make it skip.
func (d *descendants) readChildren(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if d.buf == nil {
		d.buf = make([]byte, childrenBufLen)
	}
	n := 0
	for {
		if n == len(d.buf) {
			d.buf = slices.Grow(d.buf, len(d.buf))[:2*len(d.buf)]
		}
		m, err := unix.Read(fd, d.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return d.buf[:n], nil
		}
		n += m
	}
}

// appendPIDs appends the pids of a children file ("12 345 ") to dst.
func appendPIDs(dst []int, b []byte) []int {
	pid, digits := 0, false
	for _, c := range b {
		if c >= '0' && c <= '9' {
			pid, digits = pid*10+int(c-'0'), true
			continue
		}
		if digits {
			dst = append(dst, pid)
		}
		pid, digits = 0, false
	}
	if digits {
		dst = append(dst, pid)
	}
	return dst
}
