//go:build linux || darwin

package helper

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
	"github.com/leaseledger/leaseledger/internal/cputime"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// relayRig runs readHost and writeStdin of a test helper between two real
// pipes: the test writes host frames into hostW and reads the target's
// stdin from targetR.
type relayRig struct {
	h       *helper
	hostW   *os.File
	targetR *os.File
	writer  *wire.Writer
	// cleanupOnce closes h.cleanup: stop or the test's cleanup, whichever
	// comes first.
	cleanupOnce sync.Once
}

func newRelayRig(t testing.TB) *relayRig {
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
	h.stdinSpace = make(chan struct{}, 1)
	h.stdinClosed = make(chan time.Time, 1)
	h.stdinW = targetW
	if h.stdinRC, err = targetW.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	go h.writeStdin()
	go h.readHost(wire.NewReader(hostR, wire.MaxFrameLen))
	r := &relayRig{h: h, hostW: hostW, targetR: targetR, writer: wire.NewWriter(hostW)}
	t.Cleanup(func() {
		// Whether or not the test stopped the relay, its goroutines end:
		// readHost at the host's EOF, writeStdin at cleanup, the test's
		// reader at the target's EOF or closed pipe.
		hostW.Close()
		r.startCleanup()
		<-h.stdinClosed
		hostR.Close()
		targetR.Close()
	})
	return r
}

// startCleanup starts the relay's cleanup once.
func (r *relayRig) startCleanup() {
	r.cleanupOnce.Do(func() { close(r.h.cleanup) })
}

// stop ends the relay as cleanup does: the host hangs up (readHost ends),
// writeStdin flushes what is queued and closes the target's stdin.
func (r *relayRig) stop(t testing.TB) {
	t.Helper()
	_ = r.hostW.Close()
	if ev := <-r.h.hostEv; ev.err != io.EOF {
		t.Fatalf("host reader ended with %v", ev.err)
	}
	r.startCleanup()
	r.h.stdinClosed <- <-r.h.stdinClosed // leave the stamp for the test's cleanup
}

