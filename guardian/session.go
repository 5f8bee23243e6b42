package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// DefaultHelloTimeout bounds the hello and launch exchanges when Spec leaves
// HelloTimeout at zero (and the context has no earlier deadline).
const DefaultHelloTimeout = 5 * time.Second

// controlWriteBound bounds delivering the close control frame. If the frame
// cannot be written by then (the helper is not reading because the target is
// not reading its stdin), the host asks out of band with SIGTERM.
const controlWriteBound = 250 * time.Millisecond

// lateTermMargin is added to the EOF grace to decide when a helper that was
// sent the close frame but has not finished is also sent SIGTERM (see
// Close). The helper normally sees the frame at once; the signal is a
// defence in case it did not, and changes nothing if cleanup already runs.
const lateTermMargin = 500 * time.Millisecond

// exitSettle is how long the reader waits, after the helper's stream ends,
// for the helper's exit before it records the stream as closed prematurely.
const exitSettle = 200 * time.Millisecond

// Test hooks, nil outside tests: they widen race windows that are
// otherwise a few instructions wide.
var (
	// testHookHandshakeDone runs when the handshake's exchanges succeeded,
	// just before Launch stops watching its context.
	testHookHandshakeDone func()
	// testHookControlWritten runs in control() after its frame was written,
	// while it still holds the write lock.
	testHookControlWritten func()
)

// stdoutQueue bounds the stdout chunks held between the frame reader and
// Read; when full, the reader blocks and backpressure reaches the target.
const stdoutQueue = 64

// Spec describes one verified-stdio activation.
type Spec struct {
	// Command is the target executable; without a slash it is looked up on
	// the helper's PATH (the host's environment).
	Command string
	Args    []string
	// Env is the target's environment; nil means the host's environment.
	Env []string
	// Dir is the target's working directory; empty means the helper's.
	Dir string
	// ActivationID correlates the receipt; [A-Za-z0-9_-]{1,128}.
	ActivationID string

	// Graces of the cleanup sequence; zero means the Default* value.
	EOFGrace  time.Duration // after closing stdin, before TERM
	TermGrace time.Duration // after TERM, before KILL
	KillGrace time.Duration // after KILL, waiting for the reap
	PipeGrace time.Duration // after the reap, waiting for stdout/stderr EOF

	// KillDescendants makes cleanup SIGKILL orphaned descendants that
	// reparented to the helper (they are always reported).
	KillDescendants bool

	// HelperPath is the helper binary; empty means HelperName beside the
	// running executable. There is deliberately no PATH search: the helper
	// becomes the parent of the target and must be the one configured.
	HelperPath string
	// HelloTimeout bounds the hello and launch exchanges.
	HelloTimeout time.Duration
	// Stderr receives the target's stderr bytes. It is called from the
	// session's reader goroutine and must not block; nil discards.
	Stderr io.Writer
	// HelperStderr becomes the helper's own stderr; nil means /dev/null.
	HelperStderr *os.File
}

// CleanupBudget returns the longest the helper's cleanup sequence can take
// by the graces in s; a Close context should allow at least this plus a
// little for process exit.
func (s Spec) CleanupBudget() time.Duration {
	g := s.withDefaults()
	return g.EOFGrace + g.TermGrace + g.KillGrace + g.PipeGrace + time.Second
}

func (s Spec) withDefaults() Spec {
	if s.EOFGrace == 0 {
		s.EOFGrace = DefaultEOFGrace
	}
	if s.TermGrace == 0 {
		s.TermGrace = DefaultTermGrace
	}
	if s.KillGrace == 0 {
		s.KillGrace = DefaultKillGrace
	}
	if s.PipeGrace == 0 {
		s.PipeGrace = DefaultPipeGrace
	}
	if s.HelloTimeout == 0 {
		s.HelloTimeout = DefaultHelloTimeout
	}
	return s
}

func (s Spec) request() LaunchRequest {
	return LaunchRequest{
		ActivationID: s.ActivationID, Command: s.Command, Args: s.Args, Env: s.Env, InheritEnv: s.Env == nil,
		Dir: s.Dir, EOFGraceNS: int64(s.EOFGrace), TermGraceNS: int64(s.TermGrace), KillGraceNS: int64(s.KillGrace),
		PipeGraceNS: int64(s.PipeGrace), KillDescendants: s.KillDescendants,
	}
}

