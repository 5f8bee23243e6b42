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

// sigkillBit is SIGKILL's bit in /proc/<pid>/status's pending-signal masks.
const sigkillBit = 1 << (9 - 1)

// maxStatusBytes bounds one read of /proc/<pid>/status (about 1.5 KiB in
// practice); the fields the probe needs come first.
const maxStatusBytes = 4096

// procProbe reads the target's /proc/<pid>/status through one descriptor
// opened at the first probe and kept until the child is closed. It runs
// before every admission, so it avoids the path walk, open and close of a
// fresh read (most of its cost), and the descriptor pins the process: once
// the target is reaped, reads fail with ESRCH even if its pid is reused.
type procProbe struct {
	mu   sync.Mutex
	f    *os.File
	gone bool // the status could not be opened: the process was gone
	buf  [maxStatusBytes]byte
}

// dying reports whether the guardian's target is gone or on its way out:
// no longer in /proc, a zombie, or with a SIGKILL pending (killed from
// outside, not yet exited). The kernel marks a SIGKILL pending when kill(2)
// returns, while the process may still hold its stdin open for a while:
// a request written then would be lost with it, and the guardian reports
// the exit only after the reap. Checking before admission lets a call on a
// child killed while idle go to a fresh lease instead.
func (g *guardianChild) dying() bool { return g.probe.dying(g.s.TargetPID()) }

func (p *procProbe) dying(pid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil && !p.gone {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			p.gone = errors.Is(err, fs.ErrNotExist)
			return p.gone
		}
		p.f = f
	}
	if p.gone {
		return true
	}
	n, err := p.f.ReadAt(p.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		// ESRCH: the task behind the descriptor was reaped. Anything else
		// proves nothing; the checks after a failed call decide.
		return errors.Is(err, syscall.ESRCH)
	}
	b := p.buf[:n]
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

func (p *procProbe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f != nil {
		_ = p.f.Close()
		p.f = nil
	}
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
