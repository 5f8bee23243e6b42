//go:build linux

package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaseledger/leaseledger/guardian"
)

// Timing bounds of the helper's own steps (not host-configurable: they only
// bound how long the helper waits on itself or on a stuck host).
const (
	// launchWait bounds how long a helper waits for the launch frame after
	// its hello; a host that never asks gets no target and an exit.
	launchWait = 30 * time.Second
	// stdinFlushBound bounds flushing already-relayed stdin bytes when
	// cleanup starts; a target that does not read loses them.
	stdinFlushBound = 200 * time.Millisecond
	// hostWriteBound bounds each write to the host during cleanup, so a host
	// that stopped reading cannot keep the helper (and the receipt) hanging.
	hostWriteBound = 5 * time.Second
	// scanEvery is how often the helper checks its parent and scans for
	// orphaned descendants while the session runs.
	scanEvery = 200 * time.Millisecond
	// stdinQueue bounds the stdin chunks buffered between the host frame
	// reader and the target's stdin.
	stdinQueue = 16
	// hangupPoll is how often a host frame reader blocked on a full stdin
	// queue checks whether the host has closed its end of our stdin.
	hangupPoll = 20 * time.Millisecond
)

// Exit codes of the helper. 0 means "receipt delivered"; the host requires
// it for a confirmed cleanup.
const (
	exitOK          = 0
	exitNoReceipt   = 1 // cleanup ran but the receipt could not be written
	exitProtocol    = 2 // the host broke the protocol before launch
	exitLaunchError = 3 // the target could not be started (Started.Error sent)
)

type hostEvent struct {
	ctrl  byte
	err   error // io.EOF: host closed its end; otherwise a fault
	fault string
}

type exitInfo struct {
	state *os.ProcessState
	err   error
	at    time.Time
}

type pipeResult struct {
	at     time.Time
	forced bool
}

type helper struct {
	hostIn  *os.File
	hostOut *os.File
	out     *guardian.FrameWriter
	ppid0   int
	pid     int

	req  guardian.LaunchRequest
	proc *os.Process
	rc   guardian.Receipt

	stdinW, stdoutR, stderrR *os.File
	stdinQ                   chan *[]byte
	stdinClosed              chan time.Time
	// stdinDropped counts bytes the host relayed for the target's stdin
	// that were never written into it (see Receipt.StdinDroppedBytes).
	stdinDropped           atomic.Int64
	stdoutDone, stderrDone chan pipeResult

	exited  chan exitInfo
	reaped  bool
	hostEv  chan hostEvent
	sigs    chan os.Signal
	cleanup chan struct{} // closed when cleanup starts
	killReq bool          // the host asked for kill-descendants during cleanup

	desc descendants
}

// Main runs one guardian session on stdin/stdout and returns the process
// exit code. It must be called from the main goroutine (see cmd main).
func Main() int {
	// Pdeathsig of the target follows the thread that forks it. Locking the
	// main goroutine to its thread for the life of the process keeps that
	// thread alive until the helper itself exits.
	runtime.LockOSThread()

	h := &helper{pid: os.Getpid(), ppid0: os.Getppid()}
	h.rc.HelperVersion = guardian.HelperVersion
	h.rc.HelperPID = h.pid
	h.rc.ExitCode = -1

	// Writes to a vanished host must come back as EPIPE, not kill us before
	// the target is cleaned up: Notify (never Ignore, which children would
	// inherit across exec) turns SIGPIPE on fd 1 into an error.
	h.sigs = make(chan os.Signal, 8)
	signal.Notify(h.sigs, syscall.SIGPIPE, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)

	// Pollable host pipes, so writes can carry deadlines.
	h.hostIn = pollable(0, "host-in")
	h.hostOut = pollable(1, "host-out")
	h.out = guardian.NewFrameWriter(h.hostOut)

	// Orphans of the target reparent to us, so we can see and reap them.
	h.rc.Subreaper = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
	// The host also sets this at fork; setting it again is harmless and
	// covers a host that did not. SIGUSR1 so a false alarm (the host's
	// forking thread exited, the host lives) is told apart by getppid.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGUSR1), 0, 0, 0)

	hello, _ := json.Marshal(guardian.Hello{Protocol: guardian.ProtocolVersion, Version: guardian.HelperVersion, PID: h.pid, Subreaper: h.rc.Subreaper})
	if err := h.out.WriteFrame(guardian.FrameHello, hello); err != nil {
		return exitProtocol
	}

	fr := guardian.NewFrameReader(h.hostIn, guardian.MaxFrameLen)
	_ = h.hostIn.SetReadDeadline(time.Now().Add(launchWait))
	f, err := fr.Next()
	_ = h.hostIn.SetReadDeadline(time.Time{})
	if err != nil || f.Type != guardian.FrameLaunch {
		// No launch (the host refused our version, went away, or broke the
		// protocol): nothing was started, nothing to clean.
		return exitProtocol
	}
	if err := json.Unmarshal(f.Payload, &h.req); err != nil {
		h.sendStarted(fmt.Sprintf("launch request does not decode: %v", err))
		return exitLaunchError
	}
	if err := h.req.Validate(); err != nil {
		h.sendStarted(err.Error())
		return exitLaunchError
	}
	h.rc.ActivationID = h.req.ActivationID
	h.rc.EOFGraceNS = h.req.EOFGraceNS
	if err := h.start(); err != nil {
		h.sendStarted(err.Error())
		return exitLaunchError
	}
	if err := h.sendStarted(""); err != nil {
		// The host is gone before it heard of the target: clean up anyway.
		return h.finish("host_eof")
	}
	go h.readHost(fr)
	return h.finish(h.serve())
}

