//go:build linux || darwin

package helper

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// readHost decodes host frames. Data goes to the stdin queue (blocking: that
// is the backpressure towards the host, see stdinEnqueuer); control, EOF and
// faults go to the main loop. It stops at the first error: a malformed
// stream is out of sync.
func (h *helper) readHost(fr *wire.Reader) {
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
		case wire.FrameStdin:
			if q.hungUp {
				// A chunk was dropped at the hang-up: drop every later
				// byte too, whichever path it would take, so the dropped
				// bytes stay a suffix of the stream (the queue may have
				// drained since, and a later frame would leave a hole).
				h.stdinDropped.Add(int64(len(f.Payload)))
				continue
			}
			// Fast path: straight into the target's stdin when nothing is
			// queued before it and the pipe takes it without blocking;
			// only what is left goes through the queue (and its hand-off
			// to writeStdin's goroutine).
			if rest := h.writeDirect(f.Payload); len(rest) == 0 {
				h.stdinDirect.Add(1)
			} else {
				h.stdinViaQueue.Add(1)
				h.stdinQueued.Add(1)
				if !q.enqueue(wire.GetChunk(rest)) {
					h.stdinQueued.Add(-1)
				}
			}
		case wire.FrameControl:
			if len(f.Payload) != 1 || (f.Payload[0] != wire.ControlClose && f.Payload[0] != wire.ControlKillDescendants) {
				h.hostEv <- hostEvent{err: wire.ErrFrameMalformed, fault: "host frame stream: unknown control code"}
				return
			}
			h.hostEv <- hostEvent{ctrl: f.Payload[0]}
		default:
			h.hostEv <- hostEvent{err: wire.ErrFrameMalformed, fault: fmt.Sprintf("host frame stream: unexpected %s frame", f.Type)}
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
// up it can send nothing more, so readHost stops blocking: the chunk that
// does not fit is dropped (and counted), and so is every later stdin byte
// (hungUp is sticky, readHost checks it first), and it reads on to the
// close frame or EOF. Once cleanup has started, stdin chunks are dropped
// (and counted) too.
type stdinEnqueuer struct {
	h      *helper
	hungUp bool
	ticker *time.Ticker // polls for the hang-up while blocked; reused
	// blocked, when set (by tests), is called each time enqueue starts
	// waiting on a full queue.
	blocked func()
}

// sendResult is what one attempt to queue a chunk did.
type sendResult int

const (
	sendFull   sendResult = iota // the queue is full; nothing happened
	sendQueued                   // the chunk is queued for writeStdin
	sendClosed                   // writeStdin has drained for the last time
)

// trySend queues b without blocking unless writeStdin has started its last
// drain (see helper.stdinQMu).
func (h *helper) trySend(b *[]byte) sendResult {
	h.stdinQMu.Lock()
	defer h.stdinQMu.Unlock()
	if h.stdinQClosed {
		return sendClosed
	}
	select {
	case h.stdinQ <- b:
		return sendQueued
	default:
		return sendFull
	}
}

// enqueue queues b for writeStdin, or drops it (and counts it); it reports
// whether b was queued.
func (q *stdinEnqueuer) enqueue(b *[]byte) bool {
	h := q.h
	select {
	case <-h.cleanup:
		h.dropStdin(b) // stdin is being closed; late bytes have nowhere to go
		return false
	default:
	}
	switch h.trySend(b) {
	case sendQueued:
		return true
	case sendClosed:
		h.dropStdin(b)
		return false
	}
	if q.hungUp || q.hostHungUp() {
		q.drop(b)
		return false
	}
	if q.ticker == nil {
		q.ticker = time.NewTicker(hangupPoll)
	} else {
		q.ticker.Reset(hangupPoll)
	}
	defer q.ticker.Stop()
	if q.blocked != nil {
		q.blocked()
	}
	for {
		select {
		case <-h.stdinSpace:
			switch h.trySend(b) {
			case sendQueued:
				return true
			case sendClosed:
				h.dropStdin(b)
				return false
			}
		case <-h.cleanup:
			h.dropStdin(b)
			return false
		case <-q.ticker.C:
			if q.hostHungUp() {
				q.drop(b)
				return false
			}
		}
	}
}

// drop drops b because the host hung up on a full queue; from now on
// readHost drops every stdin byte.
func (q *stdinEnqueuer) drop(b *[]byte) {
	q.hungUp = true
	q.h.dropStdin(b)
	if q.h.hangupDropHook != nil {
		q.h.hangupDropHook()
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
	wire.PutChunk(b)
}

// writeDirect writes p into the target's stdin from readHost's goroutine,
// without blocking, when that keeps the stream's order: nothing queued or
// being written by writeStdin (stdinMu free and stdinQueued zero) and
// cleanup not started. It returns the suffix of p still to be queued: all
// of p when the fast path does not apply, nil when p was taken (written,
// or dropped and counted because the pipe broke earlier or now, as
// writeStdin does: once a write fails every later byte is dropped, so the
// dropped bytes are always a suffix of the stream).
func (h *helper) writeDirect(p []byte) []byte {
	if !h.stdinMu.TryLock() {
		return p // writeStdin is writing (maybe blocked): queue behind it
	}
	defer h.stdinMu.Unlock()
	if h.stdinQueued.Load() != 0 {
		return p
	}
	select {
	case <-h.cleanup:
		return p // the queue's path drops it and counts it
	default:
	}
	if h.stdinBroken {
		h.stdinDropped.Add(int64(len(p)))
		return nil
	}
	n, err := h.stdinWriteNow(p)
	if err != nil {
		h.stdinBroken = true // EPIPE (target closed stdin) or closed
		h.stdinDropped.Add(int64(len(p) - n))
		return nil
	}
	return p[n:]
}

// stdinWriteNow is one write(2) of p into the target's stdin that never
// waits: a full pipe writes what fits (possibly nothing) and returns no
// error; the caller queues the rest.
func (h *helper) stdinWriteNow(p []byte) (int, error) {
	var n int
	var werr error
	err := h.stdinRC.Write(func(fd uintptr) bool {
		for {
			n, werr = unix.Write(int(fd), p)
			if werr != unix.EINTR {
				return true // done either way: never park on the poller
			}
		}
	})
	if n < 0 {
		n = 0
	}
	if err != nil {
		return n, err
	}
	if werr == unix.EAGAIN {
		return n, nil
	}
	return n, werr
}

// writeStdin owns closing the target's stdin write end; it writes the
// chunks readHost queued (those writeDirect could not write), in order.
func (h *helper) writeStdin() {
	for {
		select {
		case b := <-h.stdinQ:
			select {
			case h.stdinSpace <- struct{}{}: // wake a blocked enqueue
			default:
			}
			h.stdinMu.Lock()
			h.writeChunk(b)
			h.stdinMu.Unlock()
		case <-h.cleanup:
			// Flush what the host relayed before its close, within a
			// bound. Closing the queue first makes this drain the last:
			// a chunk readHost sends later is dropped and counted by it.
			h.stdinQMu.Lock()
			h.stdinQClosed = true
			h.stdinQMu.Unlock()
			h.stdinMu.Lock()
			for {
				select {
				case b := <-h.stdinQ:
					h.writeChunk(b)
					continue
				default:
				}
				break
			}
			// Stamp before closing: the child may see EOF, exit and be
			// reaped before a stamp taken after Close returned.
			at := time.Now().UTC()
			_ = h.stdinW.Close()
			h.stdinMu.Unlock()
			h.stdinClosed <- at
			return
		}
	}
}

// writeChunk writes one queued chunk (blocking: the target's backpressure),
// or drops and counts it once the pipe broke; stdinMu held.
func (h *helper) writeChunk(b *[]byte) {
	defer wire.PutChunk(b)
	defer h.stdinQueued.Add(-1)
	if h.stdinBroken {
		h.stdinDropped.Add(int64(len(*b)))
		return
	}
	if n, err := h.stdinW.Write(*b); err != nil {
		h.stdinBroken = true // EPIPE (target closed stdin), deadline, or closed
		h.stdinDropped.Add(int64(len(*b) - n))
	}
}

// pump relays one target output pipe to the host, then reports how it
// closed. If the host cannot take the bytes any more, it keeps draining so
// the target never blocks on a full pipe while being cleaned up.
func (h *helper) pump(r *os.File, t wire.FrameType, done chan<- pipeResult) {
	// The frame is built in place: the target's bytes are read after room
	// for the header, so each chunk is written with one call and no copy.
	buf := make([]byte, wire.HeaderLen+wire.MaxDataChunk)
	hostOK := true
	for {
		n, err := r.Read(buf[wire.HeaderLen:])
		if n > 0 && hostOK {
			if werr := h.out.WriteInPlace(t, buf[:wire.HeaderLen+n]); werr != nil {
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
