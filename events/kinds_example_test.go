package events_test

import (
	"fmt"

	"github.com/leaseledger/leaseledger/events"
)

// Kinds the ledger writes itself are never input: an append refuses them.
func ExampleSystemOnly() {
	fmt.Println(events.SystemOnly(events.KindHostBound), events.SystemOnly("lease.terminated"))
	// Output: true false
}

// The kinds an append may carry are every kind but the SystemOnly ones.
func ExampleInputKinds() {
	fmt.Println(len(events.InputKinds()) == len(events.Kinds())-1)
	// Output: true
}
