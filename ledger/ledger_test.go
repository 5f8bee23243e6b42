package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	if os.Getenv(importCrashEnv) != "" {
		importCrashChild()
		return
	}
	goleak.VerifyTestMain(m)
}

var fp = strings.Repeat("ab", 32)

// draft returns a small valid event for activation a, session s.
func draft(a, s string, i int) events.Draft {
	return events.Draft{Activation: a, Session: s, Server: "srv",
		Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Digest: fp}}
}

func open(t testing.TB, dir string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func TestAppendReadReopen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	ctx := context.Background()
	if h := l.Head(); h.Seq != 0 || h.Hash != (events.Hash{}) {
		t.Fatalf("empty head %+v", h)
	}
	seqs, err := l.Append(ctx, draft("a1", "s1", 1), draft("a2", "s1", 2), draft("a1", "s2", 3))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[1 2 3]" {
		t.Fatalf("seqs %v", seqs)
	}
	acks, err := l.AppendAcks(ctx, events.Draft{Payload: &events.LeaseTerminated{Reason: "terminate_all"}})
	if err != nil || acks[0].Seq != 4 {
		t.Fatalf("AppendAcks %v %v", acks, err)
	}
	head := l.Head()
	if head.Seq != 4 || head.Hash != acks[0].Hash {
		t.Fatalf("head %+v", head)
	}
	e3, err := l.Get(3)
	if err != nil || e3.Activation != "a1" || e3.Session != "s2" {
		t.Fatalf("Get(3) = %+v, %v", e3, err)
	}
	e2, _ := l.Get(2)
	if e3.Prev != e2.Hash {
		t.Fatal("seq 3 does not link to seq 2")
	}
	if _, err := l.Get(5); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Get beyond head: %v", err)
	}

	collect := func(q ledger.Query) []ledger.Seq {
		t.Helper()
		var out []ledger.Seq
		for env, err := range l.Events(ctx, q) {
			if err != nil {
				t.Fatalf("Events(%+v): %v", q, err)
			}
			out = append(out, ledger.Seq(env.Seq))
		}
		return out
	}
	for _, c := range []struct {
		q    ledger.Query
		want string
	}{
		{ledger.Query{}, "[1 2 3 4]"},
		{ledger.Query{From: 2, To: 3}, "[2 3]"},
		{ledger.Query{Activation: "a1"}, "[1 3]"},
		{ledger.Query{Activation: "a1", From: 2}, "[3]"},
		{ledger.Query{Session: "s1"}, "[1 2]"},
		{ledger.Query{Kind: "lease.terminated"}, "[4]"},
		{ledger.Query{Kind: "call.admitted", Activation: "a1", Session: "s2"}, "[3]"},
		{ledger.Query{Activation: "nobody"}, "[]"},
		{ledger.Query{From: 9}, "[]"},
	} {
		if got := fmt.Sprint(collect(c.q)); got != c.want {
			t.Errorf("query %+v = %s, want %s", c.q, got, c.want)
		}
	}
	if err := l.Scan(ctx, ledger.Query{Activation: "a/b"}, func(ledger.Seq, []byte) error { return nil }); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("bad activation query: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Append(ctx, draft("a", "s", 1)); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	// Every operation error is a *ledger.Error naming its operation.
	var le *ledger.Error
	for op, err := range map[string]error{
		"append":        func() error { _, err := l.Append(ctx, draft("a", "s", 1)); return err }(),
		"get":           func() error { _, err := l.Get(1); return err }(),
		"scan":          l.Scan(ctx, ledger.Query{}, func(ledger.Seq, []byte) error { return nil }),
		"load snapshot": func() error { _, _, err := l.LoadSnapshot("p"); return err }(),
		"save snapshot": l.SaveSnapshot("p", 0, nil),
	} {
		if !errors.Is(err, ledger.ErrClosed) || !errors.As(err, &le) || le.Op != op {
			t.Errorf("%s after Close: %v", op, err)
		}
	}

	l = open(t, dir)
	defer l.Close()
	if l.Head() != head {
		t.Fatalf("head after reopen %+v, want %+v", l.Head(), head)
	}
	seqs, err = l.Append(ctx, draft("a3", "", 5))
	if err != nil || seqs[0] != 5 {
		t.Fatalf("append after reopen: %v %v", seqs, err)
	}
	e5, _ := l.Get(5)
	if e5.Prev != head.Hash {
		t.Fatal("first event after reopen does not chain to the stored head")
	}
	if e4, _ := l.Get(4); e5.Time.Before(e4.Time) {
		t.Fatal("time went backwards across reopen")
	}
	if rep, err := verify.Ledger(ctx, l, verify.Options{}); err != nil || rep.Events != 5 {
		t.Fatalf("Verify: %+v %v", rep, err)
	}
}

