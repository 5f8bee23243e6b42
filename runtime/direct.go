package runtime

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
)

// This file is the direct child: an entry's "cleanup": "direct". The host
// starts the server itself — no helper, no receipt — over pipes it owns,
// in a process group of its own (unix), and ends it with the guardian's
// sequence where it applies: stdin closed, EOFGrace, TERM to that exact
// child (its group), TermGrace, KILL, KillGrace, then PipeGrace for its
// stdout and stderr, all within the lease's one close budget. What the
// host saw — its closes, its signals, its own wait status — is recorded as
// lease.child_closed; descendants are unknown, and nothing confirms the
// child's release: its activation's verdict is unverified at best.

// errDirectNotFound, errDirectPermission and errDirectStart are a direct
// launch's failures in our own words (an exec error quotes the command,
// which is config text).
var (
	errDirectNotFound   = errors.New("runtime: the command was not found")
	errDirectPermission = errors.New("runtime: the command could not be executed (permission)")
	errDirectStart      = errors.New("runtime: the host could not start the command")
)

// directGraces are the close sequence's graces (the guardian defaults
// where Options leaves one zero).
type directGraces struct{ eof, term, kill, pipe time.Duration }

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// directReadBytes is one read of a direct child's stdout or stderr: the
// stdout pump hands each read to the MCP connection's reader before the
// next (an unbuffered pipe, so a silent reader stalls the child, never
// memory), stderr goes to the lease's bounded ring.
const directReadBytes = 32 << 10

// directChild is a child the host started itself.
type directChild struct {
	cmd    *exec.Cmd
	pid    int
	graces directGraces
	stdin  *os.File // the host's write end of the child's stdin
	stdout *os.File // the host's read ends
	stderr *os.File
	// pr is what the MCP connection reads: the stdout pump writes each
	// read into pw until the stream is detached, then discards.
	pr       *io.PipeReader
	pw       *io.PipeWriter
	detached atomic.Bool

	// sigMu orders signals against the child's exit: exited is set under
	// it before the child is reaped (linux: waitid WNOWAIT; elsewhere
	// right after the reap), and a signal is sent only under it while
	// exited is false, so it reaches that exact child (its pid, and its
	// group's id, cannot be reused while it is unreaped).
	sigMu  sync.Mutex
	exited bool

	waitDone chan struct{} // closed once the host's wait returned
	state    *os.ProcessState
	reapedAt time.Time

	outDone, errDone       chan struct{} // closed at EOF or the forced close
	outClosedAt, errClosed time.Time
	outForced, errForced   atomic.Bool

	probe procProbe // the child's liveness (linux), read before each admission

	closeOnce sync.Once
	res       directResult
}

// directResult is what the host observed closing a direct child.
type directResult struct {
	ExitedBeforeClose bool
	StdinClosedAt     time.Time
	TermSentAt        time.Time
	KillSentAt        time.Time
	GroupSignalled    bool
	Reaped            bool
	ReapedAt          time.Time
	Exit              ExitStatus
	StdoutClosedAt    time.Time
	StderrClosedAt    time.Time
	StdoutForced      bool
	StderrForced      bool
	// Deadline: the close budget ended before the host saw the child's
	// exit.
	Deadline bool
}

// launchDirect starts l's command directly ("cleanup": "direct").
func (m *Manager) launchDirect(l *lease) (*directChild, error) {
	cmd := exec.Command(l.cfg.Command, l.cfg.Args...)
	if cmd.Err != nil {
		return nil, directLaunchErr(cmd.Err)
	}
	cmd.Env, cmd.Dir = l.cfg.envList(), l.cfg.Cwd
	var files [6]*os.File // stdin r/w, stdout r/w, stderr r/w
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				_ = f.Close()
			}
		}
	}
	for i := 0; i < len(files); i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, errDirectStart
		}
		files[i], files[i+1] = r, w
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[3], files[5]
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, directLaunchErr(err)
	}
	// The child's ends are the child's now.
	_ = files[0].Close()
	_ = files[3].Close()
	_ = files[5].Close()
	o := m.opts
	d := &directChild{cmd: cmd, pid: cmd.Process.Pid, stdin: files[1], stdout: files[2], stderr: files[4],
		graces: directGraces{
			eof: orDefault(o.EOFGrace, guardian.DefaultEOFGrace), term: orDefault(o.TermGrace, guardian.DefaultTermGrace),
			kill: orDefault(o.KillGrace, guardian.DefaultKillGrace), pipe: orDefault(o.PipeGrace, guardian.DefaultPipeGrace),
		},
		waitDone: make(chan struct{}), outDone: make(chan struct{}), errDone: make(chan struct{})}
	d.pr, d.pw = io.Pipe()
	go d.reap()
	go d.pumpStdout()
	go d.pumpStderr(stderrSink{l})
	return d, nil
}

