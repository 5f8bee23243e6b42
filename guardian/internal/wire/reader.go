package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// readerBufferLen is the Reader's buffer: room for many small frames, and
// deliberately smaller than a data chunk, so that once it is drained bufio
// reads a large payload directly into the caller's slice instead of
// copying it through its own buffer.
const readerBufferLen = 8 << 10

// Frame is one decoded frame. Payload aliases the reader's buffer and is
// valid only until the next call to Next, unless the frame came from
// NextChunk, whose data payloads are pooled buffers the caller may take.
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

// Reader decodes frames from a byte stream with a hard size bound. It is
// not safe for concurrent use.
type Reader struct {
	r      io.Reader
	max    int
	hdr    [HeaderLen]byte
	buf    []byte
	pooled bool // set by NextChunk for the duration of one call
}

// NewReader returns a reader that refuses frames longer than max (type
// byte plus payload). max is clamped to [1, MaxFrameLen].
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 || max > MaxFrameLen {
		max = MaxFrameLen
	}
	// Buffered, so a header and a small payload cost one read, not three.
	return &Reader{r: bufio.NewReaderSize(r, readerBufferLen), max: max}
}

// Next reads one frame. It returns io.EOF only at a clean frame boundary;
// a stream that ends inside a frame gives io.ErrUnexpectedEOF. Oversized,
// empty or unknown-type frames give a *FrameError; the stream is then out
// of sync and must not be read further.
func (fr *Reader) Next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:4]); err != nil {
		return Frame{}, err // io.EOF at a boundary, ErrUnexpectedEOF inside a header
	}
	n := binary.BigEndian.Uint32(fr.hdr[:4])
	if n == 0 {
		return Frame{}, &FrameError{Op: "read", Len: n, Detail: "empty frame", Err: ErrFrameMalformed}
	}
	if uint64(n) > uint64(fr.max) {
		// Refuse before allocating: the header is peer-controlled.
		return Frame{}, &FrameError{Op: "read", Len: n, Detail: fmt.Sprintf("length above bound %d", fr.max), Err: ErrFrameTooLarge}
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[4:5]); err != nil {
		return Frame{}, unexpected(err)
	}
	t := FrameType(fr.hdr[4])
	if !t.known() {
		return Frame{}, &FrameError{Op: "read", Len: n, Type: t, Detail: "unknown type", Err: ErrFrameMalformed}
	}
	plen := int(n) - 1
	if fr.pooled && t.isData() && plen <= MaxDataChunk {
		// Read the data straight into a buffer the consumer will own: one
		// copy fewer on the relay's hot path.
		c := newChunk(plen)
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
func (fr *Reader) NextChunk() (Frame, error) {
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
