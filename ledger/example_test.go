package ledger_test

import (
	"context"
	"errors"
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

// Bind a ledger's chain to its host, then mirror it: Import stores the
// source's events verbatim in a mirror ledger, skips what it already holds
// and refuses a batch that would leave a gap.
func ExampleLedger_Import() {
	ctx := context.Background()
	srcDir, _ := os.MkdirTemp("", "ledger-source-")
	defer os.RemoveAll(srcDir)
	mDir, _ := os.MkdirTemp("", "ledger-mirror-")
	defer os.RemoveAll(mDir)

	src, err := ledger.Open(ledger.Options{Dir: srcDir})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	bound, _ := src.BindHost(ctx, "host-eu-1") // seq 1: the chain's genesis
	again, _ := src.BindHost(ctx, "host-eu-1") // already bound: nothing written
	_, err = src.BindHost(ctx, "host-us-1")
	fmt.Println("bound at", bound, again, "other host refused:", errors.Is(err, ledger.ErrHostMismatch))
	for i := range 4 {
		if _, err := src.Append(ctx, events.Draft{Activation: fmt.Sprintf("act-%d", i), Payload: &events.LeaseTerminated{Reason: "revoked"}}); err != nil {
			panic(err)
		}
	}
	var raws [][]byte
	for seq := ledger.Seq(1); seq <= src.Head().Seq; seq++ {
		raw, _ := src.GetRaw(seq)
		raws = append(raws, raw)
	}

	m, err := ledger.Open(ledger.Options{Dir: mDir, Mirror: true})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	h, _ := m.Import(ctx, raws[:3])
	fmt.Println("mirror head", h.Seq)
	_, err = m.Import(ctx, raws[4:])
	fmt.Println("gap refused:", errors.Is(err, ledger.ErrImportGap))
	h, _ = m.Import(ctx, raws[1:]) // seqs 2 and 3 again: skipped
	fmt.Println("mirror head", h.Seq, "same as source:", h == src.Head())
	_, err = m.Append(ctx, events.Draft{Payload: &events.LeaseTerminated{Reason: "revoked"}})
	fmt.Println("append refused:", errors.Is(err, ledger.ErrMirror))
	// Output:
	// bound at 1 1 other host refused: true
	// mirror head 3
	// gap refused: true
	// mirror head 5 same as source: true
	// append refused: true
}