// directLaunchErr is a launch failure in our own words.
func directLaunchErr(err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return errDirectNotFound
	case errors.Is(err, fs.ErrPermission):
		return errDirectPermission
	}
	return errDirectStart
}

// reap waits for the child: exited is set before it is reaped where the
// system can tell (awaitExit), so no signal can reach a reused pid.
func (d *directChild) reap() {
	seen := awaitExit(d.pid)
	if seen {
		d.sigMu.Lock()
		d.exited = true
		d.sigMu.Unlock()
	}
	_ = d.cmd.Wait() // only the process: its stdio are our own pipes, no copying goroutines
	now := time.Now()
	if !seen {
		d.sigMu.Lock()
		d.exited = true
		d.sigMu.Unlock()
	}
	d.state, d.reapedAt = d.cmd.ProcessState, now
	close(d.waitDone)
}

// pumpStdout hands the child's stdout to the MCP connection, one bounded
// read at a time, until EOF (the child and everything holding its stdout
// closed it) or the host's forced close.
func (d *directChild) pumpStdout() {
	buf := make([]byte, directReadBytes)
	for {
		n, err := d.stdout.Read(buf)
		if n > 0 && !d.detached.Load() {
			_, _ = d.pw.Write(buf[:n]) // fails once detached: the rest is discarded
		}
		if err != nil {
			d.outForced.Store(!errors.Is(err, io.EOF))
			d.outClosedAt = time.Now()
			_ = d.pw.Close() // the connection reads EOF
			close(d.outDone)
			return
		}
	}
}

// pumpStderr copies the child's stderr into the lease's ring until EOF or
// the host's forced close.
func (d *directChild) pumpStderr(w io.Writer) {
	buf := make([]byte, directReadBytes)
	for {
		n, err := d.stderr.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			d.errForced.Store(!errors.Is(err, io.EOF))
			d.errClosed = time.Now()
			close(d.errDone)
			return
		}
	}
}

func (d *directChild) stream() io.ReadWriteCloser { return directStream{d} }
func (d *directChild) done() <-chan struct{}      { return d.waitDone }
func (d *directChild) facts() childFacts          { return childFacts{TargetPID: d.pid} }

// detach unblocks the connection's reads and writes without ending the
// child: reads end, later writes fail, a write stuck on a full pipe
// returns (where the pipe has deadlines).
func (d *directChild) detach() {
	if d.detached.Swap(true) {
		return
	}
	_ = d.pr.CloseWithError(io.ErrClosedPipe)
	_ = d.stdin.SetWriteDeadline(time.Now())
}

// directStream is a direct child's MCP stream.
type directStream struct{ d *directChild }

func (s directStream) Read(p []byte) (int, error) { return s.d.pr.Read(p) }
func (s directStream) Write(p []byte) (int, error) {
	if s.d.detached.Load() {
		return 0, io.ErrClosedPipe
	}
	return s.d.stdin.Write(p)
}
func (s directStream) Close() error { s.d.detach(); return nil }

// markedExited reports whether the reaper has seen the child exit.
func (d *directChild) markedExited() bool {
	d.sigMu.Lock()
	defer d.sigMu.Unlock()
	return d.exited
}

// close runs the close sequence once within ctx (see the file comment).
// There is no guardian result: the host's own facts are kept in res.
func (d *directChild) close(ctx context.Context) guardian.CleanupResult {
	d.closeOnce.Do(func() { d.res = d.cleanup(ctx) })
	return guardian.CleanupResult{}
}

