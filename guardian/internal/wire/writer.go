package wire

import (
	"encoding/binary"
	"io"
	"sync"
)

// AppendFrame appends the encoding of one frame to dst. It returns a
// *FrameError (ErrFrameTooLarge) when the frame would exceed MaxFrameLen.
func AppendFrame(dst []byte, t FrameType, payload []byte) ([]byte, error) {
	if len(payload)+1 > MaxFrameLen {
		return dst, &FrameError{Op: "write", Len: uint32(min(len(payload)+1, 1<<31)), Type: t, Detail: "payload above bound", Err: ErrFrameTooLarge}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)+1))
	dst = append(dst, byte(t))
	return append(dst, payload...), nil
}

// Writer encodes frames onto a stream. Each frame goes out in one Write
// call, and concurrent callers are serialized, so frames from different
// goroutines never interleave.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WriteInPlace writes one frame whose payload is already in
// frame[HeaderLen:]; it fills in the header and writes frame in one call,
// without copying the payload. It is the relay's hot path.
func (fw *Writer) WriteInPlace(t FrameType, frame []byte) error {
	if len(frame) < HeaderLen {
		return &FrameError{Op: "write", Type: t, Detail: "no room for the header", Err: ErrFrameMalformed}
	}
	n := len(frame) - HeaderLen + 1
	if n > MaxFrameLen {
		return &FrameError{Op: "write", Len: uint32(min(n, 1<<31)), Type: t, Detail: "payload above bound", Err: ErrFrameTooLarge}
	}
	binary.BigEndian.PutUint32(frame, uint32(n))
	frame[4] = byte(t)
	fw.mu.Lock()
	defer fw.mu.Unlock()
	_, err := fw.w.Write(frame)
	return err
}

// WriteFrame writes one frame.
func (fw *Writer) WriteFrame(t FrameType, payload []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	b, err := AppendFrame(fw.buf[:0], t, payload)
	if err != nil {
		return err
	}
	fw.buf = b
	_, err = fw.w.Write(b)
	if cap(fw.buf) > 2*(MaxDataChunk+HeaderLen) {
		fw.buf = nil // do not pin a large receipt buffer for the session's life
	}
	return err
}
