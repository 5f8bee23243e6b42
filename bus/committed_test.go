package bus_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// Bus.Committed may be called from any goroutine while the bus publishes
// the ledger's own commits: each call publishes with a message of its own
// (the reused one belongs to the bus's Watch goroutine only), so under
// -race nothing is reported, and every published message's headers name
// the event its data holds.
func TestCommittedConcurrentWithWatch(t *testing.T) {
	const (
		appends = 300  // events the ledger commits (Watch publishes each)
		calls   = 2000 // external Committed calls meanwhile
	)
	l, b := startBus(t, bus.Options{})
	nc := connect(t, b.ClientURL())
	sub, err := nc.SubscribeSync(busclient.EventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	acks, err := l.AppendAcks(context.Background(), draft("ext", "s", 0))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := l.GetRaw(acks[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	env, err := events.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range calls {
			b.Committed([]ledger.Record{{Env: env, Raw: raw}})
		}
	}()
	for i := range appends {
		if _, err := l.Append(context.Background(), draft("a"+strconv.Itoa(i%5), "s", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for n := 0; n < 1+appends+calls; n++ {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d messages: %v", n, err)
		}
		e, err := events.Decode(m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
		if m.Header.Get(busclient.HeaderSeq) != strconv.FormatUint(uint64(e.Seq), 10) ||
			m.Header.Get(busclient.HeaderMsgID) != e.ID.String() || m.Subject != e.Subject() {
			t.Fatalf("message %d on %s with headers %v carries seq %d id %s", n, m.Subject, m.Header, e.Seq, e.ID)
		}
	}
}