func pollable(fd int, name string) *os.File {
	// os.NewFile registers a non-blocking descriptor with the runtime
	// poller, which is what makes deadlines and Close-unblocks-Read work.
	_ = syscall.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), name)
}

func (h *helper) sendStarted(errText string) error {
	st := guardian.Started{ActivationID: h.req.ActivationID, HelperPID: h.pid, At: time.Now().UTC(), Error: errText}
	if h.proc != nil {
		st.TargetPID = h.proc.Pid
		st.PIDFD = h.rc.PIDFD
	}
	b, _ := json.Marshal(st)
	return h.out.WriteFrame(guardian.FrameStarted, b)
}

// start launches the target as our direct child on pipes we own.
func (h *helper) start() error {
	path := h.req.Command
	if lp, err := exec.LookPath(path); err == nil {
		path = lp
	} else {
		return fmt.Errorf("command not found: %w", err)
	}
	env := h.req.Env
	if h.req.InheritEnv {
		env = os.Environ()
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return fmt.Errorf("stderr pipe: %w", err)
	}
	growPipe(inW)
	growPipe(outR)
	growPipe(errR)
	argv := append([]string{h.req.Command}, h.req.Args...)
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Dir:   h.req.Dir,
		Env:   env,
		Files: []*os.File{inR, outW, errW},
		// SIGKILL when we die without cleaning up (e.g. we are SIGKILLed):
		// the target must not outlive its guardian.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	// The child has its copies; keeping ours would hide EOF from both sides.
	closeAll(inR, outW, errW)
	if err != nil {
		closeAll(inW, outR, errR)
		return fmt.Errorf("start target: %w", err)
	}
	h.proc = proc
	h.rc.TargetPID = proc.Pid
	h.rc.StartedAt = time.Now().UTC()
	h.rc.PIDFD = proc.WithHandle(func(uintptr) {}) == nil
	h.stdinW, h.stdoutR, h.stderrR = inW, outR, errR

	h.exited = make(chan exitInfo, 1)
	h.hostEv = make(chan hostEvent, 4)
	h.cleanup = make(chan struct{})
	h.stdinQ = make(chan *[]byte, stdinQueue)
	h.stdinClosed = make(chan time.Time, 1)
	h.stdoutDone = make(chan pipeResult, 1)
	h.stderrDone = make(chan pipeResult, 1)
	h.desc = newDescendants(h.pid, proc.Pid)

	// The one and only reaper of the direct child.
	go func() {
		st, err := proc.Wait()
		h.exited <- exitInfo{state: st, err: err, at: time.Now().UTC()}
	}()
	go h.writeStdin()
	go h.pump(outR, guardian.FrameStdout, h.stdoutDone)
	go h.pump(errR, guardian.FrameStderr, h.stderrDone)
	return nil
}

// pipeSize is the capacity asked for the target's pipes: fewer, larger
// transfers per context switch. 1 MiB is the default unprivileged maximum;
// failure keeps the 64 KiB default.
const pipeSize = 1 << 20

