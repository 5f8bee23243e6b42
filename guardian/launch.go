package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// Test hooks, nil outside tests: they let a test act at an exact point of
// a race window that is otherwise a few instructions wide.
var (
	// testHookHandshakeDone runs when the handshake's exchanges succeeded,
	// just before Launch stops watching its context.
	testHookHandshakeDone func()
	// testHookLaunchCancelled runs first thing in the handshake's
	// context-cancellation callback, before it moves the pipe deadlines.
	testHookLaunchCancelled func()
)

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
	req, err := spec.request()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("guardian: launch: %w", err)
	}
	path, err := findHelper(spec.HelperPath)
	if err != nil {
		return nil, err
	}
	s := newSession(spec, path)
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

// findHelper resolves the helper binary: path when non-empty, else
// HelperName beside the running executable. It checks that the file is an
// executable regular file; errors match ErrHelperNotFound.
func findHelper(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", helperErr("find", HelperName, ErrHelperNotFound, fmt.Errorf("locate running executable: %w", err))
		}
		path = filepath.Join(filepath.Dir(exe), HelperName)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", helperErr("find", path, ErrHelperNotFound, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", helperErr("find", path, ErrHelperNotFound, errors.New("not an executable regular file"))
	}
	return path, nil
}

// startHelper starts the helper on two fresh pipes and its one reaper.
func (s *Session) startHelper() error {
	unsupported := func(cause error) error { return helperErr("start", s.helperPath, ErrHelperUnsupported, cause) }
	toR, toW, err := os.Pipe()
	if err != nil {
		return unsupported(fmt.Errorf("pipe: %w", err))
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		closeFiles(toR, toW)
		return unsupported(fmt.Errorf("pipe: %w", err))
	}
	errFile := s.spec.HelperStderr
	var devNull *os.File
	if errFile == nil {
		if devNull, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
			closeFiles(toR, toW, fromR, fromW)
			return unsupported(err)
		}
		errFile = devNull
	}
	argv := append([]string{s.helperPath}, s.spec.HelperArgs...)
	proc, err := os.StartProcess(s.helperPath, argv, &os.ProcAttr{
		Files: []*os.File{toR, fromW, errFile},
		Sys:   helperSysProcAttr(),
	})
	// The helper holds its ends now; ours would mask its EOF and exit.
	closeFiles(toR, fromW, devNull)
	if err != nil {
		closeFiles(toW, fromR)
		return unsupported(fmt.Errorf("start helper: %w", err))
	}
	wire.GrowPipe(toW)
	wire.GrowPipe(fromR)
	s.proc, s.toHelper, s.fromHelper = proc, toW, fromR
	s.fw = wire.NewWriter(toW)
	s.fr = wire.NewReader(fromR, wire.MaxFrameLen)
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
func (s *Session) handshake(ctx context.Context, req wire.LaunchRequest) error {
	deadline := time.Now().Add(s.spec.HelloTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.fromHelper.SetReadDeadline(deadline)
	_ = s.toHelper.SetWriteDeadline(deadline)
	stopWatch := watchContext(ctx, func() {
		if testHookLaunchCancelled != nil {
			testHookLaunchCancelled()
		}
		_ = s.fromHelper.SetReadDeadline(time.Now())
		_ = s.toHelper.SetWriteDeadline(time.Now())
	})
	defer stopWatch()
	fail := func(op string, cause error) error {
		cerr := ctx.Err()
		if d, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded // the read deadline was the context's
		}
		if cerr != nil {
			cause = fmt.Errorf("%w (%w)", cause, cerr)
		}
		e := helperErr(op, s.helperPath, ErrHelperUnsupported, cause)
		e.Protocol, e.Version = s.hello.Protocol, s.hello.Version
		return e
	}

	f, err := s.fr.Next()
	if err != nil {
		return fail("hello", fmt.Errorf("reading hello: %w", err))
	}
	if f.Type != wire.FrameHello {
		return fail("hello", fmt.Errorf("first frame is %s, not hello", f.Type))
	}
	if err := json.Unmarshal(f.Payload, &s.hello); err != nil {
		return fail("hello", fmt.Errorf("hello does not decode: %w", err))
	}
	if s.hello.Protocol != wire.ProtocolVersion || s.hello.Version != wire.HelperVersion {
		// The version string comes from the helper binary: quoted.
		return &HelperError{Op: "hello", Path: s.helperPath, Protocol: s.hello.Protocol, Version: s.hello.Version,
			Err: fmt.Errorf("%w: got protocol %d version %q, want protocol %d version %q", ErrHelperVersion,
				s.hello.Protocol, s.hello.Version, wire.ProtocolVersion, wire.HelperVersion)}
	}

	// Only now, with a helper of the right version, is a target started.
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("guardian: encode launch request: %w", err)
	}
	if err := s.fw.WriteFrame(wire.FrameLaunch, b); err != nil {
		return fail("launch", fmt.Errorf("sending launch request: %w", err))
	}
	f, err = s.fr.Next()
	if err != nil {
		return fail("launch", fmt.Errorf("reading launch answer: %w", err))
	}
	if f.Type != wire.FrameStarted {
		return fail("launch", fmt.Errorf("launch answered with %s frame", f.Type))
	}
	if err := json.Unmarshal(f.Payload, &s.started); err != nil {
		return fail("launch", fmt.Errorf("launch answer does not decode: %w", err))
	}
	if s.started.Error != "" {
		e := helperErr("launch", s.helperPath, ErrTargetStart, errors.New(s.started.Error))
		e.Protocol, e.Version = s.hello.Protocol, s.hello.Version
		return e
	}
	if s.started.ActivationID != req.ActivationID || s.started.TargetPID <= 0 {
		return fail("launch", errors.New("launch answer not correlated with the request"))
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

// abort ends a helper whose handshake failed. Before a launch request it has
// no target; after a failed launch it has none either. SIGKILL is safe: if a
// target did start, its parent-death signal (SIGKILL, Linux) takes it along,
// or (macOS) the EOF on its stdin, which only the helper held.
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