// CleanupResult is the host's verdict on one activation's cleanup, with the
// facts it rests on. Confirmed is true only with a correlated receipt that
// carries the target's wait status and a close fact for each pipe, and the
// helper's own exit status 0, observed within Close's deadline. A non-zero
// target exit can still be confirmed: it says how the target ended, not
// whether its resources were released.
type CleanupResult struct {
	ActivationID string
	Confirmed    bool
	Reason       Reason // empty when confirmed

	// Receipt is the helper's receipt, when one arrived (it is kept even
	// when it does not confirm, as partial facts).
	Receipt   *Receipt
	ReceiptAt time.Time

	HelperPath     string
	HelperVersion  string
	HelperPID      int
	TargetPID      int
	HelperExited   bool
	HelperExitCode int    // -1 when signalled or not observed
	HelperSignal   string // e.g. "KILL" when the helper died by a signal
	HelperExitedAt time.Time

	// CloseRequest says how cleanup was requested: "control" (frame),
	// "signal" (SIGTERM to the helper, when the frame could not be
	// delivered, or when the frame was written but the helper had not acted
	// on it after the EOF grace plus a margin), "none" (the session had
	// already ended).
	CloseRequest string
	// KilledHelper is true when the host SIGKILLed the helper at the
	// deadline.
	KilledHelper bool

	StdinBytes    int64 // relayed to the helper
	StdoutBytes   int64 // received from the helper
	StdoutDropped int64 // received after Close/detach and discarded
	StderrBytes   int64

	// Faults are host-side facts about protocol or session faults.
	Faults []string
}

// Err returns nil when confirmed, else the Reason's sentinel error.
func (r CleanupResult) Err() error {
	if r.Confirmed {
		return nil
	}
	if r.Reason == "" {
		return ErrReceiptLost
	}
	return r.Reason.Err()
}

// Session is one target running under a guardian helper. Read and Write
// relay the target's stdout and stdin; Close runs the cleanup and returns
// its result. Read, Write and Close may be called from different
// goroutines; concurrent Reads (or Writes) are serialized.
type Session struct {
	spec       Spec
	helperPath string
	proc       *os.Process
	toHelper   *os.File // our end of the helper's stdin
	fromHelper *os.File // our end of the helper's stdout
	fw         *FrameWriter
	fr         *FrameReader
	hello      Hello
	started    Started

	out        chan *[]byte  // pooled stdout chunks for Read; closed at stdout EOF or stream end
	closing    chan struct{} // closed by Close or Stream().Close
	closingOne sync.Once
	outOne     sync.Once
	readerDone chan struct{}
	waitDone   chan struct{}

	readMu  sync.Mutex
	pending []byte  // unread part of pendBuf
	pendBuf *[]byte // pooled chunk being read

	writeMu       sync.Mutex
	streamCorrupt bool // a write to the helper failed, perhaps mid-frame

	// dlMu serialises changes of toHelper's write deadline. Once Close has
	// set the bound for its close frame (closeBound), nothing else may move
	// the deadline: control() resetting it would let the close frame be
	// written with no deadline at all.
	dlMu       sync.Mutex
	closeBound bool

	mu             sync.Mutex // guards the facts below
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

	closeRequest string // guarded by mu
	lateTerm     bool   // guarded by mu: SIGTERM sent after the close frame (see Close)

	closeMu      sync.Mutex
	closeStarted bool
	closeDone    chan struct{}
	result       CleanupResult
}

// FindHelper resolves the helper binary: path when non-empty, else
// HelperName beside the running executable. It checks that the file is an
// executable regular file; errors match ErrHelperNotFound.
func FindHelper(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", &HelperError{Path: HelperName, Kind: ErrHelperNotFound, Cause: fmt.Errorf("locate running executable: %w", err)}
		}
		path = filepath.Join(filepath.Dir(exe), HelperName)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", &HelperError{Path: path, Kind: ErrHelperNotFound, Cause: err}
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", &HelperError{Path: path, Kind: ErrHelperNotFound, Cause: errors.New("not an executable regular file")}
	}
	return path, nil
}

