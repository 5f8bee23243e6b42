package guardian

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Frame layout on the host ⇄ helper pipes ("packet-4"):
//
//	+----------------------+-----------+-----------------------+
//	| length: uint32 BE    | type byte | payload (length-1 B)  |
//	+----------------------+-----------+-----------------------+
//
// length counts the type byte plus the payload, so it is at least 1 and at
// most MaxFrameLen. A reader never allocates more than MaxFrameLen bytes for
// a frame, whatever the header claims.

// MaxFrameLen bounds one frame (type byte plus payload). A header announcing
// more ends the session: it is a protocol fault, not a reason to allocate.
// 1 MiB leaves room for JSON control messages and a receipt with many
// descendant pids while keeping the worst-case allocation small.
const MaxFrameLen = 1 << 20

// MaxDataChunk bounds the payload of one data frame. Relays split larger
// writes into several frames, so a target that writes one giant "message"
// never produces a giant frame. 64 KiB matches the Linux pipe buffer.
const MaxDataChunk = 64 << 10

// chunkPool recycles data-chunk buffers (cap MaxDataChunk) between a frame
// reader and the consumer of its data, so a busy relay does not allocate,
// and collect, 64 KiB per frame.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, MaxDataChunk); return &b }}

// GetChunk returns a copy of p in a pooled buffer when p fits in one, else
// a fresh copy. Release it with PutChunk when done.
func GetChunk(p []byte) *[]byte {
	if len(p) > MaxDataChunk {
		b := append([]byte(nil), p...)
		return &b
	}
	b := chunkPool.Get().(*[]byte)
	*b = append((*b)[:0], p...)
	return b
}

// PutChunk recycles a buffer from GetChunk.
func PutChunk(b *[]byte) {
	if cap(*b) == MaxDataChunk {
		chunkPool.Put(b)
	}
}

// FrameHeaderLen is the length prefix plus the type byte. Relays that build
// frames in place (see FrameWriter.WriteFrameInPlace) reserve it at the
// start of their buffer.
const FrameHeaderLen = 5

const frameHeaderLen = FrameHeaderLen

// FrameType is the type byte of a frame.
type FrameType byte

// Frame types. Direction is noted as host→helper or helper→host; a frame in
// the wrong direction is a protocol fault.
const (
	// FrameHello (helper→host) opens the session: JSON Hello with the
	// protocol number and the helper's version.
	FrameHello FrameType = 0x01
	// FrameLaunch (host→helper) asks the helper to start the target:
	// JSON LaunchRequest. The helper starts nothing before it.
	FrameLaunch FrameType = 0x02
	// FrameStarted (helper→host) answers FrameLaunch: JSON Started with the
	// target pid, or the reason the target could not be started.
	FrameStarted FrameType = 0x03
	// FrameStdin (host→helper) carries bytes for the target's stdin.
	FrameStdin FrameType = 0x04
	// FrameStdout (helper→host) carries bytes the target wrote to stdout. An
	// empty payload says the stdout pipe has closed (EOF or forced close).
	FrameStdout FrameType = 0x05
	// FrameStderr (helper→host) carries bytes the target wrote to stderr. An
	// empty payload says the stderr pipe has closed.
	FrameStderr FrameType = 0x06
	// FrameControl (host→helper) carries one control byte (ControlClose,
	// ControlKillDescendants).
	FrameControl FrameType = 0x07
	// FrameReceipt (helper→host) carries the JSON Receipt; it is the last
	// frame the helper sends.
	FrameReceipt FrameType = 0x08
)

// String names the frame type for facts and errors.
func (t FrameType) String() string {
	switch t {
	case FrameHello:
		return "hello"
	case FrameLaunch:
		return "launch"
	case FrameStarted:
		return "started"
	case FrameStdin:
		return "stdin"
	case FrameStdout:
		return "stdout"
	case FrameStderr:
		return "stderr"
	case FrameControl:
		return "control"
	case FrameReceipt:
		return "receipt"
	}
	return fmt.Sprintf("unknown(0x%02x)", byte(t))
}

