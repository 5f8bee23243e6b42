package runtime

import (
	"bytes"
	"sync"

	"github.com/leaseledger/leaseledger/events"
)

// Server stderr. A failing server is debugged from its stderr, so the
// runtime keeps it: per lease, the last MaxStderrBytes in a ring buffer the
// host reads with Manager.Stderr (older bytes are dropped and counted), and
// optionally every line streamed to Options.StderrLog. Stderr is provider
// text: it never enters an event or an error.

// MaxStderrBytes bounds the stderr kept per lease; older bytes are dropped
// (and counted) first.
const MaxStderrBytes = 64 << 10

// MaxStderrLineBytes bounds one line handed to Options.StderrLog: a longer
// line is delivered in pieces of this size.
const MaxStderrLineBytes = 4 << 10

// stderrRing keeps the last MaxStderrBytes of a child's stderr and the
// partial line not yet handed to the log. The guardian's reader goroutine
// writes it; the host reads it concurrently (Manager.Stderr).
type stderrRing struct {
	mu    sync.Mutex
	buf   []byte // MaxStderrBytes, allocated at the first write
	w     int    // next write position in buf
	total int64  // bytes ever written

	lineMu sync.Mutex
	line   []byte // bytes after the last newline, at most MaxStderrLineBytes
}

// write appends p, dropping the oldest bytes beyond MaxStderrBytes.
func (r *stderrRing) write(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buf == nil {
		r.buf = make([]byte, MaxStderrBytes)
	}
	r.total += int64(len(p))
	if len(p) >= len(r.buf) {
		copy(r.buf, p[len(p)-len(r.buf):])
		r.w = 0
		return
	}
	n := copy(r.buf[r.w:], p)
	if n < len(p) {
		copy(r.buf, p[n:])
	}
	r.w = (r.w + len(p)) % len(r.buf)
}

// snapshot returns a copy of the kept bytes, oldest first, and how many
// bytes were dropped before them.
func (r *stderrRing) snapshot() ([]byte, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total <= int64(len(r.buf)) {
		return append([]byte(nil), r.buf[:r.total]...), 0
	}
	out := make([]byte, 0, len(r.buf))
	out = append(out, r.buf[r.w:]...)
	out = append(out, r.buf[:r.w]...)
	return out, r.total - int64(len(r.buf))
}

// lines hands every complete line of p (after the partial line kept from
// earlier writes) to emit, in pieces of at most MaxStderrLineBytes, and
// keeps the rest for the next write or flush.
func (r *stderrRing) lines(p []byte, emit func([]byte)) {
	r.lineMu.Lock()
	defer r.lineMu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			r.keepPartial(p, emit)
			return
		}
		r.keepPartial(p[:i], emit)
		emit(r.line)
		r.line = r.line[:0]
		p = p[i+1:]
	}
}

// keepPartial appends p to the partial line, emitting full-size pieces.
func (r *stderrRing) keepPartial(p []byte, emit func([]byte)) {
	for len(r.line)+len(p) > MaxStderrLineBytes {
		n := MaxStderrLineBytes - len(r.line)
		r.line = append(r.line, p[:n]...)
		emit(r.line)
		r.line, p = r.line[:0], p[n:]
	}
	r.line = append(r.line, p...)
}

// flush hands a final partial line to emit.
func (r *stderrRing) flush(emit func([]byte)) {
	r.lineMu.Lock()
	defer r.lineMu.Unlock()
	if len(r.line) > 0 {
		emit(r.line)
		r.line = r.line[:0]
	}
}

// stderrSink is the guardian.Spec.Stderr of a lease: it keeps the bytes
// and streams lines to Options.StderrLog. It never blocks on the runtime
// (the host's log function aside) and never fails.
type stderrSink struct{ l *lease }

// Write implements io.Writer.
func (s stderrSink) Write(p []byte) (int, error) {
	s.l.stderr.write(p)
	if log := s.l.m.opts.StderrLog; log != nil {
		s.l.stderr.lines(p, s.l.logLine)
	}
	return len(p), nil
}

// logLine hands one line to Options.StderrLog.
func (l *lease) logLine(line []byte) {
	l.m.opts.StderrLog(l.key.session, l.key.server, l.activation, line)
}

// flushStderr hands the child's last, unterminated stderr line to
// Options.StderrLog once its session ended.
func (l *lease) flushStderr() {
	if l.m.opts.StderrLog != nil {
		l.stderr.flush(l.logLine)
	}
}

// Stderr returns the stderr kept for the current lease of server (a config
// name) for session — pass SharedSessionKey for a shared server's lease —
// with the oldest bytes first, and how many older bytes were dropped
// beyond MaxStderrBytes. With no such lease it returns nothing: a lease's
// stderr goes with it (stream it with Options.StderrLog to keep it).
func (m *Manager) Stderr(session, server string) ([]byte, int64, error) {
	id, err := ServerID(server)
	if err != nil || !events.ValidID(session) {
		return nil, 0, newErr("stderr", nil, ErrInvalidRequest, nil)
	}
	m.mu.Lock()
	l := m.leases[leaseKey{session, id}]
	m.mu.Unlock()
	if l == nil {
		return nil, 0, nil
	}
	b, dropped := l.stderr.snapshot()
	return b, dropped, nil
}
