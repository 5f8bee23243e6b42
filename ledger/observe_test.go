package ledger_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
)

// recorder is a Watch observer that records every seq and every gap.
type recorder struct {
	mu    sync.Mutex
	seqs  []ledger.Seq
	gaps  [][2]ledger.Seq
	calls int

	entered chan struct{} // receives once per Committed call, when non-nil
	release chan struct{} // Committed waits on it, when non-nil
}

func (r *recorder) Committed(batch []ledger.Record) {
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.release != nil {
		<-r.release
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	for _, rec := range batch {
		r.seqs = append(r.seqs, ledger.Seq(rec.Env.Seq))
	}
}

func (r *recorder) Lagged(from, to ledger.Seq) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaps = append(r.gaps, [2]ledger.Seq{from, to})
	// Mark the gap in the seq stream so order can be checked as one list.
	for s := from; s <= to; s++ {
		r.seqs = append(r.seqs, s)
	}
}

func (r *recorder) snapshot() ([]ledger.Seq, [][2]ledger.Seq) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ledger.Seq(nil), r.seqs...), append([][2]ledger.Seq(nil), r.gaps...)
}

// Guarantee: each observer gets batches in seq order, and every seq is
// delivered or reported by Lagged, under concurrent appends.
func TestWatchOrderNoGap(t *testing.T) {
	l := open(t, t.TempDir())
	rec := &recorder{}
	l.Watch(rec)
	const writers, per = 8, 150
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := l.Append(context.Background(), draft("act", "s", w*per+i)); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := l.Close(); err != nil { // delivers everything queued
		t.Fatal(err)
	}
	seqs, gaps := rec.snapshot()
	if len(seqs) != writers*per {
		t.Fatalf("observed %d seqs, want %d", len(seqs), writers*per)
	}
	for i, s := range seqs {
		if s != ledger.Seq(i+1) {
			t.Fatalf("seq #%d is %d, want %d (out of order or gap)", i, s, i+1)
		}
	}
	t.Logf("gaps reported: %d", len(gaps))
}

// startBlocked watches with an observer blocked in its first Committed call,
// after one append, and returns it once it is blocked.
func startBlocked(t *testing.T, l *ledger.Ledger) (*recorder, func()) {
	t.Helper()
	rec := &recorder{entered: make(chan struct{}, ledger.ObserverQueueLen*2), release: make(chan struct{})}
	unwatch := l.Watch(rec)
	if _, err := l.Append(context.Background(), draft("act", "s", 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("observer never called")
	}
	return rec, unwatch
}

// Guarantee: a blocked Watch observer does not delay acknowledgements.
func TestWatchBlockedObserverDoesNotDelayAcks(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	rec, unwatch := startBlocked(t, l)
	defer unwatch()
	defer close(rec.release)
	for i := 1; i <= 50; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := l.Append(ctx, draft("act", "s", i))
		cancel()
		if err != nil {
			t.Fatalf("append %d while the observer is blocked: %v", i, err)
		}
	}
	rec.mu.Lock()
	calls := rec.calls
	rec.mu.Unlock()
	if calls != 0 {
		t.Fatalf("observer finished %d calls, want 0: it was not blocked throughout", calls)
	}
}