// Launch starts the guardian helper, checks its hello, and asks it to start
// the target as its direct child. Every helper problem (missing, not
// speaking the protocol, wrong version) is reported before the launch
// request is sent, so no target process exists when Launch fails with
// ErrHelperNotFound, ErrHelperUnsupported or ErrHelperVersion. There is no
// fallback to launching the target directly.
//
// ctx bounds the launch only; the session lives until Close.
func Launch(ctx context.Context, spec Spec) (*Session, error) {
	spec = spec.withDefaults()
	req := spec.request()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("guardian: launch: %w", err)
	}
	path, err := FindHelper(spec.HelperPath)
	if err != nil {
		return nil, err
	}
	s := &Session{
		spec: spec, helperPath: path,
		out: make(chan *[]byte, stdoutQueue), closing: make(chan struct{}),
		readerDone: make(chan struct{}), waitDone: make(chan struct{}), closeDone: make(chan struct{}),
	}
	if err := s.startHelper(); err != nil {
		return nil, err
	}
	if err := s.handshake(ctx, req); err != nil {
		s.abort()
		return nil, err
	}
	go s.readLoop()
	return s, nil
}

func (s *Session) startHelper() error {
	toR, toW, err := os.Pipe()
	if err != nil {
		return &HelperError{Path: s.helperPath, Kind: ErrHelperUnsupported, Cause: fmt.Errorf("pipe: %w", err)}
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		closeFiles(toR, toW)
		return &HelperError{Path: s.helperPath, Kind: ErrHelperUnsupported, Cause: fmt.Errorf("pipe: %w", err)}
	}
	errFile := s.spec.HelperStderr
	var devNull *os.File
	if errFile == nil {
		if devNull, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
			closeFiles(toR, toW, fromR, fromW)
			return &HelperError{Path: s.helperPath, Kind: ErrHelperUnsupported, Cause: err}
		}
		errFile = devNull
	}
	proc, err := os.StartProcess(s.helperPath, []string{s.helperPath}, &os.ProcAttr{
		Files: []*os.File{toR, fromW, errFile},
		Sys:   helperSysProcAttr(),
	})
	// The helper holds its ends now; ours would mask its EOF and exit.
	closeFiles(toR, fromW)
	if devNull != nil {
		_ = devNull.Close()
	}
	if err != nil {
		closeFiles(toW, fromR)
		return &HelperError{Path: s.helperPath, Kind: ErrHelperUnsupported, Cause: fmt.Errorf("start helper: %w", err)}
	}
	growPipe(toW)
	growPipe(fromR)
	s.proc, s.toHelper, s.fromHelper = proc, toW, fromR
	s.fw = NewFrameWriter(toW)
	s.fr = NewFrameReader(fromR, MaxFrameLen)
	// The helper's one reaper on our side.
	go func() {
		st, err := proc.Wait()
		s.mu.Lock()
		s.helperState, s.helperWaitErr, s.helperExitAt = st, err, time.Now().UTC()
		s.mu.Unlock()
		close(s.waitDone)
	}()
	return nil
}

// handshake reads the hello, checks versions, sends the launch request and
// reads the answer, all within ctx and HelloTimeout.
func (s *Session) handshake(ctx context.Context, req LaunchRequest) error {
	deadline := time.Now().Add(s.spec.HelloTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.fromHelper.SetReadDeadline(deadline)
	_ = s.toHelper.SetWriteDeadline(deadline)
	stopWatch := watchContext(ctx, func() {
		_ = s.fromHelper.SetReadDeadline(time.Now())
		_ = s.toHelper.SetWriteDeadline(time.Now())
	})
	defer stopWatch()
	unsupported := func(cause error) error {
		cerr := ctx.Err()
		if d, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded // the read deadline was the context's
		}
		if cerr != nil {
			cause = fmt.Errorf("%w (%w)", cause, cerr)
		}
		return &HelperError{Path: s.helperPath, Kind: ErrHelperUnsupported, Cause: cause}
	}

	f, err := s.fr.Next()
	if err != nil {
		return unsupported(fmt.Errorf("reading hello: %w", err))
	}
	if f.Type != FrameHello {
		return unsupported(fmt.Errorf("first frame is %s, not hello", f.Type))
	}
	if err := json.Unmarshal(f.Payload, &s.hello); err != nil {
		return unsupported(fmt.Errorf("hello does not decode: %w", err))
	}
	if s.hello.Protocol != ProtocolVersion || s.hello.Version != HelperVersion {
		return &VersionError{Path: s.helperPath, GotProtocol: s.hello.Protocol, GotVersion: s.hello.Version,
			WantProtocol: ProtocolVersion, WantVersion: HelperVersion}
	}

	// Only now, with a helper of the right version, is a target started.
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("guardian: encode launch request: %w", err)
	}
	if err := s.fw.WriteFrame(FrameLaunch, b); err != nil {
		return unsupported(fmt.Errorf("sending launch request: %w", err))
	}
	f, err = s.fr.Next()
	if err != nil {
		return unsupported(fmt.Errorf("reading launch answer: %w", err))
	}
	if f.Type != FrameStarted {
		return unsupported(fmt.Errorf("launch answered with %s frame", f.Type))
	}
	if err := json.Unmarshal(f.Payload, &s.started); err != nil {
		return unsupported(fmt.Errorf("launch answer does not decode: %w", err))
	}
	if s.started.Error != "" {
		return &HelperError{Path: s.helperPath, Kind: ErrTargetStart, Cause: errors.New(s.started.Error)}
	}
	if s.started.ActivationID != req.ActivationID || s.started.TargetPID <= 0 {
		return unsupported(errors.New("launch answer not correlated with the request"))
	}
	if testHookHandshakeDone != nil {
		testHookHandshakeDone()
	}
	// The exchanges succeeded, so the launch did too, even if ctx ends right
	// now. Stop the watch first: a cancellation callback already running
	// would otherwise set a past deadline after the reset below, and the
	// session's reader would fail at once.
	stopWatch()
	_ = s.fromHelper.SetReadDeadline(time.Time{})
	_ = s.toHelper.SetWriteDeadline(time.Time{})
	return nil
}

