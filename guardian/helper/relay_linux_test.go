//go:build linux

package helper

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// relayRig runs readHost and writeStdin of a test helper between two real
// pipes: the test writes host frames into hostW and reads the target's
// stdin from targetR.
type relayRig struct {
	h       *helper
	hostW   *os.File
	targetR *os.File
	writer  *wire.Writer
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	hostR, hostW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	targetR, targetW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHelper()
	h.hostIn = hostR
	h.cleanup = make(chan struct{})
	h.stdinQ = make(chan *[]byte, stdinQueue)
	h.stdinClosed = make(chan time.Time, 1)
	h.stdinW = targetW
	if h.stdinRC, err = targetW.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	go h.writeStdin()
	go h.readHost(wire.NewReader(hostR, wire.MaxFrameLen))
	t.Cleanup(func() {
		hostW.Close()
		hostR.Close()
		targetR.Close()
	})
	return &relayRig{h: h, hostW: hostW, targetR: targetR, writer: wire.NewWriter(hostW)}
}

// stop ends the relay as cleanup does: the host hangs up (readHost ends),
// writeStdin flushes what is queued and closes the target's stdin.
func (r *relayRig) stop(t *testing.T) {
	t.Helper()
	_ = r.hostW.Close()
	if ev := <-r.h.hostEv; ev.err != io.EOF {
		t.Fatalf("host reader ended with %v", ev.err)
	}
	close(r.h.cleanup)
	<-r.h.stdinClosed
}

// The relay's fast path (writeDirect, straight from readHost) and its
// queue (writeStdin) together are the reference relay: the target reads
// exactly the host's stdin bytes, in order, whatever mix of paths they
// took. Frames of random sizes up to a data chunk, against a target that
// pauses now and then so the pipe fills, force partial direct writes,
// queueing behind a busy writer and returns to the fast path.
func TestRelayDirectAndQueuedKeepOrder(t *testing.T) {
	r := newRelayRig(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	got := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 7000)
		rr := rand.New(rand.NewPCG(3, 4))
		for {
			if rr.IntN(8) == 0 {
				time.Sleep(time.Duration(rr.IntN(300)) * time.Microsecond)
			}
			n, err := r.targetR.Read(buf[:1+rr.IntN(len(buf)-1)])
			b.Write(buf[:n])
			if err != nil {
				got <- b.Bytes()
				return
			}
		}
	}()
	for i := 0; i < 3000; i++ {
		n := 1 + rng.IntN(200)
		if rng.IntN(10) == 0 {
			n = 1 + rng.IntN(wire.MaxDataChunk)
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		want = append(want, p...)
		if err := r.writer.WriteFrame(wire.FrameStdin, p); err != nil {
			t.Fatal(err)
		}
	}
	r.stop(t)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("target read %d bytes, want the %d sent in order (first difference at %d)", len(b), len(want), firstDiff(b, want))
	}
	if d := r.h.stdinDropped.Load(); d != 0 {
		t.Fatalf("dropped %d bytes", d)
	}
	if q := r.h.stdinQueued.Load(); q != 0 {
		t.Fatalf("stdinQueued %d after the flush", q)
	}
	// Both paths ran, so the property covers their interleaving.
	if d, q := r.h.stdinDirect.Load(), r.h.stdinViaQueue.Load(); d == 0 || q == 0 {
		t.Fatalf("frames written directly %d, queued %d: want both", d, q)
	}
	t.Logf("frames written directly %d, queued %d", r.h.stdinDirect.Load(), r.h.stdinViaQueue.Load())
}

// Once the target's stdin breaks, every later byte is dropped and counted,
// on either path: what the target read is a prefix of the stream and
// StdinDroppedBytes covers the rest (what lease.neverReached relies on).
func TestRelayDropsASuffixOnceStdinBreaks(t *testing.T) {
	r := newRelayRig(t)
	rng := rand.New(rand.NewPCG(5, 6))
	var want []byte
	read := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for b.Len() < 100_000 {
			n, err := r.targetR.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		_ = r.targetR.Close() // the target goes away mid-stream
		read <- b.Bytes()
	}()
	var got []byte
	for i := 0; i < 400; i++ {
		n := 1 + rng.IntN(4000)
		p := bytes.Repeat([]byte{byte(i)}, n)
		want = append(want, p...)
		if err := r.writer.WriteFrame(wire.FrameStdin, p); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			got = <-read
		}
	}
	r.stop(t)
	if !bytes.HasPrefix(want, got) {
		t.Fatalf("the target read %d bytes that are not a prefix of the stream (first difference at %d)", len(got), firstDiff(got, want))
	}
	// Bytes written into the pipe but not read before the close are
	// neither read nor dropped (the pipe held them), so the dropped count
	// is at most the unread rest, and it includes every byte after the
	// pipe broke: the stream's last byte sits in no pipe.
	dropped := r.h.stdinDropped.Load()
	if dropped <= 0 || dropped > int64(len(want)-len(got)) {
		t.Fatalf("dropped %d of the %d unread bytes", dropped, len(want)-len(got))
	}
	if !r.h.stdinBroken {
		t.Fatal("stdin not marked broken")
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