// Guarantee: a full queue drops its oldest batches and the observer is told
// of the dropped range before the next batch it gets.
func TestWatchOverflowReportsGap(t *testing.T) {
	l := open(t, t.TempDir())
	rec, unwatch := startBlocked(t, l) // seq 1 is in the observer's hand
	const extra = 10
	for i := 0; i < ledger.ObserverQueueLen+extra; i++ { // one batch each: sequential
		if _, err := l.Append(context.Background(), draft("act", "s", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.Stats().ObserverDropped; got != extra {
		t.Fatalf("Stats.ObserverDropped = %d, want %d", got, extra)
	}
	close(rec.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	unwatch()
	seqs, gaps := rec.snapshot()
	if want := [][2]ledger.Seq{{2, 1 + extra}}; len(gaps) != 1 || gaps[0] != want[0] {
		t.Fatalf("gaps = %v, want %v", gaps, want)
	}
	total := 1 + ledger.ObserverQueueLen + extra
	if len(seqs) != total || !sort.SliceIsSorted(seqs, func(i, j int) bool { return seqs[i] < seqs[j] }) ||
		seqs[0] != 1 || seqs[total-1] != ledger.Seq(total) {
		t.Fatalf("seqs (with the gap filled in) are not 1..%d in order: %d seqs", total, len(seqs))
	}
}

// Guarantee: unwatch waits for the call in progress, then stops the
// observer (queued batches discarded); it ends soon after the call does.
func TestWatchUnwatchBlockedObserver(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	rec, unwatch := startBlocked(t, l)
	for i := 1; i <= 5; i++ {
		if _, err := l.Append(context.Background(), draft("act", "s", i)); err != nil {
			t.Fatal(err)
		}
	}
	returned := make(chan struct{})
	go func() { unwatch(); close(returned) }()
	select {
	case <-returned:
		t.Fatal("unwatch returned while a call was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	close(rec.release)
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("unwatch did not return within 5s of the call ending")
	}
	seqs, _ := rec.snapshot()
	if len(seqs) != 1 {
		t.Fatalf("observer got %d seqs after unwatch began, want only the one in progress", len(seqs))
	}
	if _, err := l.Append(context.Background(), draft("act", "s", 9)); err != nil {
		t.Fatal(err)
	}
	if seqs, _ := rec.snapshot(); len(seqs) != 1 {
		t.Fatal("observer called after unwatch")
	}
}

// Guarantee: Close delivers what is queued to a blocked observer once it
// resumes, stops its goroutine and ends within a bound.
func TestWatchCloseBlockedObserver(t *testing.T) {
	l := open(t, t.TempDir())
	rec, unwatch := startBlocked(t, l)
	defer unwatch() // after Close: a no-op
	for i := 1; i <= 5; i++ {
		if _, err := l.Append(context.Background(), draft("act", "s", i)); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	time.Sleep(20 * time.Millisecond)
	close(rec.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s of the observer resuming")
	}
	if seqs, _ := rec.snapshot(); len(seqs) != 6 {
		t.Fatalf("observer got %d seqs by Close, want all 6", len(seqs))
	}
	if l.Watch(&recorder{}) == nil { // a closed ledger starts no goroutine
		t.Fatal("Watch returned nil")
	}
}

// slowObserver takes d per batch.
type slowObserver time.Duration

func (d slowObserver) Committed([]ledger.Record) { time.Sleep(time.Duration(d)) }

// p99Append measures the p99 ack latency of n appends by 4 concurrent
// writers, with obs (when non-nil) watching.
func p99Append(b *testing.B, obs ledger.Observer, n int) time.Duration {
	l := open(b, b.TempDir())
	defer l.Close()
	if obs != nil {
		defer l.Watch(obs)()
	}
	const writers = 4
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += writers {
				start := time.Now()
				if _, err := l.Append(context.Background(), draft("act", "s", i)); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(start)
			}
		}(w)
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[n*99/100]
}

// BenchmarkAckP99SlowObserver reports the p99 append ack latency with a
// Watch observer taking 1 ms per batch against none, and their ratio,
// measured in the same run.
func BenchmarkAckP99SlowObserver(b *testing.B) {
	const n = 400
	var none, slow time.Duration
	for i := 0; i < b.N; i++ {
		none += p99Append(b, nil, n)
		slow += p99Append(b, slowObserver(time.Millisecond), n)
	}
	b.ReportMetric(float64(none.Microseconds())/float64(b.N), "p99-none-µs")
	b.ReportMetric(float64(slow.Microseconds())/float64(b.N), "p99-slow-µs")
	b.ReportMetric(float64(slow)/float64(none), "slow/none")
}