// watchContext runs f in its own goroutine when ctx ends (context.AfterFunc)
// and returns a stop function. Unlike AfterFunc's own stop, it guarantees
// that once it returns f is neither running nor will run: when f has
// already started, it waits for f to finish. It may be called repeatedly.
func watchContext(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	stopAfter := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !stopAfter() {
				<-done // f started: wait until it has done its work
			}
		})
	}
}

// setWriteDeadline sets toHelper's write deadline, unless Close has already
// set the bound for its close frame, which then stays.
func (s *Session) setWriteDeadline(t time.Time) {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	if !s.closeBound {
		_ = s.toHelper.SetWriteDeadline(t)
	}
}

// setCloseBound sets the write deadline for the close frame; later
// setWriteDeadline calls do not change it.
func (s *Session) setCloseBound(t time.Time) {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	s.closeBound = true
	_ = s.toHelper.SetWriteDeadline(t)
}

// abort ends a helper whose handshake failed. Before a launch request it has
// no target; after a failed launch it has none either. SIGKILL is safe: if a
// target did start, its parent-death signal (SIGKILL) takes it along.
func (s *Session) abort() {
	_ = s.proc.Signal(syscall.SIGKILL)
	<-s.waitDone
	closeFiles(s.toHelper, s.fromHelper)
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}

// readLoop demultiplexes the helper's frames until its stream ends.
func (s *Session) readLoop() {
	defer close(s.readerDone)
	defer s.closeOut()
	for {
		f, err := s.fr.NextChunk()
		if err != nil {
			s.endStream(err)
			return
		}
		switch f.Type {
		case FrameStdout:
			if len(f.Payload) == 0 {
				s.mu.Lock()
				s.stdoutEOF = true
				s.mu.Unlock()
				s.closeOut()
				continue
			}
			s.deliver(f.TakeChunk())
		case FrameStderr:
			s.mu.Lock()
			s.stderrBytes += int64(len(f.Payload))
			s.mu.Unlock()
			if len(f.Payload) > 0 && s.spec.Stderr != nil {
				_, _ = s.spec.Stderr.Write(f.Payload)
			}
		case FrameReceipt:
			var rc Receipt
			if err := json.Unmarshal(f.Payload, &rc); err != nil {
				s.fault(ReasonReceiptLost, fmt.Sprintf("receipt does not decode: %v", err))
				continue
			}
			s.mu.Lock()
			if s.receipt == nil {
				s.receipt, s.receiptAt = &rc, time.Now().UTC()
			} else {
				s.faults = append(s.faults, "second receipt ignored")
			}
			s.mu.Unlock()
		default:
			// Out of sync or misbehaving: stop reading. Closing our end makes
			// the helper's writes fail rather than block.
			s.fault(ReasonReceiptLost, fmt.Sprintf("unexpected %s frame from helper", f.Type))
			s.endStream(nil)
			_ = s.fromHelper.Close()
			return
		}
	}
}

