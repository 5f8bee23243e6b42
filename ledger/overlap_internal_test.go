package ledger

// Tests of the overlapped pipeline (pipeline.go): batches written while an
// earlier batch's fsync is held in a walGateFS (walgate_internal_test.go).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// appendResult is what one Append returned.
type appendResult struct {
	seqs []Seq
	err  error
}

// appendAsyncResult runs Append(ds...) on a goroutine of its own and
// returns where its result arrives.
func appendAsyncResult(l *Ledger, ds ...int) <-chan appendResult {
	out := make(chan appendResult, 1)
	go func() {
		drafts := make([]events.Draft, len(ds))
		for i, d := range ds {
			drafts[i] = pipeDraft(d)
		}
		seqs, err := l.Append(context.Background(), drafts...)
		out <- appendResult{seqs, err}
	}()
	return out
}

// result waits for an appendResult.
func result(t *testing.T, what string, ch <-chan appendResult) appendResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(pipeTimeout):
		t.Fatalf("%s: no result", what)
	}
	return appendResult{}
}

// notYet fails the test if ch already holds a result.
func notYet(t *testing.T, what string, ch <-chan appendResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned (%v, %v) before its own fsync", what, r.seqs, r.err)
	default:
	}
}

// appliedHook returns hooks signalling every batch applied on applied.
func appliedHook() (*testHooks, <-chan struct{}) {
	applied := make(chan struct{}, 64)
	return &testHooks{hookApplied: func() { applied <- struct{}{} }}, applied
}

func waitApplied(t *testing.T, what string, applied <-chan struct{}) {
	t.Helper()
	select {
	case <-applied:
	case <-time.After(pipeTimeout):
		t.Fatalf("%s was not applied while the fsync before it is held: no overlap", what)
	}
}

// A batch's ack follows its own fsync, never only an earlier batch's: while
// batch A's fsync is held, batch B is written behind it (applied: the
// overlap) and neither is acknowledged; once A's fsync completes A is
// acknowledged and B, whose own fsync is held in turn, is not; then B is.
func TestAckAwaitsOwnFsync(t *testing.T) {
	opts, fs := gatedOptions(t.TempDir())
	hooks, applied := appliedHook()
	opts.hooks = hooks
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gA := fs.arm(nil)
	defer gA.open()
	resA := appendAsyncResult(l, 1)
	waitApplied(t, "A", applied)
	gA.waitEntered(t, "A's fsync")
	gB := fs.arm(nil)
	defer gB.open()
	resB := appendAsyncResult(l, 2, 3)
	waitApplied(t, "B", applied)
	notYet(t, "A", resA)
	notYet(t, "B", resB)
	if h := l.Head().Seq; h != 0 {
		t.Fatalf("head %d while the first fsync is held", h)
	}
	gA.open()
	if r := result(t, "A", resA); r.err != nil || len(r.seqs) != 1 || r.seqs[0] != 1 {
		t.Fatalf("A: %v %v", r.seqs, r.err)
	}
	gB.waitEntered(t, "B's own fsync")
	notYet(t, "B", resB)
	if h := l.Head().Seq; h != 1 {
		t.Fatalf("head %d while B's fsync is held, want A's 1", h)
	}
	gB.open()
	if r := result(t, "B", resB); r.err != nil || len(r.seqs) != 2 || r.seqs[0] != 2 || r.seqs[1] != 3 {
		t.Fatalf("B: %v %v", r.seqs, r.err)
	}
	if h := l.Head().Seq; h != 3 {
		t.Fatalf("head %d, want 3", h)
	}
}

// A failed fsync fails its batch and every later one, in order — also a
// batch already applied behind it — and every append after them: the
// failure is sticky. The reopened ledger has no gap, holds every
// acknowledged event and at most the failed batch (in doubt), never the
// batch behind it without it.
func TestFailedFsyncFailsLaterBatches(t *testing.T) {
	dir := t.TempDir()
	opts, fs := gatedOptions(dir)
	hooks, applied := appliedHook()
	opts.hooks = hooks
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 3 {
		if _, err := l.Append(context.Background(), pipeDraft(i)); err != nil {
			t.Fatal(err)
		}
		<-applied
	}
	injected := errors.New("injected fsync failure")
	gA := fs.arm(injected)
	defer gA.open()
	resA := appendAsyncResult(l, 10)
	waitApplied(t, "A", applied)
	gA.waitEntered(t, "A's fsync")
	resB := appendAsyncResult(l, 11, 12)
	waitApplied(t, "B", applied)
	gA.open()
	if r := result(t, "A", resA); !errors.Is(r.err, ErrFailed) || !errors.Is(r.err, injected) {
		t.Fatalf("A, whose fsync failed: %v %v", r.seqs, r.err)
	}
	if r := result(t, "B", resB); !errors.Is(r.err, ErrFailed) {
		t.Fatalf("B, applied behind the failed fsync: %v %v", r.seqs, r.err)
	}
	if _, err := l.Append(context.Background(), pipeDraft(13)); !errors.Is(err, ErrFailed) {
		t.Fatalf("a later append: %v", err)
	}
	if h := l.Head().Seq; h != 3 {
		t.Fatalf("head %d, want the 3 acknowledged", h)
	}
	_ = l.Close() // Pebble may report the failed log again
	l2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	h := l2.Head().Seq
	if h < 3 || h > 4 {
		t.Fatalf("reopened head %d: want the 3 acknowledged, and A at most", h)
	}
	for s := Seq(1); s <= h; s++ {
		if _, err := l2.Get(s); err != nil {
			t.Fatalf("seq %d: %v", s, err)
		}
	}
	if seqs, err := l2.Append(context.Background(), pipeDraft(14)); err != nil || seqs[0] != h+1 {
		t.Fatalf("append after reopen: %v %v", seqs, err)
	}
}

