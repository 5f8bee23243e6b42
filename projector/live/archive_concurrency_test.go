package live_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// Request owners in random order — registrations after an owner's end,
// repeated ends, handles re-registered to other owners, completions and
// cancels of ended handles — with snapshots and restarts at random points
// give exactly what a full replay gives: retiring ended owners changes
// nothing a reader can see.
func TestOwnersRandomWithRestarts(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		dir := t.TempDir()
		rng := rand.New(rand.NewSource(seed))
		p := mustOpen(t, dir, -1)
		h := 0
		for i := range 400 {
			o := fmt.Sprintf("o-%d", rng.Intn(30))
			var ds []events.Draft
			switch rng.Intn(6) {
			case 0, 1:
				h++
				ds = append(ds, draft("act-1", "s-1", &events.RequestRegistered{Handle: fmt.Sprintf("h-%d", h), Owner: o, Method: "resources/read", TimeoutNS: 5}))
			case 2:
				ds = append(ds, draft("act-1", "s-1", &events.RequestRegistered{Handle: fmt.Sprintf("h-%d", rng.Intn(h+1)), Owner: o, Method: "resources/read", TimeoutNS: 5}))
			case 3:
				ds = append(ds, events.Draft{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: o, HandlesSettled: 1}})
			case 4:
				ds = append(ds, draft("act-1", "s-1", &events.RequestCompleted{Handle: fmt.Sprintf("h-%d", rng.Intn(h+1)), Outcome: events.RequestOK}))
			case 5:
				ds = append(ds, draft("act-1", "s-1", &events.RequestCancelled{Handle: fmt.Sprintf("h-%d", rng.Intn(h+1)), Reason: "x", TransportAccepted: "unknown", NotificationDelivered: "unknown", Remote: "unknown"}))
			}
			appendAll(t, p.Ledger(), ds)
			switch rng.Intn(8) {
			case 0, 1:
				if err := p.Snapshot(); err != nil {
					t.Fatal(err)
				}
			case 2:
				compareAll(t, p, fmt.Sprintf("seed %d i %d", seed, i))
				if rng.Intn(2) == 0 {
					if err := p.Close(); err != nil {
						t.Fatal(err)
					}
					p = mustOpen(t, dir, -1)
				}
			}
		}
		compareAll(t, p, "end")
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Summarize counts each activation once while appends, snapshots (which
// move activations from memory to stored parts) and summaries run at the
// same time: never fewer activations than were acknowledged before the
// call, never more than after it, verdict counts summing to the total and
// every unconfirmed one listed.
func TestSummarizeCountsEachOnce(t *testing.T) {
	p := mustOpen(t, t.TempDir(), -1)
	defer p.Close()
	var known atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer close(stop)
		for i := range 600 {
			sess := fmt.Sprintf("s-%d", i%4)
			ds := closedWithCall(fmt.Sprintf("a-%04d", i), sess)
			if i%3 == 0 && i > 10 {
				ds = append(ds, draft(fmt.Sprintf("a-%04d", i-10), sess, &events.HTTPBarrier{Ref: "r", Outcome: events.HTTPBarrierOK}))
			}
			if i%7 == 0 {
				ds = append(ds, events.Draft{Session: sess, Payload: &events.SessionEnded{LeasesTerminated: 1}})
			}
			if _, err := p.Ledger().Append(context.Background(), ds...); err != nil {
				t.Error(err)
				return
			}
			known.Store(int64(i + 1))
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.Snapshot(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			before := known.Load()
			s, err := p.Summarize(context.Background(), audit.All)
			after := known.Load()
			if err != nil {
				t.Error(err)
				return
			}
			total := 0
			for _, n := range s.Verdicts {
				total += n
			}
			// after+1: the append in flight during the call may be
			// reflected before known says so.
			if int64(s.Activations) < before || int64(s.Activations) > after+1 || total != s.Activations || s.Omitted != 0 {
				t.Errorf("summary: activations %d (before %d, after %d), verdicts sum %d, omitted %d, listed %d", s.Activations, before, after, total, s.Omitted, len(s.Unconfirmed))
				return
			}
			if len(s.Unconfirmed) != s.Verdicts["unconfirmed"] {
				t.Errorf("listed %d unconfirmed, counted %d", len(s.Unconfirmed), s.Verdicts["unconfirmed"])
				return
			}
		}
	}()
	wg.Wait()
	compareAll(t, p, "end")
}