func (s *Session) deliver(b *[]byte) {
	n := int64(len(*b))
	s.mu.Lock()
	s.stdoutBytes += n
	s.mu.Unlock()
	select {
	case s.out <- b:
	case <-s.closing:
		// Nobody reads any more; keep the helper flowing.
		PutChunk(b)
		s.mu.Lock()
		s.stdoutDropped += n
		s.mu.Unlock()
	}
}

func (s *Session) closeOut() { s.outOne.Do(func() { close(s.out) }) }

func (s *Session) fault(r Reason, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, text)
	if s.firstFailure == "" {
		s.firstFailure = r
	}
}

func (s *Session) endStream(err error) {
	// A helper's exit closes its stdout a moment before its wait status is
	// observable, so give the exit a short window before calling the end of
	// the stream premature.
	exited := false
	t := time.NewTimer(exitSettle)
	select {
	case <-s.waitDone:
		exited = true
	case <-t.C:
	}
	t.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamEnded = true
	s.endedBeforeExt = !exited
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
		s.faults = append(s.faults, fmt.Sprintf("helper frame stream: %v", err))
		if s.firstFailure == "" && s.receipt == nil {
			s.firstFailure = ReasonReceiptLost
		}
	}
}

// Read reads the target's stdout. It returns io.EOF after the target's
// stdout closed, ErrHelperLost when the helper's stream ended without that,
// and ErrClosed after Close or Stream().Close.
func (s *Session) Read(p []byte) (int, error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if len(s.pending) == 0 {
		select {
		case <-s.closing:
			return 0, ErrClosed
		default:
		}
		select {
		case b, ok := <-s.out:
			if !ok {
				return 0, s.readEndErr()
			}
			s.pendBuf, s.pending = b, *b
		case <-s.closing:
			return 0, ErrClosed
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		PutChunk(s.pendBuf)
		s.pendBuf, s.pending = nil, nil
	}
	return n, nil
}

func (s *Session) readEndErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stdoutEOF {
		return io.EOF
	}
	return ErrHelperLost
}

// Write relays p to the target's stdin, split into frames of at most
// MaxDataChunk bytes. It blocks while the target (through the helper)
// applies backpressure; Close unblocks it.
func (s *Session) Write(p []byte) (int, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	n := 0
	for len(p) > 0 {
		select {
		case <-s.closing:
			return n, ErrClosed
		default:
		}
		if s.streamCorrupt {
			return n, ErrHelperLost
		}
		c := min(len(p), MaxDataChunk)
		if err := s.fw.WriteFrame(FrameStdin, p[:c]); err != nil {
			s.streamCorrupt = true
			select {
			case <-s.closing:
				return n, ErrClosed
			default:
			}
			return n, fmt.Errorf("%w: %w", ErrHelperLost, err)
		}
		s.mu.Lock()
		s.stdinBytes += int64(c)
		s.mu.Unlock()
		n += c
		p = p[c:]
	}
	return n, nil
}

// KillDescendants asks the helper to SIGKILL and reap the orphaned
// descendants that reparented to it. The outcome is reported in the receipt
// (DescendantsKilled).
func (s *Session) KillDescendants(ctx context.Context) error {
	return s.control(ctx, ControlKillDescendants)
}

func (s *Session) control(ctx context.Context, code byte) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.streamCorrupt {
		return ErrHelperLost
	}
	// Deadline changes go through setWriteDeadline, so none of them (the
	// context's deadline, its cancellation, the reset) can undo the bound a
	// concurrent Close set for its close frame.
	if d, ok := ctx.Deadline(); ok {
		s.setWriteDeadline(d)
	}
	stopWatch := watchContext(ctx, func() { s.setWriteDeadline(time.Now()) })
	err := s.fw.WriteFrame(FrameControl, []byte{code})
	if err == nil && testHookControlWritten != nil {
		testHookControlWritten()
	}
	stopWatch()                     // no cancellation callback runs after this ...
	s.setWriteDeadline(time.Time{}) // ... so this reset is the last word
	if err != nil {
		s.streamCorrupt = true
		return fmt.Errorf("guardian: control frame: %w", err)
	}
	return nil
}

// Done is closed when the helper's frame stream has ended: after the
// receipt (the target exited or cleanup ran) or when the helper was lost.
func (s *Session) Done() <-chan struct{} { return s.readerDone }

// TargetPID is the pid of the target, the helper's direct child.
func (s *Session) TargetPID() int { return s.started.TargetPID }

