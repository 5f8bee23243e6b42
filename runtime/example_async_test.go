package runtime_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime"
)

// A *ledger.Ledger is an AsyncAppender: the manager then does not make a
// caller wait for its call's call.finished to be durable. Events queued
// with AppendPreparedAsync are ordered before every later append.
func ExampleAsyncAppender() {
	dir, _ := os.MkdirTemp("", "runtime-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	var a runtime.Appender = l
	aa, ok := a.(runtime.AsyncAppender)
	fmt.Println("async:", ok)

	ctx := context.Background()
	p, _ := events.Prepare(events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked"}})
	wait, err := aa.AppendPreparedAsync(ctx, p)
	if err != nil {
		panic(err) // nothing queued
	}
	later, _ := a.Append(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: "revoked"}})
	seqs, err := wait(ctx)
	fmt.Println(seqs, later, err)
	// Output:
	// async: true
	// [1] [2] <nil>
}
