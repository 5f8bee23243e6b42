package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"pgregory.net/rapid"
)

// aheadLog returns an open ledger (closed by the test's cleanup) holding n
// events of three kinds over five activations and three sessions, their
// sizes varying with a tool name of 1 to 128 bytes.
func aheadLog(t testing.TB, n int) *ledger.Ledger {
	t.Helper()
	l := open(t, t.TempDir())
	t.Cleanup(func() { l.Close() })
	const per = 100
	for i := 0; i < n; i += per {
		ds := make([]events.Draft, 0, per)
		for j := i; j < min(i+per, n); j++ {
			a, s := fmt.Sprintf("a%d", j%5), fmt.Sprintf("s%d", j%3)
			switch j % 7 {
			case 3:
				ds = append(ds, events.Draft{Activation: a, Session: s, Payload: &events.LeaseTerminated{Reason: "revoked"}})
			case 5:
				ds = append(ds, events.Draft{Session: s, Payload: &events.SessionEnded{LeasesTerminated: 1}})
			default:
				ds = append(ds, events.Draft{Activation: a, Session: s, Server: "srv",
					Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", j), Tool: strings.Repeat("t", 1+j*37%128), Digest: fp}})
			}
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// scanCall is one call of a scan's fn.
type scanCall struct {
	seq ledger.Seq
	raw []byte
}

// scanRecorder returns an fn that records its calls (the bytes copied) and
// returns fail at its call number failAt (counted from 0; that call is
// recorded too).
func scanRecorder(calls *[]scanCall, failAt int, fail error) func(ledger.Seq, []byte) error {
	return func(seq ledger.Seq, raw []byte) error {
		*calls = append(*calls, scanCall{seq, bytes.Clone(raw)})
		if len(*calls)-1 == failAt {
			return fail
		}
		return nil
	}
}

// ScanAhead makes exactly Scan's calls and returns the same result, for
// random queries (ranges, indexes, filters, invalid identifiers), random
// bounds (chunks smaller than one event included) and an fn error at a
// random call.
func TestScanAheadTwin(t *testing.T) {
	const n = 300
	l := aheadLog(t, n)
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		q := ledger.Query{
			From:       ledger.Seq(rapid.IntRange(0, n+5).Draw(rt, "from")),
			To:         ledger.Seq(rapid.IntRange(0, n+5).Draw(rt, "to")),
			Activation: rapid.SampledFrom([]string{"", "", "a0", "a3", "a9", "bad id"}).Draw(rt, "activation"),
			Session:    rapid.SampledFrom([]string{"", "", "s1", "s9", "bad/id"}).Draw(rt, "session"),
			Kind:       events.Kind(rapid.SampledFrom([]string{"", "", "call.admitted", "lease.terminated", "session.ended", "no.such"}).Draw(rt, "kind")),
		}
		failAt := rapid.IntRange(-1, n).Draw(rt, "failAt")
		fail := errors.New("fn failed")
		var want, got []scanCall
		wantErr := l.Scan(ctx, q, scanRecorder(&want, failAt, fail))
		var gotErr error
		if rapid.Bool().Draw(rt, "constants") {
			gotErr = l.ScanAhead(ctx, q, scanRecorder(&got, failAt, fail))
		} else {
			chunkBytes := rapid.IntRange(1, 4096).Draw(rt, "chunkBytes")
			chunks := rapid.IntRange(1, 5).Draw(rt, "chunks")
			chunkEvents := rapid.IntRange(1, 64).Draw(rt, "chunkEvents")
			gotErr = l.ScanAheadSized(ctx, q, scanRecorder(&got, failAt, fail), chunkBytes, chunks, chunkEvents, nil)
		}
		if len(got) != len(want) {
			rt.Fatalf("ScanAhead made %d calls, Scan %d", len(got), len(want))
		}
		for i := range want {
			if got[i].seq != want[i].seq || !bytes.Equal(got[i].raw, want[i].raw) {
				rt.Fatalf("call %d: ScanAhead seq %d (%d bytes), Scan seq %d (%d bytes)", i, got[i].seq, len(got[i].raw), want[i].seq, len(want[i].raw))
			}
		}
		switch {
		case wantErr == fail || gotErr == fail:
			if gotErr != wantErr {
				rt.Fatalf("fn's error: ScanAhead returned %v, Scan %v", gotErr, wantErr)
			}
		case (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error():
			rt.Fatalf("ScanAhead returned %v, Scan %v", gotErr, wantErr)
		case wantErr != nil:
			var le *ledger.Error
			if !errors.As(gotErr, &le) || errors.Is(wantErr, events.ErrUnknownKind) != errors.Is(gotErr, events.ErrUnknownKind) {
				rt.Fatalf("ScanAhead's error %v is not Scan's kind of error %v", gotErr, wantErr)
			}
		}
	})
}

// On damaged storage ScanAhead hands fn the events Scan hands it and then
// returns Scan's ErrCorrupt, naming the same range, whatever the bounds.
func TestScanAheadDamagedTwin(t *testing.T) {
	const n, bad = 400, 200
	l, err := ledger.Open(ledger.Options{Dir: damagedLedger(t, n, bad), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for _, q := range []ledger.Query{{}, {From: bad - 1, To: bad + 1}, {Activation: ledgertest.Draft(bad).Activation}} {
		for _, size := range []int{1, 512, ledger.ScanAheadChunkBytes} {
			var want, got []scanCall
			wantErr := l.Scan(ctx, q, scanRecorder(&want, -1, nil))
			gotErr := l.ScanAheadSized(ctx, q, scanRecorder(&got, -1, nil), size, 2, ledger.ScanAheadChunkEvents, nil)
			wantCorrupt(t, "ScanAhead", gotErr, bad)
			if gotErr.Error() != wantErr.Error() || len(got) != len(want) || len(got) > 0 && got[len(got)-1].seq != want[len(want)-1].seq {
				t.Fatalf("query %+v, chunks of %d bytes: ScanAhead made %d calls and returned %v; Scan %d calls and %v",
					q, size, len(got), gotErr, len(want), wantErr)
			}
		}
	}
}

// No more than the given chunks exist, none grows past its capacity, and
// every event larger than a chunk goes through the one oversize buffer,
// with a consumer slower than the reader. Stored events fit the default
// chunk.
func TestScanAheadBounded(t *testing.T) {
	if events.MaxEventBytes > ledger.ScanAheadChunkBytes {
		t.Fatalf("a stored event (up to %d bytes) may not fit ScanAheadChunkBytes=%d", events.MaxEventBytes, ledger.ScanAheadChunkBytes)
	}
	const n, chunks, chunkEvents = 500, 2, 4
	l := aheadLog(t, n)
	ctx := context.Background()
	var sizes []int
	if err := l.Scan(ctx, ledger.Query{}, func(_ ledger.Seq, raw []byte) error {
		sizes = append(sizes, len(raw))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	chunkBytes := (slices.Min(sizes) + slices.Max(sizes)) / 2
	big := 0
	for _, s := range sizes {
		if s > chunkBytes {
			big++
		}
	}
	if big == 0 || big == n {
		t.Fatalf("%d of %d events larger than %d bytes: the test needs some of both", big, n, chunkBytes)
	}
	var st ledger.AheadStats
	calls := 0
	err := l.ScanAheadSized(ctx, ledger.Query{}, func(ledger.Seq, []byte) error {
		runtime.Gosched() // let the reader run ahead
		calls++
		return nil
	}, chunkBytes, chunks, chunkEvents, func(s ledger.AheadStats) { st = s })
	if err != nil || calls != n {
		t.Fatalf("ScanAheadSized: %d calls, %v", calls, err)
	}
	if st.Chunks < 1 || st.Chunks > chunks {
		t.Fatalf("%d chunks made, bound %d", st.Chunks, chunks)
	}
	if st.MaxBufCap != chunkBytes {
		t.Fatalf("a chunk's buffer had capacity %d, want %d", st.MaxBufCap, chunkBytes)
	}
	if st.BigCopies != big {
		t.Fatalf("%d events went through the oversize buffer, want %d", st.BigCopies, big)
	}
}

// fn's error, a panic in fn and ctx's cancellation end the reader before
// ScanAhead returns (its report comes first), the read is released (Close
// returns) and no call follows the failing one.
func TestScanAheadStops(t *testing.T) {
	const n = 3000 // more than the chunks hold: the reader is still reading
	run := func(t *testing.T, ctx context.Context, fn func(ledger.Seq, []byte) error) (panicked any, err error) {
		l := aheadLog(t, n)
		ended := false
		func() {
			defer func() { panicked = recover() }()
			err = l.ScanAheadSized(ctx, ledger.Query{}, fn, ledger.ScanAheadChunkBytes, ledger.ScanAheadChunks, ledger.ScanAheadChunkEvents,
				func(ledger.AheadStats) { ended = true })
		}()
		if !ended {
			t.Fatal("ScanAhead returned before its reader ended")
		}
		closed := make(chan error, 1)
		go func() { closed <- l.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close still waits for the read ScanAhead ended")
		}
		return panicked, err
	}
	t.Run("fn error", func(t *testing.T) {
		fail := errors.New("fn failed")
		var calls []scanCall
		_, err := run(t, context.Background(), scanRecorder(&calls, 5, fail))
		if err != fail || len(calls) != 6 {
			t.Fatalf("%d calls, error %v; want 6 calls and fn's error", len(calls), err)
		}
	})
	t.Run("panic", func(t *testing.T) {
		calls := 0
		p, _ := run(t, context.Background(), func(ledger.Seq, []byte) error {
			if calls++; calls == 5 {
				panic("fn panicked")
			}
			return nil
		})
		if p != "fn panicked" || calls != 5 {
			t.Fatalf("%d calls, recovered %v", calls, p)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		calls := 0
		_, err := run(t, ctx, func(ledger.Seq, []byte) error {
			if calls++; calls == 10 {
				cancel()
			}
			return nil
		})
		var le *ledger.Error
		if !errors.Is(err, context.Canceled) || !errors.As(err, &le) || calls != 10 {
			t.Fatalf("%d calls, error %v; want 10 calls and an *Error wrapping context.Canceled", calls, err)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := 0
		_, err := run(t, ctx, func(ledger.Seq, []byte) error { calls++; return nil })
		if !errors.Is(err, context.Canceled) || calls != 0 {
			t.Fatalf("%d calls, error %v; want none and context.Canceled", calls, err)
		}
	})
}

// TestScanAheadContextTwin: a context that ends leaves ScanAhead with
// Scan's result: nil for a range with no events left (already cancelled,
// or cancelled by fn at the last event), the context's error after the
// same calls when events remain.
func TestScanAheadContextTwin(t *testing.T) {
	const n = 700
	l := aheadLog(t, n)
	type outcome struct {
		calls    int
		err      error
		canceled bool
	}
	scans := map[string]func(context.Context, ledger.Query, func(ledger.Seq, []byte) error) error{"Scan": l.Scan, "ScanAhead": l.ScanAhead}
	run := func(name string, q ledger.Query, cancelAt int, cancelFirst bool) outcome {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if cancelFirst {
			cancel()
		}
		calls := 0
		err := scans[name](ctx, q, func(ledger.Seq, []byte) error {
			if calls++; calls == cancelAt {
				cancel()
			}
			return nil
		})
		return outcome{calls, err, errors.Is(err, context.Canceled)}
	}
	cases := []struct {
		name        string
		q           ledger.Query
		cancelAt    int
		cancelFirst bool
		want        outcome
	}{
		{"cancelled, nothing in range", ledger.Query{From: n + 5}, 0, true, outcome{0, nil, false}},
		{"cancelled by fn at the last event", ledger.Query{}, n, false, outcome{n, nil, false}},
		{"cancelled by fn at the last event of a range", ledger.Query{From: 100, To: 300}, 201, false, outcome{201, nil, false}},
		{"cancelled by fn midway", ledger.Query{}, 350, false, outcome{350, nil, true}},
	}
	for _, c := range cases {
		for range 30 { // the reader may be ahead or behind: try both
			for _, name := range []string{"Scan", "ScanAhead"} {
				got := run(name, c.q, c.cancelAt, c.cancelFirst)
				if got.calls != c.want.calls || got.canceled != c.want.canceled || (got.err == nil) != (c.want.err == nil && !c.want.canceled) {
					t.Fatalf("%s, %s: %d calls, error %v; want %d calls, canceled %v", c.name, name, got.calls, got.err, c.want.calls, c.want.canceled)
				}
			}
		}
	}
}

// A closed ledger refuses ScanAhead as it refuses Scan.
func TestScanAheadClosed(t *testing.T) {
	l := open(t, t.TempDir())
	appendN(t, l, 3)
	l.Close()
	err := l.ScanAhead(context.Background(), ledger.Query{}, func(ledger.Seq, []byte) error { return nil })
	if !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("ScanAhead on a closed ledger: %v", err)
	}
}

// Close waits for a ScanAhead in progress: the reader goes on reading
// (beyond what its chunks held when Close began) and every event arrives.
func TestScanAheadCloseWaits(t *testing.T) {
	closeWaits := make(chan struct{})
	l, err := ledger.Open(ledger.WithHooks(ledger.Options{Dir: t.TempDir()},
		ledger.Hooks{CloseWaitsReaders: func() { close(closeWaits) }}))
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000 // well beyond ScanAheadChunks × ScanAheadChunkBytes
	appendN(t, l, n)
	inFn, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	calls := 0
	go func() {
		done <- l.ScanAhead(context.Background(), ledger.Query{}, func(ledger.Seq, []byte) error {
			if calls++; calls == 1 {
				close(inFn)
				<-release
			}
			return nil
		})
	}()
	<-inFn
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	<-closeWaits
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) during a ScanAhead", err)
	default:
	}
	close(release)
	if err := <-done; err != nil || calls != n {
		t.Fatalf("ScanAhead during Close: %d of %d calls, %v", calls, n, err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// Replay a log into a projection with the iteration running ahead of the
// callback.
func ExampleLedger_ScanAhead() {
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	if _, err := l.Append(ctx,
		events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked"}},
		events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: "revoked"}}); err != nil {
		panic(err)
	}
	kinds := map[events.Kind]int{} // a stand-in for a projection
	err = l.ScanAhead(ctx, ledger.Query{}, func(seq ledger.Seq, raw []byte) error {
		env, err := events.Decode(raw) // raw is valid only during the call
		if err != nil {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
		kinds[env.Kind]++
		return nil
	})
	fmt.Println(kinds, err)
	// Output:
	// map[lease.revoked:1 lease.terminated:1] <nil>
}