func TestInvalidAppendWritesNothing(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	ctx := context.Background()
	if _, err := l.Append(ctx, draft("a", "s", 1)); err != nil {
		t.Fatal(err)
	}
	before := l.Head()
	bad := draft("a", "s", 2)
	bad.Activation = "not valid!"
	_, err := l.Append(ctx, draft("a", "s", 3), bad, draft("a", "s", 4))
	if !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	var fe *events.FieldError
	if !errors.As(err, &fe) || fe.Field != "activation" {
		t.Fatalf("err %v does not name the field", err)
	}
	if l.Head() != before {
		t.Fatal("a refused call wrote something")
	}
	if _, err := l.Append(ctx, make([]events.Draft, ledger.MaxAppendEvents+1)...); !errors.Is(err, ledger.ErrTooManyEvents) {
		t.Fatalf("oversized append: %v", err)
	}
}

func TestConcurrentAppendersGapless(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	const writers, per = 64, 40
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[ledger.Seq]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				n := 1 + (w+i)%3 // mixed batch sizes
				ds := make([]events.Draft, n)
				for j := range ds {
					ds[j] = draft(fmt.Sprintf("w%d", w), "s", i)
				}
				seqs, err := l.Append(ctx, ds...)
				if err != nil {
					t.Error(err)
					return
				}
				for j := 1; j < len(seqs); j++ {
					if seqs[j] != seqs[j-1]+1 {
						t.Errorf("one call's seqs are not consecutive: %v", seqs)
					}
				}
				mu.Lock()
				for _, s := range seqs {
					if seen[s] {
						t.Errorf("seq %d acknowledged twice", s)
					}
					seen[s] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	head := l.Head().Seq
	if int(head) != len(seen) {
		t.Fatalf("head %d but %d seqs acknowledged", head, len(seen))
	}
	for s := ledger.Seq(1); s <= head; s++ {
		if !seen[s] {
			t.Fatalf("gap at %d", s)
		}
	}
	if _, err := verify.Ledger(ctx, l, verify.Options{}); err != nil {
		t.Fatal(err)
	}
}

// blockingObserver holds the syncer in BeforeAck until released; entered
// is closed when it first does.
type blockingObserver struct {
	release, entered chan struct{}
	once             sync.Once
}

func (b *blockingObserver) Committed([]ledger.Record) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
}

// stuckHooks returns hooks that close stuck once the committer of a ledger
// with MaxBatchEvents 1 whose BeforeAck holds the first batch has blocked
// for good: it waits for a token with 2+InflightBatches events sealed
// (the held batch, the batches in flight and the open batch). Only then
// can no token come back: with fewer sealed, the first batch still holds
// its token or has just returned it, and the committer may take it. (Its
// observer entering BeforeAck is no sign: the syncer returns the token
// just before, and the committer can take it and wait again before the
// observer runs.)
func stuckHooks() (ledger.Hooks, <-chan struct{}) {
	var sealed atomic.Int64
	var once sync.Once
	stuck := make(chan struct{})
	return ledger.Hooks{
		Sealed: func() { sealed.Add(1) },
		TokenWait: func() {
			if sealed.Load() == 2+ledger.InflightBatches {
				once.Do(func() { close(stuck) })
			}
		},
	}, stuck
}