// HelperPID is the pid of the helper process.
func (s *Session) HelperPID() int { return s.proc.Pid }

// Hello returns the helper's hello (version, subreaper).
func (s *Session) Hello() Hello { return s.hello }

// Started returns the helper's launch answer (target pid, pidfd use).
func (s *Session) Started() Started { return s.started }

// Stream returns the session as an io.ReadWriteCloser, for a transport that
// wants one (newline-delimited JSON-RPC passes through unchanged). Its Close
// detaches: it unblocks Read and Write and discards further output, but
// does not end the target — call Session.Close for the cleanup and its
// result.
func (s *Session) Stream() io.ReadWriteCloser { return stream{s} }

type stream struct{ s *Session }

func (st stream) Read(p []byte) (int, error)  { return st.s.Read(p) }
func (st stream) Write(p []byte) (int, error) { return st.s.Write(p) }
func (st stream) Close() error                { st.s.detach(); return nil }

func (s *Session) detach() { s.closingOne.Do(func() { close(s.closing) }) }

// Close runs the cleanup sequence through the helper and returns the
// result. ctx is the one budget for the whole cleanup; give it at least
// Spec.CleanupBudget(). When it ends first the helper is SIGKILLed (its
// target follows by parent-death signal) and the result is unconfirmed with
// ReasonDeadline, keeping the facts gathered so far.
//
// Close is idempotent: later calls return the stored result without a
// second cleanup (a call racing the first waits for it, within its own ctx).
// When Close returns, no goroutine of the session remains.
func (s *Session) Close(ctx context.Context) CleanupResult {
	s.closeMu.Lock()
	if s.closeStarted {
		s.closeMu.Unlock()
		select {
		case <-s.closeDone:
			return s.result
		case <-ctx.Done():
			r := s.snapshot(false)
			r.Confirmed, r.Reason = false, ReasonDeadline
			r.Faults = append(r.Faults, "close in progress by another caller")
			return r
		}
	}
	s.closeStarted = true
	s.closeMu.Unlock()

	s.detach()
	s.requestClose(ctx)

	// Defence: if the helper got the close frame but has not finished its
	// EOF grace (plus a margin) after it, also send SIGTERM, which it treats
	// like close. A helper already cleaning up ignores it; one that somehow
	// did not act on the frame starts cleanup now instead of at the deadline.
	var lateTerm <-chan time.Time
	s.mu.Lock()
	if s.closeRequest == "control" {
		t := time.NewTimer(s.spec.EOFGrace + lateTermMargin)
		defer t.Stop()
		lateTerm = t.C
	}
	s.mu.Unlock()
	deadlineHit := false
wait:
	for {
		select {
		case <-s.readerDone:
			select {
			case <-s.waitDone:
			case <-ctx.Done():
				deadlineHit = true
			}
			break wait
		case <-lateTerm:
			lateTerm = nil
			if s.proc.Signal(syscall.SIGTERM) == nil {
				s.mu.Lock()
				s.lateTerm = true
				s.mu.Unlock()
			}
		case <-ctx.Done():
			deadlineHit = true
			break wait
		}
	}
	killed := false
	if deadlineHit {
		// Out of budget: end the helper; the target's parent-death signal
		// (SIGKILL) ends the target with it.
		killed = s.proc.Signal(syscall.SIGKILL) == nil
	}
	<-s.waitDone
	// The helper is gone, so its stdout write end is closed and the reader
	// sees EOF after any buffered frames. Closing our end is the backstop.
	select {
	case <-s.readerDone:
	case <-time.After(time.Second):
		s.fault(ReasonPipesClosed, "helper stdout still open after helper exit; closed by host")
		_ = s.fromHelper.Close()
		<-s.readerDone
	}
	r := s.snapshot(deadlineHit)
	r.KilledHelper = killed
	closeFiles(s.toHelper, s.fromHelper)
	s.result = r
	close(s.closeDone)
	return r
}