// waitRead waits until the target has read want bytes. A host that hangs
// up while its last chunk waits on a full queue has that chunk dropped
// (see stdinEnqueuer), so a test that expects every byte delivered waits
// for them before it hangs up.
func waitRead(t *testing.T, read *atomic.Int64, want int) {
	t.Helper()
	testproc.Eventually(t, fmt.Sprintf("the target to read the %d bytes sent", want), func() error {
		if n := read.Load(); n < int64(want) {
			return fmt.Errorf("read %d", n)
		}
		return nil
	})
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
	got := make(chan []byte, 1) // the reader never blocks, even if the test failed
	var read atomic.Int64
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
			read.Add(int64(n))
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
	waitRead(t, &read, len(want))
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

// Once a write into the target's stdin fails, every later byte is dropped
// and counted, on either path, even when the failure was transient: what
// the target read is a prefix of the stream and StdinDroppedBytes is
// exactly the rest (what lease.neverReached relies on). The failure here is
// an expired write deadline, cleared again before more frames follow: only
// the sticky stdinBroken keeps those out of the target.
func TestRelayDropsASuffixOnceStdinBreaks(t *testing.T) {
	r := newRelayRig(t)
	var read atomic.Int64
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := r.targetR.Read(buf)
			b.Write(buf[:n])
			read.Add(int64(n))
			if err != nil {
				got <- b.Bytes()
				return
			}
		}
	}()
	rng := rand.New(rand.NewPCG(5, 6))
	var want []byte
	send := func(frames int) {
		for i := 0; i < frames; i++ {
			p := bytes.Repeat([]byte{byte(len(want))}, 1+rng.IntN(4000))
			want = append(want, p...)
			if err := r.writer.WriteFrame(wire.FrameStdin, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(50)
	delivered := len(want)
	waitRead(t, &read, delivered)
	if err := r.h.stdinW.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	send(50)
	// The whole second batch is dropped before the deadline is cleared.
	waitDropped(t, r.h, len(want)-delivered)
	if err := r.h.stdinW.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	send(50)
	r.stop(t)
	b := <-got
	if !bytes.Equal(b, want[:delivered]) {
		t.Fatalf("the target read %d bytes, want the %d sent before the failure (first difference at %d)", len(b), delivered, firstDiff(b, want))
	}
	if d := r.h.stdinDropped.Load(); d != int64(len(want)-delivered) {
		t.Fatalf("dropped %d bytes, want the %d sent after the failure", d, len(want)-delivered)
	}
	if !r.h.stdinBroken {
		t.Fatal("stdin not marked broken")
	}
}

// waitDropped waits until h has dropped want bytes.
func waitDropped(t *testing.T, h *helper, want int) {
	t.Helper()
	testproc.Eventually(t, fmt.Sprintf("%d bytes dropped", want), func() error {
		if n := h.stdinDropped.Load(); n < int64(want) {
			return fmt.Errorf("dropped %d", n)
		}
		return nil
	})
}

// A chunk dropped because the host hung up on a full queue makes every
// later stdin byte dropped too, even once the queue has drained and the
// fast path would take it: otherwise the dropped bytes would leave a hole.
func TestRelayHangupDropIsSticky(t *testing.T) {
	hostR, hostW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer hostR.Close()
	targetR, targetW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer targetR.Close()
	defer targetW.Close()
	h := newTestHelper()
	h.hostIn = hostR
	h.cleanup = make(chan struct{})
	h.stdinW = targetW
	if h.stdinRC, err = targetW.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	// One chunk queued and not yet written: the queue is full and the fast
	// path is closed.
	h.stdinQ = make(chan *[]byte, 1)
	h.stdinQ <- wire.GetChunk([]byte("queued"))
	h.stdinQueued.Store(1)
	// Right after the hang-up drop, the queued chunk is written, as
	// writeStdin would: the queue is empty and the pipe has room.
	h.hangupDropHook = func() {
		b := <-h.stdinQ
		_, _ = targetW.Write(*b)
		h.stdinQueued.Add(-1)
	}
	w := wire.NewWriter(hostW)
	for _, p := range []string{"A-dropped-at-hang-up", "B-after-it"} {
		if err := w.WriteFrame(wire.FrameStdin, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	_ = hostW.Close()
	h.readHost(wire.NewReader(hostR, wire.MaxFrameLen))
	if ev := <-h.hostEv; ev.err != io.EOF {
		t.Fatalf("host reader ended with %v", ev.err)
	}
	_ = targetW.Close()
	b, err := io.ReadAll(targetR)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "queued" {
		t.Fatalf("the target read %q, want only the chunk queued before the hang-up", b)
	}
	if d, want := h.stdinDropped.Load(), int64(len("A-dropped-at-hang-up")+len("B-after-it")); d != want {
		t.Fatalf("dropped %d bytes, want %d", d, want)
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

// A chunk readHost sends after writeStdin's last drain is dropped and
// counted, not left in the queue unwritten: readHost may have seen cleanup
// not yet started just before writeStdin drained and closed the target's
// stdin (simulated by giving enqueue a cleanup channel still open).
func TestRelayNoChunkQueuedAfterLastDrain(t *testing.T) {
	r := newRelayRig(t)
	_ = r.hostW.Close()
	if ev := <-r.h.hostEv; ev.err != io.EOF {
		t.Fatalf("host reader ended with %v", ev.err)
	}
	r.startCleanup()
	r.h.stdinClosed <- <-r.h.stdinClosed
	r.h.cleanup = make(chan struct{}) // enqueue's earlier view
	q := stdinEnqueuer{h: r.h}
	if q.enqueue(wire.GetChunk([]byte("late"))) {
		t.Fatal("a chunk was queued after writeStdin's last drain")
	}
	if n, d := len(r.h.stdinQ), r.h.stdinDropped.Load(); n != 0 || d != int64(len("late")) {
		t.Fatalf("%d chunks left in the queue, %d bytes dropped", n, d)
	}
}

// BenchmarkStdinRelay compares, in one run, the stdin relay's fast path
// (the host reader writes a frame straight into the target's stdin) with
// the queue-only relay it replaced (every frame handed to writeStdin's
// goroutine, forced here by one phantom queued chunk, which closes the
// fast path): one request-sized frame at a time, as an MCP client sends a
// call, each waited for until the target has read it. It reports the wall
// time and the process CPU per frame of each, and their ratios (fast path
// over queue-only); CPU is the whole test process, so the harness's own
// share is in both and dilutes the ratio towards 1.
//
//	go test -run '^$' -bench StdinRelay ./guardian/helper/
func BenchmarkStdinRelay(b *testing.B) {
	const frame = 200 // a tools/call request's size
	type side struct {
		r         *relayRig
		ack       chan struct{}
		wall, cpu time.Duration
	}
	mk := func(queueOnly bool) *side {
		s := &side{r: newRelayRig(b), ack: make(chan struct{}, 1)}
		if queueOnly {
			s.r.h.stdinQueued.Store(1) // writeDirect sees a chunk ahead of it
		}
		go func() {
			buf := make([]byte, frame)
			for {
				if _, err := io.ReadFull(s.r.targetR, buf); err != nil {
					return
				}
				s.ack <- struct{}{}
			}
		}()
		return s
	}
	direct, queued := mk(false), mk(true)
	p := bytes.Repeat([]byte{'x'}, frame)
	run := func(s *side, n int) {
		c0, t0 := processCPU(b), time.Now()
		for range n {
			if err := s.r.writer.WriteFrame(wire.FrameStdin, p); err != nil {
				b.Fatal(err)
			}
			<-s.ack
		}
		s.wall += time.Since(t0)
		s.cpu += processCPU(b) - c0
	}
	b.ResetTimer()
	const chunk = 200
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		run(queued, n)
		run(direct, n)
	}
	b.StopTimer()
	if direct.r.h.stdinViaQueue.Load() != 0 || queued.r.h.stdinDirect.Load() != 0 {
		b.Fatalf("paths mixed: fast path queued %d frames, queue-only wrote %d directly",
			direct.r.h.stdinViaQueue.Load(), queued.r.h.stdinDirect.Load())
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(queued.wall), "queue-ns/frame")
	b.ReportMetric(per(direct.wall), "direct-ns/frame")
	b.ReportMetric(float64(direct.wall)/float64(queued.wall), "wall-ratio")
	b.ReportMetric(per(queued.cpu), "queue-cpu-ns/frame")
	b.ReportMetric(per(direct.cpu), "direct-cpu-ns/frame")
	b.ReportMetric(float64(direct.cpu)/float64(queued.cpu), "cpu-ratio")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	d, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return d
}