func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// readHost decodes host frames. Data goes to the stdin queue (blocking: that
// is the backpressure towards the host, see enqueueStdin); control, EOF and
// faults go to the main loop. It stops at the first error: a malformed
// stream is out of sync.
func (h *helper) readHost(fr *guardian.FrameReader) {
	q := stdinEnqueuer{h: h}
	for {
		f, err := fr.Next()
		if err != nil {
			ev := hostEvent{err: err}
			if !errors.Is(err, io.EOF) {
				ev.fault = fmt.Sprintf("host frame stream: %v", err)
			}
			h.hostEv <- ev
			return
		}
		switch f.Type {
		case guardian.FrameStdin:
			q.enqueue(guardian.GetChunk(f.Payload))
		case guardian.FrameControl:
			if len(f.Payload) != 1 || (f.Payload[0] != guardian.ControlClose && f.Payload[0] != guardian.ControlKillDescendants) {
				h.hostEv <- hostEvent{err: guardian.ErrFrameMalformed, fault: "host frame stream: unknown control code"}
				return
			}
			h.hostEv <- hostEvent{ctrl: f.Payload[0]}
		default:
			h.hostEv <- hostEvent{err: guardian.ErrFrameMalformed, fault: fmt.Sprintf("host frame stream: unexpected %s frame", f.Type)}
			return
		}
	}
}

// stdinEnqueuer is readHost's side of the stdin queue.
//
// A full queue blocks readHost: that is the backpressure towards the host.
// But while it blocks, readHost reads no host frames, and the host's close
// frame may sit behind a backlog of stdin frames that a target which does
// not read its stdin will never take. The host closes its end of our stdin
// right after the close frame (and it closes when it goes away), so a
// blocked enqueue also watches for that hang-up — visible as POLLHUP on our
// stdin while unread frames are still in the pipe. Once the host has hung
// up it can send nothing more, so readHost stops blocking: stdin chunks that
// do not fit are dropped (and counted) and it reads on to the close frame or
// EOF. Once cleanup has started, stdin chunks are dropped (and counted) too.
type stdinEnqueuer struct {
	h      *helper
	hungUp bool
	ticker *time.Ticker // polls for the hang-up while blocked; reused
}

func (q *stdinEnqueuer) enqueue(b *[]byte) {
	h := q.h
	select {
	case <-h.cleanup:
		h.dropStdin(b) // stdin is being closed; late bytes have nowhere to go
		return
	default:
	}
	select {
	case h.stdinQ <- b:
		return
	default:
	}
	if q.hungUp || q.hostHungUp() {
		q.hungUp = true
		h.dropStdin(b)
		return
	}
	if q.ticker == nil {
		q.ticker = time.NewTicker(hangupPoll)
	} else {
		q.ticker.Reset(hangupPoll)
	}
	defer q.ticker.Stop()
	for {
		select {
		case h.stdinQ <- b:
			return
		case <-h.cleanup:
			h.dropStdin(b)
			return
		case <-q.ticker.C:
			if q.hostHungUp() {
				q.hungUp = true
				h.dropStdin(b)
				return
			}
		}
	}
}

// hostHungUp reports whether the host has closed its end of our stdin,
// without consuming what is still in the pipe: poll(2) reports POLLHUP on a
// pipe's read end once it has no writers, whatever data remains.
func (q *stdinEnqueuer) hostHungUp() bool {
	rc, err := q.h.hostIn.SyscallConn()
	if err != nil {
		return false
	}
	hup := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd)}} // POLLHUP and POLLERR are always reported
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			hup = fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hup
}

// dropStdin counts and recycles a stdin chunk that will not reach the target.
func (h *helper) dropStdin(b *[]byte) {
	h.stdinDropped.Add(int64(len(*b)))
	guardian.PutChunk(b)
}

// writeStdin owns the target's stdin write end, and closes it.
func (h *helper) writeStdin() {
	broken := false
	write := func(b *[]byte) {
		defer guardian.PutChunk(b)
		if broken {
			h.stdinDropped.Add(int64(len(*b)))
			return
		}
		if n, err := h.stdinW.Write(*b); err != nil {
			broken = true // EPIPE (target closed stdin), deadline, or closed
			h.stdinDropped.Add(int64(len(*b) - n))
		}
	}
	for {
		select {
		case b := <-h.stdinQ:
			write(b)
		case <-h.cleanup:
			// Flush what the host relayed before its close, within a bound.
			for {
				select {
				case b := <-h.stdinQ:
					write(b)
					continue
				default:
				}
				break
			}
			// Stamp before closing: the child may see EOF, exit and be
			// reaped before a stamp taken after Close returned.
			at := time.Now().UTC()
			_ = h.stdinW.Close()
			h.stdinClosed <- at
			return
		}
	}
}

