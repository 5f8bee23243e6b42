package busclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// Start a bus on a ledger and follow it with a Client: Tail catches up on
// stored events through replay, then delivers live ones, with no gap and no
// duplicate.
func ExampleClient_Tail() {
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	ctx := context.Background()
	// Stored before the tail starts: delivered by replay.
	if _, err := l.Append(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked"}}); err != nil {
		panic(err)
	}
	nc, err := nats.Connect(b.ClientURL()) // anonymous clients may read
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c := busclient.NewClient(nc)

	done := errors.New("done")
	err = c.Tail(ctx, 1, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
		kind, _ := events.PeekKind(raw)
		fmt.Println(seq, kind)
		if seq == 1 {
			// Committed while tailing: delivered live.
			go l.Append(ctx, events.Draft{Session: "s1", Payload: &events.SessionEnded{LeasesTerminated: 1}})
		}
		if seq == 2 {
			return done
		}
		return nil
	})
	fmt.Println(errors.Is(err, done))
	// Output:
	// 1 lease.revoked
	// 2 session.ended
	// true
}

// An Appender appends to the ledger behind a running bus, with the same
// signature as (*ledger.Ledger).Append; its connection must be the bus's
// writer user.
func ExampleAppender() {
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, WriterUser: "host", WriterPassword: "secret"})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	nc, err := nats.Connect(b.ClientURL(), busclient.UserOptions("host", "secret")...)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	app := busclient.NewAppender(busclient.NewClient(nc))
	seqs, err := app.Append(context.Background(),
		events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked"}},
		events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: "revoked"}})
	if err != nil {
		panic(err) // errors.Is(err, busclient.ErrInDoubt): maybe written, read the log
	}
	fmt.Println(seqs, l.Head().Seq)
	// Output: [1 2] 2
}