// TestQueueBackpressure fills the pipeline and counts exactly how many
// Append calls it takes in before an appender blocks: with one event per
// batch and the syncer held in BeforeAck, that is
//
//	1                       the batch being acknowledged (held in BeforeAck)
//	+ InflightBatches       batches applied, their fsync not yet acknowledged
//	+ 1                     the open batch (one event: MaxBatchEvents is 1)
//	+ 1                     the call in the committer's hand that does not fit it
//	+ QueueLen              the queue
//
// An appender beyond that blocks and gives up with its context, never
// growing memory; so does every call taken in but the one whose batch
// BeforeAck holds: that call's payload is BeforeAck's, so it waits for
// BeforeAck and is acknowledged (payload.go). Everything taken in is
// committed once the syncer is released.
func TestQueueBackpressure(t *testing.T) {
	const queueLen = 2
	capacity := 1 + ledger.InflightBatches + 1 + 1 + queueLen
	obs := &blockingObserver{release: make(chan struct{}), entered: make(chan struct{})}
	// stuck: the committer blocked for good (stuckHooks), so nothing
	// leaves the queue. full: after that, an appender found the queue full.
	hooks, stuck := stuckHooks()
	full := make(chan struct{})
	var fullOnce sync.Once
	var probing atomicBool
	hooks.QueueFull = func() {
		if probing.Load() {
			fullOnce.Do(func() { close(full) })
		}
	}
	l, err := ledger.Open(ledger.WithHooks(ledger.Options{Dir: t.TempDir(), QueueLen: queueLen, MaxBatchEvents: 1, BeforeAck: obs}, hooks))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	results := make(chan error, 2*capacity+1)
	appendOne := func() {
		wg.Go(func() {
			_, err := l.Append(ctx, draft("a", "s", 1))
			results <- err
		})
	}
	for range 2 * capacity {
		appendOne()
	}
	waitFor(t, "the committer to block for good", stuck)
	// Once stuck, the queue only fills; wait until it holds QueueLen calls.
	queued := make(chan struct{})
	go func() {
		defer close(queued)
		for l.Stats().Queued < queueLen && ctx.Err() == nil {
			runtime.Gosched()
		}
	}()
	waitFor(t, "the queue to hold QueueLen calls", queued)
	// A probe appended now must find the queue full (a queue that held more
	// than QueueLen would take it in instead).
	probing.Store(true)
	appendOne()
	waitFor(t, "the probe to find the queue full", full)
	if q := l.Stats().Queued; q != queueLen {
		t.Fatalf("%d calls queued, QueueLen is %d", q, queueLen)
	}
	cancel()
	// Every call but the held one returns with its context.
	testproc.Eventually(t, "every call but the held one to return", func() bool { return len(results) >= 2*capacity })
	close(obs.release)
	wg.Wait()
	close(results)
	var acked, unacked, refused int
	for err := range results {
		switch {
		case err == nil:
			acked++
		case errors.Is(err, ledger.ErrUnacknowledged):
			unacked++
		case errors.Is(err, context.Canceled):
			refused++
		default:
			t.Errorf("unexpected result %v", err)
		}
	}
	if acked != 1 || acked+unacked != capacity || refused != 2*capacity+1-capacity {
		t.Fatalf("%d appends acknowledged and %d in doubt, %d refused by the full queue; want the held one acknowledged and exactly %d taken in", acked, unacked, refused, capacity)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, l.Dir())
	defer l.Close()
	if h := l.Head().Seq; int(h) != capacity {
		t.Fatalf("%d events committed, want the %d taken in", h, capacity)
	}
}

