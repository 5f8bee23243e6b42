//go:build linux

package runtime

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// sigkillBit is SIGKILL's bit in /proc/<pid>/status's pending-signal masks
// and in /proc/<pid>/stat's pending-signal field.
const sigkillBit = 1 << (9 - 1)

// pfExiting is PF_EXITING in /proc/<pid>/stat's flags field: the task has
// started exiting (set early in do_exit, before its files are closed).
const pfExiting = 0x4

// maxStatusBytes bounds one read of /proc/<pid>/status (about 1.5 KiB in
// practice; stat is about 300 bytes); the fields the probe needs come
// first.
const maxStatusBytes = 4096

// procProbe reads the target's /proc/<pid>/stat, and /proc/<pid>/status
// when stat cannot decide, each through one descriptor kept until the child
// is closed. It runs before every admission, so it avoids the path walk,
// open and close of a fresh read, and the descriptors pin the process:
// once the target is reaped, reads fail with ESRCH even if its pid is
// reused.
//
// Both are opened together on the first probe, then stat is read through
// its descriptor and must name the helper as the parent: the helper is
// the target's one and only reaper, so while the target is unreaped its
// pid is the helper's child, and a pid reaped and reused before the open
// (by anything but another child of the helper) is seen as gone instead of
// pinned (TestProcProbeRejectsAnotherParent). The stat read after both
// opens succeeding proves the process was unreaped when status was opened,
// so both descriptors name the same process.
//
// stat is the fast tier (the kernel renders about a fifth of status's text,
// measured 4.5 µs against 10–12 µs per read on a Node.js target): it
// decides when the target is a zombie or dead, has SIGKILL pending on its
// main thread, or sleeps ('S') with none of those and is not exiting.
// Anything else (running, in disk sleep, stopped, exiting (PF_EXITING),
// unparsable) falls back to status, the reference probe, which also sees a
// SIGKILL pending on the whole process (ShdPnd). Wherever stat decides, it
// says what status says. An idle stdio server's main thread sleeps, so an
// admission normally reads stat alone (TestProcProbeTiersAgree).
//
// Concurrent admissions share reads: a caller that arrives while a read is
// in progress waits for it to end and takes the verdict of the next read,
// one that starts after it arrived (made by the first such caller for all
// of them), never the verdict of a read that started before it arrived
// (TestProcProbeSharesOnlyLaterReads). A verdict is thus always as recent
// as the caller's own read would be, and a busy target (running, so stat
// falls back to status: two reads) is read about once per probe duration
// instead of once per admission.
type procProbe struct {
	// share orders the callers (see dying); mu is held by the one reading.
	share sync.Mutex
	cond  *sync.Cond // on share, created on first wait
	// started and finished number the reads; reading is true while one is
	// in progress; last is the verdict of read number finished.
	started, finished uint64
	reading, last     bool
	// waiting counts callers waiting for a later read (tests).
	waiting int
	// afterRead, when set (tests), runs after each read, before its
	// verdict is published.
	afterRead func()

	mu     sync.Mutex
	stat   *os.File
	status *os.File
	gone   bool // the process was gone, or not the helper's child, at the open
	buf    [maxStatusBytes]byte
	// statusReads counts fallbacks to status (tests).
	statusReads int
}

// dying reports whether the guardian's target is gone or on its way out:
// no longer in /proc, a zombie, or with a SIGKILL pending (killed from
// outside, not yet exited). The kernel marks a SIGKILL pending when kill(2)
// returns, while the process may still hold its stdin open for a while:
// a request written then would be lost with it, and the guardian reports
// the exit only after the reap. Checking before admission lets a call on a
// child killed while idle go to a fresh lease instead.
func (g *guardianChild) dying() bool { return g.probe.dying(g.s.TargetPID(), g.s.HelperPID()) }

// dying probes pid, which must be a child of parent, with a read that
// starts after the call: its own, or one shared with concurrent callers
// (see procProbe).
func (p *procProbe) dying(pid, parent int) bool {
	p.share.Lock()
	// Reads numbered need or later start after this point.
	need := p.started + 1
	for {
		if p.finished >= need {
			v := p.last
			p.share.Unlock()
			return v
		}
		if !p.reading {
			p.reading = true
			p.started++
			n := p.started
			p.share.Unlock()
			v := p.read1(pid, parent)
			if p.afterRead != nil {
				p.afterRead()
			}
			p.share.Lock()
			p.finished, p.last, p.reading = n, v, false
			if p.cond != nil {
				p.cond.Broadcast()
			}
			p.share.Unlock()
			return v
		}
		if p.cond == nil {
			p.cond = sync.NewCond(&p.share)
		}
		p.waiting++
		p.cond.Wait()
		p.waiting--
	}
}

// read1 is one read of the probe (stat, then status when stat cannot
// decide).
func (p *procProbe) read1(pid, parent int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok, dead := p.readStat(pid, parent)
	if !ok {
		return dead
	}
	switch statVerdict(b) {
	case verdictDying:
		return true
	case verdictAlive:
		return false
	}
	p.statusReads++
	return p.statusDying()
}

