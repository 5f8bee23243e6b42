package ledger_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// Open a ledger, append events (acknowledged once fsynced) and read them
// back by seq and through an index.
func Example() {
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	ctx := context.Background()
	seqs, err := l.Append(ctx,
		events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked"}},
		events.Draft{Session: "s1", Payload: &events.SessionEnded{LeasesTerminated: 1}},
		events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: "revoked"}})
	if err != nil {
		panic(err) // an invalid draft: errors.Is(err, events.ErrInvalid), nothing written
	}
	fmt.Println("appended", seqs, "head", l.Head().Seq)

	env, _ := l.Get(2)
	fmt.Println("seq 2:", env.Kind, env.Session)

	for env, err := range l.Events(ctx, ledger.Query{Activation: "act-1"}) {
		if err != nil {
			panic(err)
		}
		fmt.Println("act-1:", env.Seq, env.Kind, env.Prev != events.Hash{})
	}
	// Output:
	// appended [1 2 3] head 3
	// seq 2: session.ended s1
	// act-1: 1 lease.revoked false
	// act-1: 3 lease.terminated true
}

// printer is an Observer: it sees every committed batch after its fsync,
// in seq order.
type printer chan string

func (p printer) Committed(batch []ledger.Record) {
	for _, r := range batch {
		p <- fmt.Sprint(r.Env.Seq, " ", r.Env.Kind)
	}
}

// Watch committed batches as they become durable.
func ExampleLedger_Watch() {
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	seen := make(printer, 8)
	unwatch := l.Watch(seen)
	if _, err := l.Append(context.Background(),
		events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked"}},
		events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: "revoked"}}); err != nil {
		panic(err)
	}
	fmt.Println(<-seen)
	fmt.Println(<-seen)
	unwatch()
	// Output:
	// 1 lease.revoked
	// 2 lease.terminated
}
