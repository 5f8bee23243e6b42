package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
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
	if rep, err := l.Verify(ctx, nil); err != nil || rep.Events != 5 {
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
	if _, err := l.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// blockingObserver holds the syncer until released, to fill the pipeline.
type blockingObserver struct {
	release chan struct{}
	once    sync.Once
}

func (b *blockingObserver) Committed([]ledger.Record) { <-b.release }

func TestQueueBackpressure(t *testing.T) {
	obs := &blockingObserver{release: make(chan struct{})}
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir(), QueueLen: 2, MaxBatchEvents: 1, BeforeAck: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer close(obs.release)
	// Fill: one batch blocked in the syncer, the in-flight channel, the
	// committer's hand, and the queue. Then an append must block and give up
	// with its context, not grow memory.
	var wg sync.WaitGroup
	results := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := l.Append(ctx, draft("a", "s", 1))
			results <- err
		})
	}
	wg.Wait()
	close(results)
	var queuedTimeout, notQueued int
	for err := range results {
		switch {
		case errors.Is(err, ledger.ErrUnacknowledged):
			queuedTimeout++
		case errors.Is(err, context.DeadlineExceeded):
			notQueued++
		default:
			t.Errorf("unexpected result %v", err)
		}
	}
	// Capacity with one event per batch: one batch in the syncer, four
	// applied, one in the applier's hand, four sealed, one in the committer's
	// hand, two in the queue.
	if queuedTimeout > 13 || notQueued != 64-queuedTimeout {
		t.Fatalf("%d appends queued, %d refused by the full queue; want at most 13 queued", queuedTimeout, notQueued)
	}
}

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
	l := open(t, t.TempDir())
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
	time.Sleep(time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Everything acknowledged before Close returned is durable.
	l2 := open(t, l.Dir())
	defer l2.Close()
	for _, s := range acked {
		if _, err := l2.Get(s); err != nil {
			t.Fatalf("acked seq %d lost: %v", s, err)
		}
	}
}

func TestSnapshots(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	if _, _, err := l.LoadSnapshot("proj"); !errors.Is(err, ledger.ErrNoSnapshot) {
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
	if _, err := l.Verify(context.Background(), nil); err != nil {
		t.Fatalf("snapshots disturb verification: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	appendN(t, l, 250)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(ledger.NewCollector(l)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			got[mf.GetName()] = m.GetCounter().GetValue()
		} else {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	if got["leaseledger_head_seq"] != 250 || got["leaseledger_appended_events_total"] != 250 ||
		got["leaseledger_commits_total"] < 1 || got["leaseledger_commits_total"] > 250 || got["leaseledger_failed"] != 0 {
		t.Fatalf("metrics %v", got)
	}
}

func TestCancelledContextNeverCommits(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		if _, err := l.Append(ctx, draft("a", "s", 1)); !errors.Is(err, context.Canceled) {
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
	if _, err := l.Append(context.Background(), draft("a", "s", 1)); !errors.Is(err, ledger.ErrClock) {
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
	if _, err := ledger.VerifyDir(context.Background(), dir, nil); !errors.Is(err, ledger.ErrNoLedger) {
		t.Fatalf("VerifyDir on a missing dir: %v", err)
	}
}

// A read callback may call the ledger (here: Append) while Close runs:
// no deadlock, and the nested call gets ErrClosed or succeeds.
func TestReadCallbackReentersDuringClose(t *testing.T) {
	l := open(t, t.TempDir())
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
				time.Sleep(20 * time.Millisecond) // let Close start waiting
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
	v, closer, err := db.Get([]byte("m/head"))
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), v...)
	closer.Close()
	bad[len(bad)-1] ^= 1
	_ = db.Set([]byte("m/head"), bad, pebble.Sync)
	db.Close()
	if _, err := ledger.Open(ledger.Options{Dir: dir}); !errors.Is(err, ledger.ErrCorrupt) {
		t.Fatalf("Open with a corrupted head hash: %v", err)
	}
}