func waitFor(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

type atomicBool = atomic.Bool

func TestLockedDirectory(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	defer l.Close()
	_, err := ledger.Open(ledger.Options{Dir: dir})
	if !errors.Is(err, ledger.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}

func TestCloseDrainsQueue(t *testing.T) {
	// Hold the first batch in BeforeAck until the whole pipeline is full
	// (see TestQueueBackpressure's count), so that Close certainly meets a
	// full pipeline and a full queue. A full queue alone is not enough: an
	// appender can find it full while the committer, not yet blocked, is
	// about to take from it (then fewer calls are in flight than counted).
	obs := &blockingObserver{release: make(chan struct{}), entered: make(chan struct{})}
	hooks, stuck := stuckHooks()
	l, err := ledger.Open(ledger.WithHooks(ledger.Options{Dir: t.TempDir(), QueueLen: 8, MaxBatchEvents: 1, BeforeAck: obs}, hooks))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []ledger.Seq
	for range 32 {
		wg.Go(func() {
			seqs, err := l.Append(ctx, draft("a", "s", 1))
			if err == nil {
				mu.Lock()
				acked = append(acked, seqs...)
				mu.Unlock()
			} else if !errors.Is(err, ledger.ErrClosed) {
				t.Errorf("append during close: %v", err)
			}
		})
	}
	waitFor(t, "the committer to block for good", stuck)
	// Once stuck, the queue only fills.
	full := make(chan struct{})
	polling, stopPoll := context.WithCancel(ctx)
	t.Cleanup(stopPoll) // ends the poll if waitFor fails
	go func() {
		defer close(full)
		for l.Stats().Queued < 8 && polling.Err() == nil {
			runtime.Gosched()
		}
	}()
	waitFor(t, "the queue to fill", full)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	close(obs.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Everything acknowledged before Close returned is durable, and Close
	// committed what was queued.
	l2 := open(t, l.Dir())
	defer l2.Close()
	if len(acked) < 1+ledger.InflightBatches+1+1+8 || int(l2.Head().Seq) < len(acked) {
		t.Fatalf("%d appends acknowledged, head %d", len(acked), l2.Head().Seq)
	}
	for _, s := range acked {
		if _, err := l2.Get(s); err != nil {
			t.Fatalf("acked seq %d lost: %v", s, err)
		}
	}
}

func TestSnapshots(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	var le *ledger.Error
	if _, _, err := l.LoadSnapshot("proj"); !errors.Is(err, ledger.ErrNoSnapshot) || !errors.As(err, &le) {
		t.Fatalf("empty: %v", err)
	}
	appendN(t, l, 10)
	if err := l.SaveSnapshot("proj", 11, []byte("x")); err == nil {
		t.Fatal("snapshot beyond the head accepted")
	}
	if err := l.SaveSnapshot("bad/name", 1, nil); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if err := l.SaveSnapshot("proj", 7, []byte("state")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = open(t, dir)
	defer l.Close()
	covers, data, err := l.LoadSnapshot("proj")
	if err != nil || covers != 7 || string(data) != "state" {
		t.Fatalf("LoadSnapshot = %d %q %v", covers, data, err)
	}
	if _, err := verify.Ledger(context.Background(), l, verify.Options{}); err != nil {
		t.Fatalf("snapshots disturb verification: %v", err)
	}
}

func TestCancelledContextNeverCommits(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		var le *ledger.Error
		if _, err := l.Append(ctx, draft("a", "s", 1)); !errors.Is(err, context.Canceled) || !errors.As(err, &le) || errors.Is(err, ledger.ErrUnacknowledged) {
			t.Fatalf("append with a cancelled context: %v", err)
		}
	}
	if h := l.Head().Seq; h != 0 {
		t.Fatalf("%d events committed by cancelled calls", h)
	}
}

func TestClockOutOfRange(t *testing.T) {
	var now time.Time // zero: year 1
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var le *ledger.Error
	if _, err := l.Append(context.Background(), draft("a", "s", 1)); !errors.Is(err, ledger.ErrClock) || !errors.As(err, &le) || le.Op != "append" {
		t.Fatalf("append with a broken clock: %v", err)
	}
	now = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	if seqs, err := l.Append(context.Background(), draft("a", "s", 1)); err != nil || seqs[0] != 1 {
		t.Fatalf("the ledger did not survive a broken clock reading: %v %v", seqs, err)
	}
}

func TestNoCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if _, err := ledger.Open(ledger.Options{Dir: dir, NoCreate: true}); !errors.Is(err, ledger.ErrNoLedger) {
		t.Fatalf("NoCreate on a missing dir: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("NoCreate created the directory")
	}
}

// A read callback may call the ledger (here: Append) while Close runs:
// no deadlock, and the nested call gets ErrClosed or succeeds.
func TestReadCallbackReentersDuringClose(t *testing.T) {
	closeWaits := make(chan struct{})
	l, err := ledger.Open(ledger.WithHooks(ledger.Options{Dir: t.TempDir()},
		ledger.Hooks{CloseWaitsReaders: func() { close(closeWaits) }}))
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3)
	inCallback := make(chan struct{})
	closing := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		done <- l.Scan(context.Background(), ledger.Query{}, func(ledger.Seq, []byte) error {
			if first {
				first = false
				close(inCallback)
				<-closing
				<-closeWaits // Close waits for this very read
			}
			_, err := l.Append(context.Background(), draft("a", "s", 9))
			if err != nil && !errors.Is(err, ledger.ErrClosed) {
				return err
			}
			return nil
		})
	}()
	<-inCallback
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	close(closing)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close deadlocked against a read callback that re-entered the ledger")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesHeadHashMismatch(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	appendN(t, l, 3)
	l.Close()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.Get([]byte(keys.Head))
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), v...)
	closer.Close()
	bad[len(bad)-1] ^= 1
	_ = db.Set([]byte(keys.Head), bad, pebble.Sync)
	db.Close()
	if _, err := ledger.Open(ledger.Options{Dir: dir}); !errors.Is(err, ledger.ErrCorrupt) {
		t.Fatalf("Open with a corrupted head hash: %v", err)
	}
}

func appendN(t *testing.T, l *ledger.Ledger, n int) {
	t.Helper()
	const per = 100
	for i := 0; i < n; i += per {
		ds := make([]events.Draft, min(per, n-i))
		for j := range ds {
			ds[j] = draft(fmt.Sprintf("a%d", (i+j)%5), "s", i+j)
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
	}
}