func (t FrameType) known() bool { return t >= FrameHello && t <= FrameReceipt }

// Control codes, the single payload byte of a FrameControl.
const (
	// ControlClose starts the cleanup sequence: close target stdin, EOF
	// grace, TERM, grace, KILL, bounded pipe close, receipt.
	ControlClose byte = 0x01
	// ControlKillDescendants SIGKILLs the orphaned descendants that have
	// reparented to the helper (it is their subreaper) and reaps them.
	ControlKillDescendants byte = 0x02
)

// ErrFrameTooLarge is returned (wrapped in a *FrameError) when a header
// announces more than the reader's bound.
var ErrFrameTooLarge = errors.New("guardian: frame exceeds bound")

// ErrFrameMalformed is returned (wrapped in a *FrameError) for an empty
// frame, an unknown type byte, or a payload that does not decode.
var ErrFrameMalformed = errors.New("guardian: malformed frame")

// FrameError describes a protocol fault in the frame stream. It wraps
// ErrFrameTooLarge or ErrFrameMalformed.
type FrameError struct {
	Len    uint32    // the announced length (type byte + payload)
	Type   FrameType // the type byte, when it was read
	Detail string    // what was wrong, in our words (never peer content)
	Err    error
}

// Error implements error.
func (e *FrameError) Error() string {
	return fmt.Sprintf("guardian: frame fault (len %d, type %s): %s", e.Len, e.Type, e.Detail)
}

// Unwrap returns ErrFrameTooLarge or ErrFrameMalformed.
func (e *FrameError) Unwrap() error { return e.Err }

// Frame is one decoded frame. Payload aliases the reader's buffer and is
// valid only until the next call to Next, unless the frame came from
// NextChunk, whose data payloads are pooled buffers the caller owns.
type Frame struct {
	Type    FrameType
	Payload []byte

	chunk *[]byte // the pooled buffer behind Payload (NextChunk), else nil
}

// TakeChunk hands the caller the pooled buffer behind f.Payload (release
// it with PutChunk), or a copy in a pooled buffer when the payload is the
// reader's own. Either way the result stays valid after the next Next.
func (f *Frame) TakeChunk() *[]byte {
	if f.chunk != nil {
		c := f.chunk
		f.chunk = nil
		return c
	}
	return GetChunk(f.Payload)
}

// FrameReader decodes frames from a byte stream with a hard size bound.
// It is not safe for concurrent use.
type FrameReader struct {
	r      io.Reader
	max    int
	hdr    [frameHeaderLen]byte
	buf    []byte
	pooled bool // set by NextChunk for the duration of one call
}

// NewFrameReader returns a reader that refuses frames longer than max
// (type byte plus payload). max is clamped to [1, MaxFrameLen].
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 || max > MaxFrameLen {
		max = MaxFrameLen
	}
	// Buffered, so a header and a small payload cost one read, not three.
	// The buffer is deliberately smaller than a data chunk: once it is
	// drained, bufio reads a large payload directly into the caller's slice
	// instead of copying it through its own buffer.
	return &FrameReader{r: bufio.NewReaderSize(r, readerBufferLen), max: max}
}

