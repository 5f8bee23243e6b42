//go:build linux || darwin

package helper

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
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

// hostEvent is what the host frame reader reports to the main loop.
type hostEvent struct {
	ctrl  byte
	err   error // io.EOF: host closed its end; otherwise a fault
	fault string
}

// exitInfo is the direct child's wait status, from its one reaper
// (procOS.wait).
type exitInfo struct {
	state *os.ProcessState
	err   error
	at    time.Time
}

// pipeResult is how one target output pipe closed.
type pipeResult struct {
	at     time.Time
	forced bool
}

// helper is one session's state. Fields without a note are owned by the
// main goroutine (Main, serve, the cleanup sequence); the relay goroutines
// touch only their pipe, their channels, out and stdinDropped.
type helper struct {
	hostIn  *os.File
	hostOut *os.File
	out     *wire.Writer // shared by the pumps and the main goroutine; it serialises frames
	ppid0   int
	pid     int

	req  wire.LaunchRequest
	proc *os.Process
	rc   wire.Receipt
	// sys is the system's part: how the target is started, reaped and
	// signalled (see procOS).
	sys procOS

	stdinW, stdoutR, stderrR *os.File
	stdinQ                   chan *[]byte
	stdinClosed              chan time.Time
	// stdinQMu makes readHost's check of stdinQClosed and its send on
	// stdinQ one step, so a chunk is either in the queue before writeStdin
	// starts its last drain (and gets written or dropped there) or dropped
	// by readHost; none can land in the queue after the drain.
	stdinQMu sync.Mutex
	// stdinQClosed: writeStdin has started its last drain (guarded by
	// stdinQMu).
	stdinQClosed bool
	// stdinSpace wakes a readHost blocked on a full queue when writeStdin
	// takes a chunk (capacity 1; a missed wake-up is never needed twice).
	stdinSpace chan struct{}
	// hangupDropHook, when set (tests), runs after readHost dropped a stdin
	// chunk because the host hung up on a full queue.
	hangupDropHook func()
	// stdinDropped counts bytes the host relayed for the target's stdin
	// that were never written into it (see Receipt.StdinDroppedBytes).
	stdinDropped atomic.Int64
	// stdinMu is held by whoever writes into stdinW (writeStdin, or
	// readHost's writeDirect, which only tries it) and by writeStdin while
	// it closes stdinW; it guards stdinBroken.
	stdinMu sync.Mutex
	// stdinBroken: a write into stdinW failed; every later byte is dropped.
	stdinBroken bool
	// stdinQueued counts chunks readHost queued whose write writeStdin has
	// not finished: writeDirect may bypass the queue only at zero.
	stdinQueued atomic.Int64
	// stdinDirect and stdinViaQueue count host stdin frames written by
	// writeDirect in full and those (or their rest) queued for writeStdin.
	stdinDirect, stdinViaQueue atomic.Int64
	// stdinRC is stdinW's raw descriptor, for writeDirect's non-blocking
	// write.
	stdinRC                syscall.RawConn
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
	h := &helper{pid: os.Getpid(), ppid0: os.Getppid(), sys: newProcOS()}
	h.rc.HelperVersion = wire.HelperVersion
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
	h.out = wire.NewWriter(h.hostOut)

	h.rc.Subreaper = h.sys.prepare()

	hello, _ := json.Marshal(wire.Hello{Protocol: wire.ProtocolVersion, Version: wire.HelperVersion, PID: h.pid, Subreaper: h.rc.Subreaper})
	if err := h.out.WriteFrame(wire.FrameHello, hello); err != nil {
		return exitProtocol
	}

	fr := wire.NewReader(h.hostIn, wire.MaxFrameLen)
	_ = h.hostIn.SetReadDeadline(time.Now().Add(launchWait))
	f, err := fr.Next()
	_ = h.hostIn.SetReadDeadline(time.Time{})
	if err != nil || f.Type != wire.FrameLaunch {
		// No launch (the host refused our version, went away, or broke the
		// protocol): nothing was started, nothing to clean.
		return exitProtocol
	}
	if err := json.Unmarshal(f.Payload, &h.req); err != nil {
		_ = h.sendStarted(fmt.Sprintf("launch request does not decode: %v", err))
		return exitLaunchError
	}
	if err := h.req.Validate(); err != nil {
		_ = h.sendStarted(err.Error())
		return exitLaunchError
	}
	h.rc.ActivationID = h.req.ActivationID
	h.rc.EOFGraceNS = h.req.EOFGraceNS
	if err := h.start(); err != nil {
		_ = h.sendStarted(err.Error())
		return exitLaunchError
	}
	err = h.sendStarted("")
	// Only now relay the target's output: the host reads the started frame
	// first and refuses any other, and a target that writes at once would
	// otherwise race its first stdout frame ahead of it.
	h.relayOutput()
	if err != nil {
		// The host is gone before it heard of the target: clean up anyway.
		return h.finish(wire.TriggerHostEOF)
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
	st := wire.Started{ActivationID: h.req.ActivationID, HelperPID: h.pid, At: time.Now().UTC(), Error: errText}
	if h.proc != nil {
		st.TargetPID = h.proc.Pid
		st.PIDFD = h.rc.PIDFD
	}
	b, _ := json.Marshal(st)
	return h.out.WriteFrame(wire.FrameStarted, b)
}

// start launches the target as our direct child on pipes we own, and the
// goroutines that reap it and feed its stdin (relayOutput relays its output).
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
	wire.GrowPipe(inW)
	wire.GrowPipe(outR)
	wire.GrowPipe(errR)
	argv := append([]string{h.req.Command}, h.req.Args...)
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Dir:   h.req.Dir,
		Env:   env,
		Files: []*os.File{inR, outW, errW},
		Sys:   h.sys.sysProcAttr(),
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
	h.rc.PIDFD = h.sys.watch(proc)
	h.stdinW, h.stdoutR, h.stderrR = inW, outR, errR
	if h.stdinRC, err = inW.SyscallConn(); err != nil {
		// Not reached for an os.Pipe end; without it no byte could be
		// written, so the target's stdin is treated as broken.
		h.stdinBroken = true
	}

	h.exited = make(chan exitInfo, 1)
	h.hostEv = make(chan hostEvent, 4)
	h.cleanup = make(chan struct{})
	h.stdinQ = make(chan *[]byte, stdinQueue)
	h.stdinSpace = make(chan struct{}, 1)
	h.stdinClosed = make(chan time.Time, 1)
	h.stdoutDone = make(chan pipeResult, 1)
	h.stderrDone = make(chan pipeResult, 1)
	h.desc = newDescendants(h.pid, proc.Pid)

	// The one and only reaper of the direct child.
	go func() { h.exited <- h.sys.wait() }()
	go h.writeStdin()
	return nil
}

// relayOutput starts relaying the target's stdout and stderr to the host.
// Main calls it once the started frame is written (see there).
func (h *helper) relayOutput() {
	go h.pump(h.stdoutR, wire.FrameStdout, h.stdoutDone)
	go h.pump(h.stderrR, wire.FrameStderr, h.stderrDone)
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
