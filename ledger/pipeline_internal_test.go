package ledger

// Deterministic tests of the commit pipeline's stages (pipeline.go): a batch
// held in the applier (hookApply) while the committer goes on sealing, a
// failure and a Close meeting that state, keyed retries against BeforeAck,
// the batch preallocation bounds, and a batch queued for the Watch
// observers before its appenders are woken.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/leaseledger/leaseledger/events"
	"github.com/oklog/ulid/v2"
)

// quietLog drops the error the injected failures log.
var quietLog = slog.New(slog.DiscardHandler)

// pipeTimeout bounds every wait of these tests: reaching it is a hang.
const pipeTimeout = 20 * time.Second

// applyHold holds the first batch applied after arm in hookApply until
// release; sealed counts the calls the committer has sealed.
type applyHold struct {
	armed, taken     atomic.Bool
	entered, release chan struct{}
	sealed           atomic.Int64
}

func newApplyHold() *applyHold {
	return &applyHold{entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *applyHold) hooks() *testHooks {
	return &testHooks{
		hookApply: func() {
			if h.armed.Load() && h.taken.CompareAndSwap(false, true) {
				close(h.entered)
				<-h.release
			}
		},
		hookSealed: func() { h.sealed.Add(1) },
	}
}

// waitEntered waits until a batch is held in the applier.
func (h *applyHold) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(pipeTimeout):
		t.Fatal("no batch reached the applier")
	}
}

// waitSealed waits until n calls are sealed and the queue is empty: the
// committer took them all while the applier is held.
func (h *applyHold) waitSealed(t *testing.T, l *Ledger, n int64) {
	t.Helper()
	deadline := time.Now().Add(pipeTimeout)
	for h.sealed.Load() < n || len(l.queue) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the committer waits for the applier: %d of %d calls sealed, %d queued", h.sealed.Load(), n, len(l.queue))
		}
		time.Sleep(time.Millisecond)
	}
}

func pipeDraft(i int) events.Draft {
	return events.Draft{Activation: "act", Session: "s", Server: "srv",
		Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Digest: twinDigest}}
}

func waitSeqs(t *testing.T, w func(context.Context) ([]Seq, error)) ([]Seq, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pipeTimeout)
	defer cancel()
	return w(ctx)
}