// Next reads one frame. It returns io.EOF only at a clean frame boundary;
// a stream that ends inside a frame gives io.ErrUnexpectedEOF. Oversized,
// empty or unknown-type frames give a *FrameError; the stream is then out
// of sync and must not be read further.
func (fr *FrameReader) Next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:4]); err != nil {
		return Frame{}, err // io.EOF at a boundary, ErrUnexpectedEOF inside a header
	}
	n := binary.BigEndian.Uint32(fr.hdr[:4])
	if n == 0 {
		return Frame{}, &FrameError{Len: n, Detail: "empty frame", Err: ErrFrameMalformed}
	}
	if uint64(n) > uint64(fr.max) {
		// Refuse before allocating: the header is peer-controlled.
		return Frame{}, &FrameError{Len: n, Detail: fmt.Sprintf("length above bound %d", fr.max), Err: ErrFrameTooLarge}
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[4:5]); err != nil {
		return Frame{}, unexpected(err)
	}
	t := FrameType(fr.hdr[4])
	if !t.known() {
		return Frame{}, &FrameError{Len: n, Type: t, Detail: "unknown type", Err: ErrFrameMalformed}
	}
	plen := int(n) - 1
	if fr.pooled && (t == FrameStdout || t == FrameStderr || t == FrameStdin) && plen <= MaxDataChunk {
		// Read the data straight into a buffer the consumer will own: one
		// copy fewer on the relay's hot path.
		c := chunkPool.Get().(*[]byte)
		*c = (*c)[:plen]
		if _, err := io.ReadFull(fr.r, *c); err != nil {
			PutChunk(c)
			return Frame{}, unexpected(err)
		}
		return Frame{Type: t, Payload: *c, chunk: c}, nil
	}
	if cap(fr.buf) < plen {
		fr.buf = make([]byte, plen)
	}
	p := fr.buf[:plen]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		return Frame{}, unexpected(err)
	}
	return Frame{Type: t, Payload: p}, nil
}

// NextChunk is Next, except that the payload of a data frame (stdin, stdout,
// stderr) is read directly into a pooled buffer; take it with
// Frame.TakeChunk, or it is simply collected.
func (fr *FrameReader) NextChunk() (Frame, error) {
	fr.pooled = true
	defer func() { fr.pooled = false }()
	return fr.Next()
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readerBufferLen is the FrameReader's buffer: room for many small frames.
const readerBufferLen = 8 << 10

// AppendFrame appends the encoding of one frame to dst. It returns an error
// when the frame would exceed MaxFrameLen.
func AppendFrame(dst []byte, t FrameType, payload []byte) ([]byte, error) {
	if len(payload)+1 > MaxFrameLen {
		return dst, &FrameError{Len: uint32(min(len(payload)+1, 1<<31)), Type: t, Detail: "payload above bound", Err: ErrFrameTooLarge}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)+1))
	dst = append(dst, byte(t))
	return append(dst, payload...), nil
}

// FrameWriter encodes frames onto a stream. Each frame goes out in one
// Write call, and concurrent callers are serialized, so frames from
// different goroutines never interleave.
type FrameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewFrameWriter returns a FrameWriter on w.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// WriteFrameInPlace writes one frame whose payload is already in
// frame[FrameHeaderLen:]; it fills in the header and writes frame in one
// call, without copying the payload. It is the relay's hot path.
func (fw *FrameWriter) WriteFrameInPlace(t FrameType, frame []byte) error {
	if len(frame) < FrameHeaderLen {
		return &FrameError{Type: t, Detail: "no room for the header", Err: ErrFrameMalformed}
	}
	n := len(frame) - FrameHeaderLen + 1
	if n > MaxFrameLen {
		return &FrameError{Len: uint32(min(n, 1<<31)), Type: t, Detail: "payload above bound", Err: ErrFrameTooLarge}
	}
	binary.BigEndian.PutUint32(frame, uint32(n))
	frame[4] = byte(t)
	fw.mu.Lock()
	defer fw.mu.Unlock()
	_, err := fw.w.Write(frame)
	return err
}

// WriteFrame writes one frame.
func (fw *FrameWriter) WriteFrame(t FrameType, payload []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	b, err := AppendFrame(fw.buf[:0], t, payload)
	if err != nil {
		return err
	}
	fw.buf = b
	_, err = fw.w.Write(b)
	if cap(fw.buf) > 2*(MaxDataChunk+frameHeaderLen) {
		fw.buf = nil // do not pin a large receipt buffer for the session's life
	}
	return err
}
