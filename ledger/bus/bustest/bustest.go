// Package bustest starts real buses on real ledgers for tests: the tests of
// ledger/bus and ledger/busclient share it; nothing else links it.
package bustest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/bus"
	"github.com/nats-io/nats.go"
)

// Digest is a valid digest for test events.
var Digest = strings.Repeat("ab", 32)

// Draft returns a small valid event (call.admitted number i) for
// activation a and session s.
func Draft(a, s string, i int) events.Draft {
	return events.Draft{Activation: a, Session: s, Server: "srv",
		Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Digest: Digest}}
}

// Open opens (creating) the ledger in dir, failing the test on error.
func Open(t testing.TB, dir string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// Start opens a ledger in a temporary directory and starts a bus on it on
// a random port; both are closed when the test ends.
func Start(t *testing.T, opts bus.Options) (*ledger.Ledger, *bus.Bus) {
	t.Helper()
	l := Open(t, t.TempDir())
	opts.Port = bus.RandomPort
	b, err := bus.Start(l, opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		l.Close()
	})
	return l, b
}

// Connect connects to url, closing the connection when the test ends.
func Connect(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
