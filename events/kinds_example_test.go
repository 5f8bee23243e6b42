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

// AppendSubjectTokens builds what follows the subject prefix into a
// reused buffer, here under a host's prefix: the bytes Subject gives after
// SubjectPrefix.
func ExampleAppendSubjectTokens() {
	buf := make([]byte, 0, 128)
	buf = append(buf, "leaseledger.hosts.h1.events."...)
	buf = events.AppendSubjectTokens(buf, "call.finished", "act-7")
	fmt.Println(string(buf))
	fmt.Println(events.Subject("call.finished", "act-7"))
	// Output:
	// leaseledger.hosts.h1.events.call.finished.act-7
	// leaseledger.events.call.finished.act-7
}