// The committer never waits for Pebble's memtable insertion: while a batch
// is held in the applier, every call that arrives is sealed into the next
// batch, nothing is acknowledged before its fsync, and on release all are
// acknowledged in order, in one more commit.
func TestCommitterSealsWhileApplyHeld(t *testing.T) {
	h := newApplyHold()
	l, err := Open(Options{Dir: t.TempDir(), MaxBatchEvents: 1024, hooks: h.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	}()
	ctx := context.Background()
	h.armed.Store(true)
	w0, err := l.AppendAsync(ctx, pipeDraft(0))
	if err != nil {
		t.Fatal(err)
	}
	h.waitEntered(t)
	const n = 200
	waits := make([]func(context.Context) ([]Seq, error), n)
	for i := range waits {
		if waits[i], err = l.AppendAsync(ctx, pipeDraft(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	h.waitSealed(t, l, n+1)
	if got := l.Head().Seq; got != 0 {
		t.Fatalf("head %d while the first batch is not applied", got)
	}
	close(h.release)
	if seqs, err := waitSeqs(t, w0); err != nil || len(seqs) != 1 || seqs[0] != 1 {
		t.Fatalf("first call: %v %v", seqs, err)
	}
	for i, w := range waits {
		if seqs, err := waitSeqs(t, w); err != nil || len(seqs) != 1 || seqs[0] != Seq(i+2) {
			t.Fatalf("call %d: %v %v", i+1, seqs, err)
		}
	}
	if st := l.Stats(); st.Commits != 2 || st.Events != n+1 {
		t.Fatalf("%d commits of %d events, want 2 of %d", st.Commits, st.Events, n+1)
	}
}

// A failure met by the applier while the committer holds a sealed open
// batch: that batch and every later append fail with ErrFailed, nothing
// not durable is acknowledged, and the reopened ledger continues without a
// gap after the last durable event.
func TestApplyFailureWithSealedOpenBatch(t *testing.T) {
	dir := t.TempDir()
	h := newApplyHold()
	l, err := Open(Options{Dir: dir, MaxBatchEvents: 1024, hooks: h.hooks(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := range 3 {
		if _, err := l.Append(ctx, pipeDraft(i)); err != nil {
			t.Fatal(err)
		}
	}
	h.armed.Store(true)
	held, err := l.AppendAsync(ctx, pipeDraft(3))
	if err != nil {
		t.Fatal(err)
	}
	h.waitEntered(t)
	var open []func(context.Context) ([]Seq, error)
	for i := range 5 {
		w, err := l.AppendAsync(ctx, pipeDraft(4+i), pipeDraft(100+i))
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, w)
	}
	h.waitSealed(t, l, 3+1+5)
	injected := errors.New("injected apply failure")
	l.fail(injected)
	close(h.release)
	if seqs, err := waitSeqs(t, held); !errors.Is(err, ErrFailed) || !errors.Is(err, injected) {
		t.Fatalf("the held batch: %v %v", seqs, err)
	}
	for i, w := range open {
		if seqs, err := waitSeqs(t, w); !errors.Is(err, ErrFailed) {
			t.Fatalf("call %d of the open batch: %v %v", i, seqs, err)
		}
	}
	if _, err := l.Append(ctx, pipeDraft(9)); !errors.Is(err, ErrFailed) {
		t.Fatalf("a later append: %v", err)
	}
	if got := l.Head().Seq; got != 3 {
		t.Fatalf("head %d, want the 3 durable events", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got := l2.Head().Seq; got != 3 {
		t.Fatalf("reopened head %d, want 3", got)
	}
	seqs, err := l2.Append(ctx, pipeDraft(10))
	if err != nil || seqs[0] != 4 {
		t.Fatalf("append after reopen: %v %v", seqs, err)
	}
	for s := Seq(1); s <= 4; s++ {
		if _, err := l2.Get(s); err != nil {
			t.Fatalf("seq %d: %v", s, err)
		}
	}
}

// Close while a batch is held in the applier and another is sealed: Close
// waits, then drains both (every call acknowledged, in order, durable on
// reopen) and returns; no goroutine is left (TestMain's goleak).
func TestCloseWhileApplyHeld(t *testing.T) {
	dir := t.TempDir()
	h := newApplyHold()
	l, err := Open(Options{Dir: dir, MaxBatchEvents: 1024, hooks: h.hooks()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h.armed.Store(true)
	const n = 20
	waits := make([]func(context.Context) ([]Seq, error), n)
	for i := range waits {
		if waits[i], err = l.AppendAsync(ctx, pipeDraft(i)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			h.waitEntered(t)
		}
	}
	h.waitSealed(t, l, n)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	deadline := time.Now().Add(pipeTimeout)
	for {
		l.mu.RLock()
		closing := l.closed
		l.mu.RUnlock()
		if closing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not start")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a batch is held in the applier", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := l.Append(ctx, pipeDraft(99)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append during Close: %v", err)
	}
	close(h.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(pipeTimeout):
		t.Fatal("Close hangs after the applier was released")
	}
	for i, w := range waits {
		if seqs, err := waitSeqs(t, w); err != nil || seqs[0] != Seq(i+1) {
			t.Fatalf("call %d: %v %v", i, seqs, err)
		}
	}
	l2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got := l2.Head().Seq; got != n {
		t.Fatalf("reopened head %d, want %d", got, n)
	}
}

// recordingHold is a BeforeAck observer that holds the first batch until
// release and records the last seq it has seen.
type recordingHold struct {
	holdObserver
	seen atomic.Uint64
}

func (r *recordingHold) Committed(b []Record) {
	r.holdObserver.Committed(b)
	r.seen.Store(uint64(b[len(b)-1].Env.Seq))
}

// A keyed retry whose original is durable but still in BeforeAck is not
// answered before BeforeAck has seen the original (a caller that retries
// and then reads the projection finds its events), and a batch of retries
// only writes nothing to Pebble.
func TestRetryWaitsForBeforeAck(t *testing.T) {
	obs := &recordingHold{holdObserver: holdObserver{release: make(chan struct{}), entered: make(chan struct{})}}
	l, err := Open(Options{Dir: t.TempDir(), BeforeAck: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(obs.release) }) }
	defer release() // before Close: a held BeforeAck would hang it
	ctx := context.Background()
	d := pipeDraft(1)
	type result struct {
		acks     []Ack
		replayed bool
		err      error
		seen     uint64
	}
	run := func(out chan<- result) {
		acks, replayed, err := l.AppendIdempotent(ctx, Idempotency{Key: "k"}, d)
		out <- result{acks, replayed, err, obs.seen.Load()}
	}
	first, retry := make(chan result, 1), make(chan result, 1)
	go run(first)
	select {
	case <-obs.entered:
	case <-time.After(pipeTimeout):
		t.Fatal("BeforeAck not reached")
	}
	if l.Head().Seq != 1 {
		t.Fatalf("head %d: the original is not durable", l.Head().Seq)
	}
	walBefore := l.db.Metrics().WAL.BytesIn
	go run(retry)
	select {
	case r := <-retry:
		t.Fatalf("retry answered (replayed %v, %v) while BeforeAck of the original runs", r.replayed, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	var got [2]result
	for i, ch := range []chan result{first, retry} {
		select {
		case got[i] = <-ch:
		case <-time.After(pipeTimeout):
			t.Fatalf("call %d not answered", i)
		}
	}
	if got[0].err != nil || got[0].replayed || got[1].err != nil || !got[1].replayed {
		t.Fatalf("original %+v, retry %+v", got[0], got[1])
	}
	if got[1].seen < 1 || got[1].acks[0] != got[0].acks[0] {
		t.Fatalf("retry answered %v with BeforeAck at seq %d; original %v", got[1].acks, got[1].seen, got[0].acks)
	}
	if wal := l.db.Metrics().WAL.BytesIn; wal != walBefore {
		t.Fatalf("a batch of retries only wrote %d bytes to the WAL", wal-walBefore)
	}
	if st := l.Stats(); st.Commits != 1 {
		t.Fatalf("%d commits, want the original's only", st.Commits)
	}
	// Once acknowledged, a retry is answered at once and writes nothing.
	if _, replayed, err := l.AppendIdempotent(ctx, Idempotency{Key: "k"}, d); err != nil || !replayed {
		t.Fatalf("late retry: %v %v", replayed, err)
	}
	if wal := l.db.Metrics().WAL.BytesIn; wal != walBefore {
		t.Fatalf("a late retry wrote %d bytes to the WAL", wal-walBefore)
	}
}

// batchPrealloc leaves a quarter of headroom over the last batch and never
// exceeds maxBatchPrealloc.
func TestBatchPrealloc(t *testing.T) {
	for _, last := range []int{0, 1, 100, 4096, 1 << 20, maxBatchPrealloc / 2, maxBatchPrealloc, 270 << 20} {
		got := batchPrealloc(last)
		want := last + last/4
		if want > maxBatchPrealloc {
			want = maxBatchPrealloc
		}
		if got != want || got > maxBatchPrealloc {
			t.Errorf("batchPrealloc(%d) = %d, want %d (bound %d)", last, got, want, maxBatchPrealloc)
		}
	}
}

// A batch up to a fifth larger than the last one, preallocated by
// batchPrealloc, is not grown by Pebble (real Pebble batches): the
// preallocation is what spares the doubling and copying.
func TestBatchPreallocNoGrow(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: twinQuiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := &Ledger{db: db}
	fill := func(b *pebble.Batch, n int) {
		var buf []byte
		var ix indexKeys
		defer ix.writeTo(b)
		for i := range n {
			d := pipeDraft(i)
			p, err := events.Prepare(d)
			if err != nil {
				t.Fatal(err)
			}
			env, raw := events.Seal(p, Seq(i+1), ulid.ULID{byte(i), byte(i >> 8)}, time.Unix(0, 0).UTC(), events.Hash{})
			buf = setEvent(b, buf, &ix, &env, raw)
		}
	}
	for _, n := range []int{10, 100, 1000} {
		last := l.db.NewBatch()
		fill(last, n)
		lastLen := last.Len()
		last.Close()
		next := l.db.NewBatchWithSize(batchPrealloc(lastLen))
		capBefore := cap(next.Repr())
		fill(next, n+n/5)
		if c := cap(next.Repr()); c != capBefore {
			t.Errorf("%d events after a batch of %d: grown from %d to %d bytes", n+n/5, n, capBefore, c)
		}
		next.Close()
	}
}

// Failures injected at varying applies while appenders and Close run
// concurrently: no hang, every acknowledged seq durable, no gap on reopen.
func TestApplyFailureStress(t *testing.T) {
	for iter := range 10 {
		dir := t.TempDir()
		var applies atomic.Int64
		var l *Ledger
		k := int64(2 + iter%7)
		hooks := &testHooks{hookApply: func() {
			if applies.Add(1) == k {
				time.Sleep(time.Millisecond)
				l.fail(errors.New("injected apply failure"))
			}
		}}
		var err error
		l, err = Open(Options{Dir: dir, MaxBatchEvents: 8, QueueLen: 16, hooks: hooks, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var acked []Seq
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 30 {
					d := pipeDraft(g*1000 + i)
					seqs, err := l.Append(context.Background(), d, d)
					if err != nil {
						if !errors.Is(err, ErrFailed) && !errors.Is(err, ErrClosed) {
							t.Errorf("append: %v", err)
						}
						return
					}
					if seqs[1] != seqs[0]+1 {
						t.Errorf("not consecutive %v", seqs)
					}
					mu.Lock()
					acked = append(acked, seqs...)
					mu.Unlock()
				}
			})
		}
		if iter%2 == 0 {
			go func() { time.Sleep(time.Duration(iter) * 100 * time.Microsecond); l.Close() }()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(pipeTimeout):
			t.Fatal("appenders hang")
		}
		closed := make(chan struct{})
		go func() { l.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(pipeTimeout):
			t.Fatal("Close hangs")
		}
		l2, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		h := l2.Head().Seq
		for _, s := range acked {
			if s > h {
				t.Fatalf("acknowledged seq %d beyond the durable head %d", s, h)
			}
		}
		for s := Seq(1); s <= h; s++ {
			if _, err := l2.Get(s); err != nil {
				t.Fatalf("gap at %d of %d: %v", s, h, err)
			}
		}
		l2.Close()
	}
}

// blockingWatch is a Watch observer that holds its goroutine in the first
// batch until release, so that later batches stay in its queue.
type blockingWatch struct {
	entered, release chan struct{}
	once             sync.Once
}

func (b *blockingWatch) Committed([]Record) {
	b.once.Do(func() {
		close(b.entered)
		<-b.release
	})
}

// A batch is queued for the Watch observers before its appenders are
// woken (the appender, woken last, is the goroutine the syncer's core runs
// next; pipeline.go): with the syncer held just after it woke them
// (hookWoken), the returned Append's batch is already in the observer's
// queue.
func TestWatchQueuedBeforeAppendReturns(t *testing.T) {
	var armed atomic.Bool
	proceed := make(chan struct{})
	l, err := Open(Options{Dir: t.TempDir(), hooks: &testHooks{hookWoken: func() {
		if armed.Load() {
			<-proceed
		}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := &blockingWatch{entered: make(chan struct{}), release: make(chan struct{})}
	unwatch := l.Watch(b)
	defer unwatch()
	defer close(b.release) // before unwatch, which waits for the call in progress
	ctx := context.Background()
	if _, err := l.Append(ctx, pipeDraft(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.entered:
	case <-time.After(pipeTimeout):
		t.Fatal("the observer never got the first batch")
	}
	w := l.watchers()[0]
	armed.Store(true)
	for i := 2; i <= 5; i++ {
		seqs, err := l.Append(ctx, pipeDraft(i))
		if err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		n := len(w.q)
		last := Seq(0)
		if n > 0 {
			q := w.q[n-1]
			last = Seq(q[len(q)-1].Env.Seq)
		}
		w.mu.Unlock()
		proceed <- struct{}{}
		if n != i-1 || last != seqs[0] {
			t.Fatalf("Append of seq %d returned with %d batches queued for the observer, the last up to seq %d", seqs[0], n, last)
		}
	}
	armed.Store(false)
}