// pump relays one target output pipe to the host, then reports how it
// closed. If the host cannot take the bytes any more, it keeps draining so
// the target never blocks on a full pipe while being cleaned up.
func (h *helper) pump(r *os.File, t guardian.FrameType, done chan<- pipeResult) {
	// The frame is built in place: the target's bytes are read after room
	// for the header, so each chunk is written with one call and no copy.
	buf := make([]byte, guardian.FrameHeaderLen+guardian.MaxDataChunk)
	hostOK := true
	for {
		n, err := r.Read(buf[guardian.FrameHeaderLen:])
		if n > 0 && hostOK {
			if werr := h.out.WriteFrameInPlace(t, buf[:guardian.FrameHeaderLen+n]); werr != nil {
				hostOK = false
			}
		}
		if err != nil {
			res := pipeResult{at: time.Now().UTC(), forced: errors.Is(err, os.ErrClosed)}
			_ = r.Close()
			if hostOK {
				_ = h.out.WriteFrame(t, nil) // empty frame: this pipe is closed
			}
			done <- res
			return
		}
	}
}

// serve runs the session until something starts cleanup, and says what.
func (h *helper) serve() string {
	tick := time.NewTicker(scanEvery)
	defer tick.Stop()
	for {
		select {
		case ev := <-h.hostEv:
			if ev.err != nil {
				if ev.fault != "" {
					h.rc.Faults = append(h.rc.Faults, ev.fault)
					return "protocol_fault"
				}
				return "host_eof"
			}
			switch ev.ctrl {
			case guardian.ControlClose:
				return "close"
			case guardian.ControlKillDescendants:
				h.desc.killAll(h.rc.TargetPID)
			}
		case x := <-h.exited:
			h.recordExit(x)
			return "target_exit"
		case s := <-h.sigs:
			if t := h.onSignal(s); t != "" {
				return t
			}
		case <-tick.C:
			if os.Getppid() != h.ppid0 {
				return "parent_gone"
			}
			h.desc.scan()
			h.desc.reap()
		}
	}
}

// onSignal maps a signal to a cleanup trigger ("" to keep going).
func (h *helper) onSignal(s os.Signal) string {
	switch s {
	case syscall.SIGPIPE:
		return "" // the failed write reports it
	case syscall.SIGUSR1:
		// Our PR_SET_PDEATHSIG. It also fires when only the host's forking
		// thread exited; the parent pid tells the two apart.
		if os.Getppid() != h.ppid0 {
			return "parent_gone"
		}
		h.rc.Faults = append(h.rc.Faults, "parent-death signal while the parent lives (its forking thread exited); ignored")
		return ""
	}
	return "signal"
}

func (h *helper) recordExit(x exitInfo) {
	h.reaped = true
	if x.err != nil || x.state == nil {
		h.rc.Faults = append(h.rc.Faults, fmt.Sprintf("wait: %v", x.err))
		return
	}
	h.rc.Reaped = true
	at := x.at
	h.rc.ReapedAt = &at
	ws, ok := x.state.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		h.rc.ExitCode = -1
		h.rc.Signal = sigName(ws.Signal())
	default:
		h.rc.ExitCode = x.state.ExitCode()
	}
}

func sigName(s syscall.Signal) string {
	n := unix.SignalName(s)
	if len(n) > 3 && n[:3] == "SIG" {
		return n[3:]
	}
	if n == "" {
		return fmt.Sprintf("%d", int(s))
	}
	return n
}

