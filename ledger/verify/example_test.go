package verify_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
)

// Verify a closed data directory, the Merkle node index included, in
// memory bounded by verify.MemoryBound whatever the log's length.
func ExampleDir() {
	dir, _ := os.MkdirTemp("", "verify-example")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 40 {
		if _, err := l.Append(context.Background(), events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "r", CallsInFlight: i}}); err != nil {
			fmt.Println(err)
			return
		}
	}
	l.Close()
	rep, err := verify.Dir(context.Background(), dir, verify.Options{Tree: true})
	fmt.Println(rep.Events, rep.Indexes, rep.TreeNodes, err)
	// Output: 40 80 3 <nil>
}
