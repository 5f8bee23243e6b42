package busclient_test

import (
	"testing"

	"github.com/leaseledger/leaseledger/bus/bustest"
	"go.uber.org/goleak"
)

// The client is tested against the real server (package bus) on a
// real ledger; only the tests of replies the server never sends use a bare
// NATS server with a scripted responder.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Shared with the other bus suite (package bustest).
var (
	fp       = bustest.Digest
	draft    = bustest.Draft
	open     = bustest.Open
	startBus = bustest.Start
	connect  = bustest.Connect
)
