package ledger_test

import (
	"context"
	"sync"
	"testing"

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
