package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// payloadRecorder records the Payload of every record it is handed, by seq.
type payloadRecorder struct {
	mu       sync.Mutex
	payloads map[ledger.Seq]events.Payload
}

func (r *payloadRecorder) Committed(batch []ledger.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range batch {
		r.payloads[ledger.Seq(rec.Env.Seq)] = rec.Payload
	}
}

func (r *payloadRecorder) get(seq ledger.Seq) (events.Payload, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.payloads[seq]
	return p, ok
}

// TestBeforeAckPayload: BeforeAck gets, in Record.Payload, the very
// payload of each draft given to Append and AppendAcks, and nil for events
// appended otherwise (prepared); Watch observers never get one.
func TestBeforeAckPayload(t *testing.T) {
	before := &payloadRecorder{payloads: map[ledger.Seq]events.Payload{}}
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir(), BeforeAck: before})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	watched := &payloadRecorder{payloads: map[ledger.Seq]events.Payload{}}
	l.Watch(watched)
	ctx := context.Background()

	ds := drafts("act-1", 3)
	seqs, err := l.Append(ctx, ds...)
	if err != nil {
		t.Fatal(err)
	}
	acks, err := l.AppendAcks(ctx, ds[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := events.Prepare(ds[1])
	if err != nil {
		t.Fatal(err)
	}
	wait, err := l.AppendPreparedAsync(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	prepSeqs, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[ledger.Seq]events.Payload{seqs[0]: ds[0].Payload, seqs[1]: ds[1].Payload, seqs[2]: ds[2].Payload,
		acks[0].Seq: ds[0].Payload, prepSeqs[0]: nil}
	for seq, w := range want {
		got, ok := before.get(seq)
		if !ok || got != w {
			t.Fatalf("BeforeAck seq %d: payload %p (seen %v), want %p", seq, got, ok, w)
		}
	}
	if err := l.Close(); err != nil { // delivers what the Watch observer has queued
		t.Fatal(err)
	}
	for seq := range want {
		if got, ok := watched.get(seq); !ok || got != nil {
			t.Fatalf("Watch observer seq %d: payload %p (seen %v), want none", seq, got, ok)
		}
	}
}

// gatedObserver is a BeforeAck observer that records every payload by seq
// and, once armed for a payload, blocks the batch holding it until
// released.
type gatedObserver struct {
	payloadRecorder
	holdFor events.Payload // block the batch holding this payload (nil: the first batch)
	entered chan struct{}  // closed when the held batch arrived
	release chan struct{}
	once    sync.Once
	held    bool
	seen    chan ledger.Seq // every seq handed over, in order
}

func newGatedObserver(holdFor events.Payload) *gatedObserver {
	return &gatedObserver{payloadRecorder: payloadRecorder{payloads: map[ledger.Seq]events.Payload{}},
		holdFor: holdFor, entered: make(chan struct{}), release: make(chan struct{}), seen: make(chan ledger.Seq, 64)}
}

func (g *gatedObserver) Committed(batch []ledger.Record) {
	g.payloadRecorder.Committed(batch)
	hold := false
	for _, rec := range batch {
		hold = hold || g.holdFor == nil || rec.Payload == g.holdFor
	}
	if hold && !g.held {
		g.held = true
		close(g.entered)
		<-g.release
	}
	for _, rec := range batch {
		g.seen <- ledger.Seq(rec.Env.Seq)
	}
}

// open releases the held batch (again: no effect). A test defers it after
// deferring the ledger's Close, so that a failing test never leaves Close
// waiting for a held BeforeAck.
func (g *gatedObserver) open() { g.once.Do(func() { close(g.release) }) }

// waitSeen waits until the observer was handed seq.
func (g *gatedObserver) waitSeen(t *testing.T, seq ledger.Seq) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-g.seen:
			if s == seq {
				return
			}
		case <-timeout:
			t.Fatalf("BeforeAck never got seq %d", seq)
		}
	}
}

// TestAbandonedPayloadWithheld: a call whose context ends after it was
// queued returns ErrUnacknowledged, and its caller may then modify its
// payload: BeforeAck is never handed that payload (it gets nil and works
// from the stored bytes), so nothing the caller changes afterwards can
// reach it.
func TestAbandonedPayloadWithheld(t *testing.T) {
	gate := newGatedObserver(nil) // holds the first batch in BeforeAck
	var sealed atomic.Int32
	l, err := ledger.Open(ledger.WithHooks(ledger.Options{Dir: t.TempDir(), BeforeAck: gate}, ledger.Hooks{Sealed: func() { sealed.Add(1) }}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer gate.open()
	first := make(chan error, 1)
	go func() { _, err := l.Append(context.Background(), draft("act-1", "s1", 0)); first <- err }()
	<-gate.entered // the first call's batch is durable and held in BeforeAck

	b := draft("act-2", "s1", 1)
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { _, err := l.Append(ctx, b); second <- err }()
	for sealed.Load() < 2 { // the second call is sealed: queued for good
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, ledger.ErrUnacknowledged) {
			t.Fatalf("second append: %v, want ErrUnacknowledged", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned append did not return while BeforeAck held an earlier batch")
	}
	b.Payload.(*events.CallAdmitted).CallID = "changed-after-return"
	gate.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	gate.waitSeen(t, 2)
	if p, _ := gate.get(2); p != nil {
		t.Fatalf("BeforeAck was handed the abandoned call's payload %+v", p)
	}
	if p, _ := gate.get(1); p == nil {
		t.Fatal("the waiting call's payload was withheld")
	}
	for env, err := range l.Events(context.Background(), ledger.Query{From: 2, To: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(env.Data), `"call_id":"c1"`) {
			t.Fatalf("stored event %s", env.Data)
		}
	}
}

// TestClaimedPayloadWaitsForBeforeAck: a call whose context ends while
// BeforeAck holds its payload (after its fsync) does not return before
// BeforeAck is done with it, and then returns its acknowledgement.
func TestClaimedPayloadWaitsForBeforeAck(t *testing.T) {
	d := draft("act-1", "s1", 0)
	gate := newGatedObserver(d.Payload)
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir(), BeforeAck: gate})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer gate.open()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		seqs []ledger.Seq
		err  error
	}
	done := make(chan result, 1)
	go func() { seqs, err := l.Append(ctx, d); done <- result{seqs, err} }()
	<-gate.entered
	cancel()
	select {
	case r := <-done:
		t.Fatalf("append returned %v while BeforeAck held its payload", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	gate.open()
	r := <-done
	if r.err != nil || len(r.seqs) != 1 || r.seqs[0] != 1 {
		t.Fatalf("append: %v %v, want seq 1 acknowledged", r.seqs, r.err)
	}
}