// readStat reads stat, opening both files on first use. ok false means no
// content: dead then says whether that proves the process gone (it was not
// there or not parent's child at the open, or was reaped behind the
// descriptor); any other failure proves nothing, and the checks after a
// failed call decide.
func (p *procProbe) readStat(pid, parent int) (b []byte, ok, dead bool) {
	if p.gone {
		return nil, false, true
	}
	if p.stat == nil {
		dir := "/proc/" + strconv.Itoa(pid) + "/"
		st, err := os.Open(dir + "stat")
		if err != nil {
			p.gone = errors.Is(err, fs.ErrNotExist)
			return nil, false, p.gone
		}
		sts, err := os.Open(dir + "status")
		if err != nil {
			_ = st.Close()
			p.gone = errors.Is(err, fs.ErrNotExist)
			return nil, false, p.gone
		}
		p.stat, p.status = st, sts
		b, ok, dead = p.read(p.stat)
		if ok && statPPID(b) != parent {
			p.gone = true // a reused pid: the target was reaped before the open
			return nil, false, true
		}
		return b, ok, dead
	}
	return p.read(p.stat)
}

// read reads the whole of an open /proc file (see readStat for ok, dead).
func (p *procProbe) read(f *os.File) (b []byte, ok, dead bool) {
	n, err := f.ReadAt(p.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, errors.Is(err, syscall.ESRCH)
	}
	return p.buf[:n], true, false
}

// statusDying is the reference probe: the status file's state, and SIGKILL
// in the main thread's (SigPnd) or the process's (ShdPnd) pending set.
func (p *procProbe) statusDying() bool {
	if p.status == nil {
		return p.gone
	}
	b, ok, dead := p.read(p.status)
	if !ok {
		return dead
	}
	return statusSaysDying(b)
}

// statusSaysDying decides from a status file's content.
func statusSaysDying(b []byte) bool {
	if v := statusField(b, "State:"); len(v) > 0 && (v[0] == 'Z' || v[0] == 'X') {
		return true
	}
	for _, k := range [...]string{"SigPnd:", "ShdPnd:"} {
		if m, err := strconv.ParseUint(string(statusField(b, k)), 16, 64); err == nil && m&sigkillBit != 0 {
			return true
		}
	}
	return false
}

// verdict is what the stat tier concludes.
type verdict int

const (
	verdictUnsure verdict = iota // read status
	verdictDying
	verdictAlive
)

// Field positions in /proc/<pid>/stat counted from the state (field 3),
// the first after the parenthesised command name.
const (
	statFlagsAt  = 9 - 3
	statSignalAt = 31 - 3
)

// statVerdict decides from a stat file's content (see procProbe).
func statVerdict(b []byte) verdict {
	fields := statFields(b)
	if len(fields) <= statSignalAt || len(fields[0]) != 1 {
		return verdictUnsure
	}
	state := fields[0][0]
	flags, err1 := strconv.ParseUint(string(fields[statFlagsAt]), 10, 64)
	sig, err2 := strconv.ParseUint(string(fields[statSignalAt]), 10, 64)
	switch {
	case state == 'Z' || state == 'X' || state == 'x':
		return verdictDying
	case err1 != nil || err2 != nil:
		return verdictUnsure
	case sig&sigkillBit != 0:
		return verdictDying
	case flags&pfExiting != 0:
		// Exiting, but not necessarily dying as status says it: a process
		// that exits on its own is running with no SIGKILL pending until
		// it becomes a zombie. Status decides, so the tiers agree.
		return verdictUnsure
	case state == 'S':
		return verdictAlive
	}
	return verdictUnsure
}

// exiting reports, from stat alone, whether the target's exit has begun:
// it is gone (reaped, the descriptor says so), a zombie, or exiting
// (PF_EXITING, set as soon as the kernel's exit path starts, before the
// process's files are closed, so before its stdout reaches EOF).
func (p *procProbe) exiting(pid, parent int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok, dead := p.readStat(pid, parent)
	if !ok {
		return dead
	}
	return statExiting(b)
}

// statExiting decides exiting from a stat file's content.
func statExiting(b []byte) bool {
	fields := statFields(b)
	if len(fields) <= statFlagsAt || len(fields[0]) != 1 {
		return false
	}
	if s := fields[0][0]; s == 'Z' || s == 'X' || s == 'x' {
		return true
	}
	flags, err := strconv.ParseUint(string(fields[statFlagsAt]), 10, 64)
	return err == nil && flags&pfExiting != 0
}

// statFields are a stat file's fields from the state (field 3) on: the
// command name before them may hold spaces and parentheses, so they start
// after the last ')'. None when there is no ')'.
func statFields(b []byte) [][]byte {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return bytes.Fields(b[i+1:])
}

// statPPID is the parent pid in a stat file's content, -1 when unparsable.
func statPPID(b []byte) int {
	fields := statFields(b)
	if len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return -1
	}
	return ppid
}

func (p *procProbe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range []*os.File{p.stat, p.status} {
		if f != nil {
			_ = f.Close()
		}
	}
	p.stat, p.status = nil, nil
	p.gone = true
}

// statusField returns the value of the "Key:" line of a status file, spaces
// trimmed; nil when absent.
func statusField(b []byte, key string) []byte {
	i := bytes.Index(b, []byte("\n"+key))
	if i < 0 {
		if !bytes.HasPrefix(b, []byte(key)) {
			return nil
		}
		i = -1
	}
	v := b[i+1+len(key):]
	if j := bytes.IndexByte(v, '\n'); j >= 0 {
		v = v[:j]
	}
	return bytes.TrimSpace(v)
}