// waitExit waits until the child is reaped or the deadline passes, while
// still serving kill-descendants requests and descendant reaping.
func (h *helper) waitExit(deadline time.Time) {
	if h.reaped {
		return
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	tick := time.NewTicker(scanEvery / 2)
	defer tick.Stop()
	for {
		select {
		case x := <-h.exited:
			h.recordExit(x)
			return
		case <-timer.C:
			return
		case ev := <-h.hostEv:
			h.duringCleanup(ev)
		case <-h.sigs:
			// Cleanup is already running; a second request changes nothing.
		case <-tick.C:
			h.desc.scan()
			h.desc.reap()
		}
	}
}

func (h *helper) duringCleanup(ev hostEvent) {
	if ev.fault != "" {
		h.rc.Faults = append(h.rc.Faults, ev.fault)
	}
	if ev.err == nil && ev.ctrl == guardian.ControlKillDescendants {
		h.killReq = true
	}
}

// alive asks the kernel, without reaping, whether the direct child has
// exited. A signal to an exited-but-unreaped child also succeeds, so this is
// what lets a SignalFact say the signal hit a live process.
func (h *helper) alive() bool {
	alive := true
	err := h.proc.WithHandle(func(fd uintptr) {
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

// signal sends sig to the exact direct child through its pidfd, only while
// it is unreaped and has not exited.
func (h *helper) signal(sig syscall.Signal) {
	if h.reaped || !h.alive() {
		return
	}
	err := h.proc.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return // reaped in between: nothing was sent
	}
	if err != nil {
		h.rc.Faults = append(h.rc.Faults, fmt.Sprintf("signal %s: %v", sigName(sig), err))
		return
	}
	h.rc.Signals = append(h.rc.Signals, guardian.SignalFact{Signal: sigName(sig), At: time.Now().UTC(), Alive: true})
}

// finish runs the cleanup sequence, sends the receipt and returns the exit
// code. The sequence is the same whatever triggered it.
func (h *helper) finish(trigger string) int {
	h.rc.Trigger = trigger
	close(h.cleanup)
	// From here on the host may have stopped reading: bound every write.
	_ = h.hostOut.SetWriteDeadline(time.Now().Add(hostWriteBound + h.budget()))

	// 1. Close the target's stdin (after a bounded flush).
	_ = h.stdinW.SetWriteDeadline(time.Now().Add(stdinFlushBound))
	stdinAt := <-h.stdinClosed
	h.rc.Stdin = &guardian.PipeFact{ClosedAt: stdinAt}

	// 2. EOF grace: the polite ending for a stdio server.
	h.waitExit(stdinAt.Add(time.Duration(h.req.EOFGraceNS)))
	end := time.Now().UTC()
	if h.rc.ReapedAt != nil && h.rc.ReapedAt.Before(end) {
		end = *h.rc.ReapedAt
	}
	if used := end.Sub(stdinAt); used > 0 {
		h.rc.EOFGraceUsedNS = min(int64(used), h.req.EOFGraceNS)
	}

	// 3. TERM, grace; 4. KILL, grace — each only while the child is unreaped.
	if !h.reaped {
		h.signal(syscall.SIGTERM)
		h.waitExit(time.Now().Add(time.Duration(h.req.TermGraceNS)))
	}
	if !h.reaped {
		h.signal(syscall.SIGKILL)
		h.waitExit(time.Now().Add(time.Duration(h.req.KillGraceNS)))
	}
	if !h.reaped {
		h.rc.Faults = append(h.rc.Faults, "direct child not reaped within the kill grace")
	}

	// 5. Orphaned descendants: kill them if asked, before waiting for the
	// pipes they may hold.
	if h.req.KillDescendants || h.killReq {
		h.desc.killAll(h.rc.TargetPID)
	}

	// 6. Pipes: wait for EOF, but never past the pipe deadline — a
	// descendant holding stdout must not hold the cleanup.
	h.rc.Stdout, h.rc.Stderr = h.closePipes(time.Now().Add(time.Duration(h.req.PipeGraceNS)))

	h.desc.scan()
	h.desc.reap()
	h.desc.fill(&h.rc)
	// Chunks readHost queued after writeStdin's last drain never reached the
	// target either.
	for drained := false; !drained; {
		select {
		case b := <-h.stdinQ:
			h.dropStdin(b)
		default:
			drained = true
		}
	}
	h.rc.StdinDroppedBytes = h.stdinDropped.Load()
	h.rc.FinishedAt = time.Now().UTC()

	b, err := json.Marshal(&h.rc)
	if err == nil {
		err = h.out.WriteFrame(guardian.FrameReceipt, b)
	}
	_ = h.hostOut.Close()
	if err != nil {
		return exitNoReceipt
	}
	return exitOK
}

// budget is the longest the cleanup sequence can take by its graces.
func (h *helper) budget() time.Duration {
	return stdinFlushBound + time.Duration(h.req.EOFGraceNS+h.req.TermGraceNS+h.req.KillGraceNS+h.req.PipeGraceNS)
}

func (h *helper) closePipes(deadline time.Time) (stdout, stderr *guardian.PipeFact) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var outRes, errRes *pipeResult
	for outRes == nil || errRes == nil {
		select {
		case r := <-h.stdoutDone:
			outRes = &r
		case r := <-h.stderrDone:
			errRes = &r
		case ev := <-h.hostEv:
			h.duringCleanup(ev)
		case <-timer.C:
			// Closing our read ends releases the pipes we own; the pumps see
			// os.ErrClosed and report a forced close.
			if outRes == nil {
				_ = h.stdoutR.Close()
			}
			if errRes == nil {
				_ = h.stderrR.Close()
			}
		}
	}
	return &guardian.PipeFact{ClosedAt: outRes.at, Forced: outRes.forced},
		&guardian.PipeFact{ClosedAt: errRes.at, Forced: errRes.forced}
}
