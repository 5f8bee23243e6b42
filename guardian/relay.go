package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// exitSettle is how long the reader waits, after the helper's stream ends,
// for the helper's exit before it records the stream as closed prematurely.
const exitSettle = 200 * time.Millisecond

// Test hooks, nil outside tests (see testHookHandshakeDone).
var (
	// testHookControlWritten runs in control() after its frame was written,
	// while it still holds writeMu.
	testHookControlWritten func()
	// testHookStreamEnded runs in the reader once it has recorded the end
	// of the helper's frame stream, just before Done is closed.
	testHookStreamEnded func()
)

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
		case wire.FrameStdout:
			if len(f.Payload) == 0 {
				s.mu.Lock()
				s.stdoutEOF = true
				s.mu.Unlock()
				s.closeOut()
				continue
			}
			s.deliver(f.TakeChunk())
		case wire.FrameStderr:
			s.mu.Lock()
			s.stderrBytes += int64(len(f.Payload))
			s.mu.Unlock()
			if len(f.Payload) > 0 && s.spec.Stderr != nil {
				_, _ = s.spec.Stderr.Write(f.Payload)
			}
		case wire.FrameReceipt:
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

// deliver hands one stdout chunk to Read, or drops (and counts) it once
// nobody reads any more.
func (s *Session) deliver(b *[]byte) {
	n := int64(len(*b))
	s.mu.Lock()
	s.stdoutBytes += n
	s.mu.Unlock()
	select {
	case s.out <- b:
	case <-s.closing:
		// Nobody reads any more; keep the helper flowing.
		wire.PutChunk(b)
		s.mu.Lock()
		s.stdoutDropped += n
		s.mu.Unlock()
	}
}

// endStream records the end of the helper's frame stream and whether the
// helper was still running then.
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
	s.streamEnded = true
	s.endedBeforeExt = !exited
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
		s.faults = append(s.faults, fmt.Sprintf("helper frame stream: %v", err))
		if s.firstFailure == "" && s.receipt == nil {
			s.firstFailure = ReasonReceiptLost
		}
	}
	s.mu.Unlock()
	if testHookStreamEnded != nil {
		testHookStreamEnded()
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
		wire.PutChunk(s.pendBuf)
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

// Write relays p to the target's stdin, split into bounded frames. It
// blocks while the target (through the helper) applies backpressure; Close
// unblocks it.
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
		c := min(len(p), wire.MaxDataChunk)
		if err := s.fw.WriteFrame(wire.FrameStdin, p[:c]); err != nil {
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
	return s.control(ctx, wire.ControlKillDescendants)
}

// control writes one control frame within ctx.
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
	err := s.fw.WriteFrame(wire.FrameControl, []byte{code})
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
