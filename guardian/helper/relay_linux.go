//go:build linux

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
			q.enqueue(wire.GetChunk(f.Payload))
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
// up it can send nothing more, so readHost stops blocking: stdin chunks that
// do not fit are dropped (and counted) and it reads on to the close frame or
// EOF. Once cleanup has started, stdin chunks are dropped (and counted) too.
type stdinEnqueuer struct {
	h      *helper
	hungUp bool
	ticker *time.Ticker // polls for the hang-up while blocked; reused
	// blocked, when set (by tests), is called each time enqueue starts
	// waiting on a full queue.
	blocked func()
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
	if q.blocked != nil {
		q.blocked()
	}
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
	wire.PutChunk(b)
}

// writeStdin owns the target's stdin write end, and closes it.
func (h *helper) writeStdin() {
	broken := false
	write := func(b *[]byte) {
		defer wire.PutChunk(b)
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