// requestClose asks the helper to start cleanup: a control frame when it can
// be delivered promptly, else SIGTERM (which the helper treats the same).
func (s *Session) requestClose(ctx context.Context) {
	select {
	case <-s.readerDone:
		s.setCloseRequest("none") // the session already ended
		closeFiles(s.toHelper)
		return
	default:
	}
	bound := time.Now().Add(controlWriteBound)
	if d, ok := ctx.Deadline(); ok && d.Before(bound) {
		bound = d
	}
	// Also unblocks a Write or control frame stuck on a full pipe, so we can
	// get the lock; nobody can move this deadline any more.
	s.setCloseBound(bound)
	s.writeMu.Lock()
	sent := false
	if !s.streamCorrupt {
		if err := s.fw.WriteFrame(FrameControl, []byte{ControlClose}); err == nil {
			sent = true
		} else {
			s.streamCorrupt = true
		}
	}
	s.writeMu.Unlock()
	if sent {
		s.setCloseRequest("control")
	} else if err := s.proc.Signal(syscall.SIGTERM); err == nil {
		s.setCloseRequest("signal")
		s.mu.Lock()
		s.faults = append(s.faults, "close control frame not deliverable; sent SIGTERM to the helper")
		s.mu.Unlock()
	} else {
		s.setCloseRequest("none")
	}
	// EOF on the helper's stdin: nothing more will come from us. The
	// helper also watches for this hang-up while a target that does not
	// read its stdin keeps the helper's stdin queue full, so it reads on to
	// the close frame instead of waiting on the queue.
	closeFiles(s.toHelper)
}

func (s *Session) setCloseRequest(how string) {
	s.mu.Lock()
	s.closeRequest = how
	s.mu.Unlock()
}

// snapshot assembles the result from the facts gathered so far and decides
// confirmation.
func (s *Session) snapshot(deadlineHit bool) CleanupResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := CleanupResult{
		ActivationID: s.spec.ActivationID, HelperPath: s.helperPath, HelperVersion: s.hello.Version,
		HelperPID: s.proc.Pid, TargetPID: s.started.TargetPID, HelperExitCode: -1,
		CloseRequest: s.closeRequest,
		StdinBytes:   s.stdinBytes, StdoutBytes: s.stdoutBytes, StdoutDropped: s.stdoutDropped, StderrBytes: s.stderrBytes,
		Faults: append([]string(nil), s.faults...),
	}
	if s.receipt != nil {
		rc := *s.receipt
		r.Receipt, r.ReceiptAt = &rc, s.receiptAt
		if s.lateTerm && rc.Trigger == "signal" {
			// The frame was written but the helper never acted on it; the
			// late SIGTERM is what started the cleanup.
			r.CloseRequest = "signal"
			r.Faults = append(r.Faults, "close control frame written but not acted on; SIGTERM sent to the helper after the EOF grace")
		}
	}
	helperOK := false
	if s.helperState != nil {
		r.HelperExited, r.HelperExitedAt = true, s.helperExitAt
		if ws, ok := s.helperState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.HelperSignal = signalName(ws.Signal())
		} else {
			r.HelperExitCode = s.helperState.ExitCode()
			helperOK = r.HelperExitCode == 0
		}
	} else if s.helperWaitErr != nil {
		r.Faults = append(r.Faults, fmt.Sprintf("waiting for helper: %v", s.helperWaitErr))
	}

	receiptOK := false
	if s.receipt != nil {
		switch {
		case s.receipt.ActivationID != s.spec.ActivationID || s.receipt.TargetPID != s.started.TargetPID || s.receipt.HelperPID != s.proc.Pid:
			r.Faults = append(r.Faults, "receipt not correlated with this activation")
		case !s.receipt.Reaped:
			r.Faults = append(r.Faults, "receipt: target not reaped")
		case !s.receipt.hasWaitAndPipeFacts():
			r.Faults = append(r.Faults, "receipt lacks wait or pipe-close facts")
		default:
			receiptOK = true
		}
	}

	switch {
	case receiptOK && helperOK && !deadlineHit && s.firstFailure == "":
		r.Confirmed = true
	case s.firstFailure != "":
		r.Reason = s.firstFailure
	case deadlineHit:
		r.Reason = ReasonDeadline
	case r.HelperExited && !helperOK:
		r.Reason = ReasonHelperLost
	case s.receipt != nil && !s.receipt.Reaped:
		r.Reason = ReasonDeadline // the helper's own kill grace ran out
	case s.receipt == nil && s.streamEnded && s.endedBeforeExt:
		r.Reason = ReasonPipesClosed
	default:
		r.Reason = ReasonReceiptLost
	}
	return r
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGPIPE:
		return "PIPE"
	case syscall.SIGSEGV:
		return "SEGV"
	case syscall.SIGABRT:
		return "ABRT"
	}
	return fmt.Sprintf("%d", int(sig))
}
