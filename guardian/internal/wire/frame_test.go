package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	fw := NewWriter(&buf)
	payloads := [][]byte{nil, []byte("x"), bytes.Repeat([]byte("y"), MaxDataChunk)}
	for i, p := range payloads {
		if err := fw.WriteFrame(FrameType(FrameStdin+FrameType(i%2)), p); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewReader(&buf, MaxFrameLen)
	for i, p := range payloads {
		f, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != FrameType(FrameStdin+FrameType(i%2)) || !bytes.Equal(f.Payload, p) {
			t.Fatalf("frame %d: got type %s len %d", i, f.Type, len(f.Payload))
		}
	}
	if _, err := fr.Next(); err != io.EOF {
		t.Fatalf("want io.EOF at boundary, got %v", err)
	}
}

func TestFrameFaults(t *testing.T) {
	hdr := func(n uint32, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), rest...)
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"oversized", hdr(0xFFFFFFFF, byte(FrameStdin)), ErrFrameTooLarge},
		{"just over bound", hdr(MaxFrameLen+1, byte(FrameStdin)), ErrFrameTooLarge},
		{"empty", hdr(0), ErrFrameMalformed},
		{"unknown type", hdr(1, 0x7f), ErrFrameMalformed},
		{"truncated header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"truncated payload", hdr(10, byte(FrameStdin), 'a'), io.ErrUnexpectedEOF},
		{"missing type", hdr(3), io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.in), MaxFrameLen).Next()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			var fe *FrameError
			if errors.Is(c.want, ErrFrameMalformed) || errors.Is(c.want, ErrFrameTooLarge) {
				if !errors.As(err, &fe) {
					t.Fatalf("want *FrameError, got %T", err)
				}
			}
		})
	}
}

func TestFrameReaderDoesNotAllocateForOversizedHeader(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, 0xFFFFFFF0)
	allocs := testing.AllocsPerRun(100, func() {
		fr := Reader{r: bytes.NewReader(in), max: MaxFrameLen}
		_, _ = fr.Next()
	})
	// The FrameError, its message and the reader; nothing proportional to
	// the announced length.
	if allocs > 8 {
		t.Fatalf("allocs = %v", allocs)
	}
}

func TestAppendFrameRefusesOversized(t *testing.T) {
	if _, err := AppendFrame(nil, FrameStdout, make([]byte, MaxFrameLen)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v", err)
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader: it must never
// panic, never return a frame above its bound, and frames it returns must
// re-encode to the bytes it consumed.
func FuzzReadFrame(f *testing.F) {
	seed, _ := AppendFrame(nil, FrameStdout, []byte("hello"))
	f.Add(seed, 64)
	f.Add(binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF), 1024)
	f.Add([]byte{0, 0, 0, 1, byte(FrameReceipt)}, 16)
	f.Add([]byte{0, 0, 0, 2, 0x42, 0}, 16)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max <= 0 || max > 1<<16 {
			max = 1 << 16
		}
		fr := NewReader(bytes.NewReader(data), max)
		consumed := 0
		for {
			fm, err := fr.Next()
			if err != nil {
				return
			}
			if len(fm.Payload)+1 > max {
				t.Fatalf("frame of %d bytes above bound %d", len(fm.Payload)+1, max)
			}
			enc, err := AppendFrame(nil, fm.Type, fm.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, data[consumed:consumed+len(enc)]) {
				t.Fatal("re-encoding differs from input")
			}
			consumed += len(enc)
		}
	})
}

// The relay's hot paths (in-place frames, pooled data payloads) produce and
// read exactly what WriteFrame and Next do.
func TestInPlaceFramesAndPooledChunks(t *testing.T) {
	var wire bytes.Buffer
	fw := NewWriter(&wire)
	payload := bytes.Repeat([]byte("relay"), 1000)
	buf := append(make([]byte, HeaderLen), payload...)
	if err := fw.WriteInPlace(FrameStdout, buf); err != nil {
		t.Fatal(err)
	}
	if err := fw.WriteFrame(FrameStdout, payload); err != nil {
		t.Fatal(err)
	}
	if err := fw.WriteFrame(FrameControl, []byte{ControlClose}); err != nil {
		t.Fatal(err)
	}
	if err := fw.WriteInPlace(FrameStdout, []byte{1, 2}); err == nil {
		t.Fatal("a buffer without room for the header was accepted")
	}
	fr := NewReader(&wire, MaxFrameLen)
	var kept []*[]byte
	for i := range 2 {
		f, err := fr.NextChunk()
		if err != nil || f.Type != FrameStdout {
			t.Fatalf("frame %d: %v %v", i, f.Type, err)
		}
		c := f.TakeChunk()
		kept = append(kept, c)
	}
	f, err := fr.NextChunk()
	if err != nil || f.Type != FrameControl || !bytes.Equal(f.Payload, []byte{ControlClose}) {
		t.Fatalf("control frame: %v %v", f, err)
	}
	// Taken chunks stay valid after later reads.
	for i, c := range kept {
		if !bytes.Equal(*c, payload) {
			t.Fatalf("chunk %d corrupted", i)
		}
		PutChunk(c)
	}
	if _, err := fr.NextChunk(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}
