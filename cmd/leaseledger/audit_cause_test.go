package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// `audit <activation>` of an acquisition an HTTP upstream refused says
// so: the cause and the endpoint's host:port, in text and JSON.
func TestAuditAcquireCause(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: "act-refused", Session: "s-1", Server: "remote", Payload: p}
	}
	_, err = l.Append(context.Background(),
		d(&events.LeaseAcquiring{KeySession: "s-1", Fingerprint: auditDigest}),
		d(&events.LeaseAcquireFailed{Fingerprint: auditDigest, Reason: "initialize_failed", DurationNS: 1,
			Cause: events.CauseConnectionRefused, Target: "127.0.0.1:3011"}))
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-refused")
	if r.code != 0 || !strings.Contains(r.stdout, "acquisition failed at seq 2: initialize_failed (cause connection_refused, target 127.0.0.1:3011)") {
		t.Fatalf("audit act-refused: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--json", "act-refused")
	if r.code != 0 || !strings.Contains(r.stdout, `"cause": "connection_refused"`) || !strings.Contains(r.stdout, `"target": "127.0.0.1:3011"`) {
		t.Fatalf("audit --json act-refused: %+v", r)
	}
}
