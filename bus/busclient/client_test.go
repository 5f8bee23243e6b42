package busclient_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

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

func TestReplayChunks(t *testing.T) {
	l, b := startBus(t, bus.Options{ReplayChunkEvents: 64})
	appendN(t, l, 1000)
	c := busclient.NewClient(connect(t, b.ClientURL()))
	ctx := context.Background()
	var got []events.Seq
	next, err := c.Replay(ctx, 1, 0, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
		got = append(got, seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 || got[0] != 1 || got[999] != 1000 || next != 1001 {
		t.Fatalf("replayed %d events, next %d", len(got), next)
	}
	for i := range got {
		if got[i] != events.Seq(i+1) {
			t.Fatalf("replay out of order at %d: %d", i, got[i])
		}
	}
	got = got[:0]
	if _, err := c.Replay(ctx, 100, 300, busclient.TailFilter{Activation: "a2"}, func(seq events.Seq, raw []byte) error {
		if env, err := events.Decode(raw); err != nil || env.Activation != "a2" {
			t.Errorf("filtered replay returned %s", raw)
		}
		got = append(got, seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 40 || got[0] != 103 || got[39] != 298 {
		t.Fatalf("activation replay: %d events %v…", len(got), got[:min(3, len(got))])
	}
	if _, err := c.Replay(ctx, 1, 0, busclient.TailFilter{Kind: "no.such"}, func(events.Seq, []byte) error { return nil }); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("unknown kind: %v", err)
	}
	h, err := c.Head(ctx)
	if err != nil || h.Seq != 1000 || h.Hash != l.Head().Hash.String() {
		t.Fatalf("head %+v %v", h, err)
	}
}

// TestTailNoGapNoDuplicate tails from seq 1 while writers keep appending:
// the subscriber sees 1..N exactly once each, in order.
func TestTailNoGapNoDuplicate(t *testing.T) {
	l, b := startBus(t, bus.Options{ReplayChunkEvents: 50})
	appendN(t, l, 500)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	const writers, per = 8, 200
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				if _, err := l.Append(ctx, draft(fmt.Sprintf("w%d", w), "s", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	total := events.Seq(500 + writers*per)
	c := busclient.NewClient(connect(t, b.ClientURL()))
	var got []events.Seq
	done := errors.New("done")
	err := c.Tail(ctx, 1, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
		got = append(got, seq)
		if seq == total {
			return done
		}
		return nil
	})
	wg.Wait()
	if !errors.Is(err, done) {
		t.Fatalf("tail: %v (got %d events)", err, len(got))
	}
	for i, s := range got {
		if s != events.Seq(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate", i, s)
		}
	}

	// A filtered tail from the middle sees only its activation, in order.
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	var fgot []events.Seq
	go func() {
		_, _ = l.Append(context.Background(), draft("w3", "s", 9999))
	}()
	err = c.Tail(fctx, 600, busclient.TailFilter{Activation: "w3", Kind: "call.admitted"}, func(seq events.Seq, raw []byte) error {
		if env, err := events.Decode(raw); err != nil || env.Activation != "w3" {
			t.Errorf("filtered tail returned %s", raw)
		}
		if len(fgot) > 0 && seq <= fgot[len(fgot)-1] {
			t.Errorf("filtered tail out of order: %d after %d", seq, fgot[len(fgot)-1])
		}
		fgot = append(fgot, seq)
		if len(fgot) == per+1-countBelow(l, "w3", 600) {
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("filtered tail: %v after %d events", err, len(fgot))
	}
}

func countBelow(l *ledger.Ledger, activation string, below ledger.Seq) int {
	n := 0
	_ = l.Scan(context.Background(), ledger.Query{Activation: activation, To: below - 1}, func(events.Seq, []byte) error { n++; return nil })
	return n
}

// TestHeadWaitsOutRateLimit: a Head over the connection's request rate
// waits out the bus's CodeRateLimited refusals (as Replay does) instead of
// parsing the refusal as a reply; a refusal of another kind is ErrRemote.
func TestHeadWaitsOutRateLimit(t *testing.T) {
	l, b := startBus(t, bus.Options{Limits: bus.Limits{RequestRate: 20, RequestBurst: 5}})
	appendN(t, l, 3)
	c := busclient.NewClient(connect(t, b.ClientURL()))
	ctx := context.Background()
	for i := range 30 {
		h, err := c.Head(ctx)
		if err != nil || h.Seq != 3 {
			t.Fatalf("head %d: %+v %v", i, h, err)
		}
	}
	var asked atomic.Int32
	refusing := scriptedOn(t, busclient.HeadSubject, func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(busclient.HeaderError, "bad request")
		r.Header.Set(busclient.HeaderErrorCode, busclient.CodeBadRequest)
		if asked.Add(1) == 1 {
			r.Header.Set(busclient.HeaderErrorCode, busclient.CodeRateLimited)
		}
		_ = m.RespondMsg(r)
	})
	var e *busclient.Error
	if _, err := refusing.Head(ctx); !errors.Is(err, busclient.ErrRemote) || !errors.As(err, &e) || e.Reply != "bad request" || asked.Load() != 2 {
		t.Fatalf("a refused head: %v after %d requests", err, asked.Load())
	}
	// Rate limited until ctx ends: ErrRateLimited (with ErrRemote).
	limited := scriptedOn(t, busclient.HeadSubject, func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(busclient.HeaderError, "rate limited")
		r.Header.Set(busclient.HeaderErrorCode, busclient.CodeRateLimited)
		_ = m.RespondMsg(r)
	})
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := limited.Head(short); !errors.Is(err, busclient.ErrRemote) || !errors.Is(err, busclient.ErrRateLimited) {
		t.Fatalf("a head rate limited until its context ended: %v", err)
	}
}