func (d *directChild) cleanup(ctx context.Context) directResult {
	defer d.probe.close()
	var r directResult
	select {
	case <-d.waitDone:
		r.ExitedBeforeClose = true
	default:
		// Not reaped yet, but it may have exited: a child killed from
		// outside is a zombie before the reaper runs, and the admission
		// that found it dying begins this close at once.
		r.ExitedBeforeClose = d.exitedNow()
	}
	d.detach()
	if d.stdin.Close() == nil {
		r.StdinClosedAt = time.Now()
	}
	if !waitClosed(ctx, d.waitDone, d.graces.eof) {
		if t, group, ok := d.signal(false); ok {
			r.TermSentAt, r.GroupSignalled = t, group
		}
		if !waitClosed(ctx, d.waitDone, d.graces.term) {
			if t, group, ok := d.signal(true); ok {
				r.KillSentAt, r.GroupSignalled = t, group || r.GroupSignalled
			}
			waitClosed(ctx, d.waitDone, d.graces.kill)
		}
	}
	select {
	case <-d.waitDone:
		r.Reaped, r.ReapedAt = true, d.reapedAt
		r.Exit = exitOf(d.state)
	default:
		r.Deadline = true
	}
	// The pipes: PipeGrace after the reap (within the budget), then the
	// host closes its read ends. A close is never waited for: it cannot
	// block the budget.
	pipeBy := time.Now().Add(d.graces.pipe)
	if dl, ok := ctx.Deadline(); ok && dl.Before(pipeBy) {
		pipeBy = dl
	}
	for _, p := range []struct {
		done chan struct{}
		f    *os.File
		at   *time.Time
		f2   *bool
	}{{d.outDone, d.stdout, &r.StdoutClosedAt, &r.StdoutForced}, {d.errDone, d.stderr, &r.StderrClosedAt, &r.StderrForced}} {
		select {
		case <-p.done:
		case <-until(pipeBy):
			*p.at, *p.f2 = time.Now(), true
			go p.f.Close() //nolint:errcheck // unblocks the pump
			continue
		}
	}
	select {
	case <-d.outDone:
		if r.StdoutClosedAt.IsZero() {
			r.StdoutClosedAt, r.StdoutForced = d.outClosedAt, d.outForced.Load()
		}
	default:
	}
	select {
	case <-d.errDone:
		if r.StderrClosedAt.IsZero() {
			r.StderrClosedAt, r.StderrForced = d.errClosed, d.errForced.Load()
		}
	default:
	}
	return r
}

// waitClosed waits up to d (and within ctx) for ch and reports whether it
// was closed.
func waitClosed(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// signal sends TERM (kill false) or KILL to the exact child — its process
// group where the system has them — while it has not exited. It returns
// when it was sent and whether to the group.
func (d *directChild) signal(kill bool) (time.Time, bool, bool) {
	d.sigMu.Lock()
	defer d.sigMu.Unlock()
	if d.exited {
		return time.Time{}, false, false
	}
	at := time.Now()
	group, ok := signalChild(d.cmd.Process, kill)
	return at, group, ok
}

// directCloseDraft is the lease.child_closed of a direct child's close.
func directCloseDraft(l *lease, d *directChild) events.Draft {
	r := d.res
	at := func(t time.Time) *events.Instant {
		if t.IsZero() {
			return nil
		}
		return events.At(t)
	}
	p := &events.LeaseChildClosed{PID: d.pid, Reaped: r.Reaped, ExitCode: -1, ExitedBeforeClose: r.ExitedBeforeClose,
		StdinClosedAt: at(r.StdinClosedAt), StdoutClosedAt: at(r.StdoutClosedAt), StderrClosedAt: at(r.StderrClosedAt),
		StdoutForced: r.StdoutForced, StderrForced: r.StderrForced, TermSentAt: at(r.TermSentAt), KillSentAt: at(r.KillSentAt),
		GroupSignalled: r.GroupSignalled, Descendants: events.DescendantsUnknown}
	if r.Reaped {
		p.ReapedAt = at(r.ReapedAt)
		p.ExitCode, p.Signal = clampCode(r.Exit.Code), r.Exit.Signal
	}
	return l.draft(p)
}

// directExitStatus is a direct child's wait status once the host saw it,
// else nil.
func (d *directChild) exitStatus() *ExitStatus {
	select {
	case <-d.waitDone:
		e := exitOf(d.state)
		return &e
	default:
		return nil
	}
}