// An Import re-delivering events of the oldest of several batches still in
// flight (applied, their fsyncs held) finds them sealed and skips them, and
// one contradicting them is refused with a *ForkError: the committer keeps
// every batch past it not yet durable, not the last one only.
func TestImportRedeliveryWhileBatchesInFlight(t *testing.T) {
	src, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range 3 {
		if _, err := src.Append(context.Background(), pipeDraft(2*i), pipeDraft(2*i+1)); err != nil {
			t.Fatal(err)
		}
	}
	raws := make([][]byte, 6)
	for i := range raws {
		if raws[i], err = src.GetRaw(Seq(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	other, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Append(context.Background(), pipeDraft(99)); err != nil {
		t.Fatal(err)
	}
	forked, err := other.GetRaw(1)
	if err != nil {
		t.Fatal(err)
	}

	opts, fs := gatedOptions(t.TempDir())
	opts.Mirror = true
	hooks, applied := appliedHook()
	opts.hooks = hooks
	m, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := fs.arm(nil)
	defer g.open()
	imp := func(raws [][]byte) <-chan error {
		out := make(chan error, 1)
		go func() {
			_, err := m.Import(context.Background(), raws)
			out <- err
		}()
		return out
	}
	var batches []<-chan error
	for i := range 3 {
		batches = append(batches, imp(raws[2*i:2*i+2]))
		waitApplied(t, "an import batch", applied)
		if i == 0 {
			g.waitEntered(t, "the first batch's fsync")
		}
	}
	again := imp(raws[:2])
	fork := imp([][]byte{forked})
	var fe *ForkError
	if err := waitErr(t, fork); !errors.As(err, &fe) || fe.Seq != 1 {
		t.Fatalf("a contradicting re-delivery of seq 1 in flight: %v", err)
	}
	g.open()
	for i, b := range batches {
		if err := waitErr(t, b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if err := waitErr(t, again); err != nil {
		t.Fatalf("a re-delivery of the oldest batch in flight: %v", err)
	}
	if h := m.Head(); h != src.Head() {
		t.Fatalf("mirror head %+v, source %+v", h, src.Head())
	}
}

func waitErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(pipeTimeout):
		t.Fatal("no result")
	}
	return nil
}

// keepFlushed keeps the batches not yet durable, oldest first, and never
// more than inflightBatches: the durable ones are dropped at the next
// flush, and so is the oldest when as many are kept (it has returned its
// token, so it is durable or failed).
func TestKeepFlushedBound(t *testing.T) {
	batch := func(first, n Seq) []Record {
		recs := make([]Record, n)
		for i := range recs {
			recs[i].Env.Seq = first + Seq(i)
		}
		return recs
	}
	var c committerLocal
	for i := range Seq(inflightBatches + 3) {
		c.keepFlushed(batch(1+2*i, 2), 0) // nothing durable
		if len(c.flushed) > inflightBatches {
			t.Fatalf("%d batches kept, bound %d", len(c.flushed), inflightBatches)
		}
		if got := lastSeq(c.flushed[len(c.flushed)-1]); got != 2+2*i {
			t.Fatalf("newest kept ends at %d, want %d", got, 2+2*i)
		}
	}
	newest := lastSeq(c.flushed[len(c.flushed)-1])
	if _, ok := c.sealedInFlight(newest); !ok {
		t.Fatalf("seq %d not found in flight", newest)
	}
	c.keepFlushed(batch(newest+1, 1), newest) // all the others durable
	if len(c.flushed) != 1 || c.flushed[0][0].Env.Seq != newest+1 {
		t.Fatalf("kept %d batches after the head passed them, want the new one", len(c.flushed))
	}
	if _, ok := c.sealedInFlight(newest); ok {
		t.Fatal("a durable seq is still answered from the kept batches")
	}
}
