package guardian

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// stdoutQueue bounds the stdout chunks held between the frame reader and
// Read; when full, the reader blocks and backpressure reaches the target.
const stdoutQueue = 64

// Session is one target running under a guardian helper. Read and Write
// relay the target's stdout and stdin; Close runs the cleanup and returns
// its result. Read, Write, KillDescendants and Close may be called from
// different goroutines; concurrent Reads (or Writes) are serialized.
//
// # Locks
//
// Three mutexes, each with one job:
//
//   - readMu serialises Read; it guards pending and pendBuf, the chunk
//     being read.
//   - writeMu serialises the session's writers to the helper's stdin
//     (Write's data frames, KillDescendants' control frame, Close's close
//     frame), so that one writer's failure, possibly mid-frame, is seen by
//     the next; it guards streamCorrupt.
//   - mu guards the facts gathered for the result (receipt, counters,
//     faults, the helper's wait status, how close was requested) and
//     closeBound, so that checking the latch and moving toHelper's write
//     deadline happen as one step.
//
// Lock order: readMu → mu and writeMu → mu. mu is a leaf: nothing else is
// acquired while it is held (the only call made under it that is not plain
// field access is toHelper.SetWriteDeadline, which never blocks). readMu and
// writeMu are never held together. The frame writer's own lock (inside
// wire.Writer) is taken only under writeMu, or during the handshake before
// any other goroutine exists, and never while mu is held. Close takes
// none of them to decide which call runs the cleanup (closeStarted is
// atomic), and takes writeMu only after its write bound is set, so a Write
// blocked on a full pipe cannot keep Close from the lock.
type Session struct {
	// Set by Launch before the session is returned, then read-only.
	spec       Spec
	helperPath string
	proc       *os.Process
	toHelper   *os.File // our end of the helper's stdin
	fromHelper *os.File // our end of the helper's stdout
	fw         *wire.Writer
	fr         *wire.Reader // used by the handshake, then by readLoop alone
	hello      wire.Hello
	started    wire.Started

	out        chan *[]byte  // pooled stdout chunks for Read; closed at stdout EOF or stream end
	closing    chan struct{} // closed by Close or Stream().Close
	closingOne sync.Once
	outOne     sync.Once
	readerDone chan struct{} // closed when readLoop returns
	waitDone   chan struct{} // closed when the helper has been reaped

	readMu  sync.Mutex
	pending []byte  // unread part of pendBuf
	pendBuf *[]byte // pooled chunk being read

	writeMu       sync.Mutex
	streamCorrupt bool // a write to the helper failed, perhaps mid-frame

	mu             sync.Mutex
	closeBound     bool // Close set its close-frame write deadline; nothing may move it
	receipt        *Receipt
	receiptAt      time.Time
	stdoutEOF      bool
	streamEnded    bool // the helper's frame stream ended (EOF or fault)
	endedBeforeExt bool // ... while the helper had not yet exited
	firstFailure   Reason
	faults         []string
	helperState    *os.ProcessState
	helperWaitErr  error
	helperExitAt   time.Time
	stdinBytes     int64
	stdoutBytes    int64
	stdoutDropped  int64
	stderrBytes    int64
	closeRequest   string
	lateTerm       bool // SIGTERM sent after the close frame (see Close)

	closeStarted atomic.Bool   // the first Close call runs the cleanup
	closeDone    chan struct{} // closed once result is set
	result       CleanupResult
}

func newSession(spec Spec, helperPath string) *Session {
	return &Session{
		spec: spec, helperPath: helperPath,
		out: make(chan *[]byte, stdoutQueue), closing: make(chan struct{}),
		readerDone: make(chan struct{}), waitDone: make(chan struct{}), closeDone: make(chan struct{}),
	}
}

// Done is closed when the helper's frame stream has ended: after the
// receipt (the target exited or cleanup ran) or when the helper was lost.
func (s *Session) Done() <-chan struct{} { return s.readerDone }

// TargetPID is the pid of the target, the helper's direct child.
func (s *Session) TargetPID() int { return s.started.TargetPID }

// HelperPID is the pid of the helper process.
func (s *Session) HelperPID() int { return s.proc.Pid }

// HelperVersion is the version the helper announced in its hello (always
// the version this package was built for: Launch refuses any other).
func (s *Session) HelperVersion() string { return s.hello.Version }

// Subreaper reports whether the helper became a child subreaper, which is
// what lets it see (and, if asked, kill) orphaned descendants.
func (s *Session) Subreaper() bool { return s.hello.Subreaper }

// PIDFD reports whether the helper holds a pidfd for the target and sends
// its signals through it (so a signal cannot reach a reused pid).
func (s *Session) PIDFD() bool { return s.started.PIDFD }

func (s *Session) detach() { s.closingOne.Do(func() { close(s.closing) }) }

func (s *Session) closeOut() { s.outOne.Do(func() { close(s.out) }) }

// fault records a host-side fault; the first one decides the reason of an
// unconfirmed result.
func (s *Session) fault(r Reason, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, text)
	if s.firstFailure == "" {
		s.firstFailure = r
	}
}

// setWriteDeadline sets toHelper's write deadline, unless Close has already
// set the bound for its close frame, which then stays: resetting it would
// let the close frame be written with no deadline at all.
func (s *Session) setWriteDeadline(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closeBound {
		_ = s.toHelper.SetWriteDeadline(t)
	}
}

// setCloseBound sets the write deadline for the close frame; later
// setWriteDeadline calls do not change it.
func (s *Session) setCloseBound(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeBound = true
	_ = s.toHelper.SetWriteDeadline(t)
}
