package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// TestAuditActivity: `audit <activation>` prints the activation's
// subscriptions (started, ended by reason, open), list changes and request
// handles by method next to its relays, in text and JSON; an activation
// closed with a subscription open stays confirmed (exit 0); one without
// any of them prints none of these lines.
func TestAuditActivity(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	uri1, uri2 := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	var ds []events.Draft
	d := func(a string, p events.Payload) {
		ds = append(ds, events.Draft{Activation: a, Session: "s-1", Server: "github", Payload: p})
	}
	for _, a := range []string{"act-mcp", "act-plain"} {
		d(a, &events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupBestEffort, OneShot: true})
		if a == "act-mcp" {
			d(a, &events.RequestRegistered{Handle: "q1", Owner: "o1", Method: events.MethodSubscribe, URISHA256: uri1, TimeoutNS: 5})
			d(a, &events.RequestCompleted{Handle: "q1", Outcome: events.RequestOK})
			d(a, &events.SubscriptionStarted{Handle: "q1", URISHA256: uri1})
			d(a, &events.SubscriptionStarted{Handle: "q1", URISHA256: uri2})
			d(a, &events.SubscriptionEnded{URISHA256: uri2, Reason: events.SubscriptionLeaseEnded})
			d(a, &events.RequestRegistered{Handle: "q2", Owner: "o1", Method: events.MethodGetPrompt, TimeoutNS: 5})
			d(a, &events.RequestCompleted{Handle: "q2", Outcome: events.RequestTimeout})
			d(a, &events.LeaseListChanged{List: events.ListResources})
			d(a, &events.RelayCompleted{Method: events.RelaySampling, Outcome: events.RelayError, DurationNS: 1})
		}
		for _, o := range projector.Obligations {
			d(a, &events.ConnectionBarrier{Obligation: o, Outcome: events.BarrierOK, ElapsedNS: 5})
		}
		d(a, &events.ConnectionClosed{ElapsedNS: 7})
	}
	if _, err := l.Append(context.Background(), ds...); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-mcp")
	if r.code != 0 {
		t.Fatalf("audit act-mcp: exit %d (an open subscription is no failure)\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := "relays: 1 (accepted 0, declined 0, cancelled 0, error 1, timed_out 0, refused 0)\n" +
		"subscriptions: 2 started, 1 ended (unsubscribed 0, session_ended 0, lease_ended 1), 1 open\n" +
		"list changes: 1 (tools 0, prompts 0, resources 1)\n" +
		"requests by method:\n" +
		"  prompts/get: 1 registered (ok 0, error 0, timeout 1, cancelled 0)\n" +
		"  resources/subscribe: 1 registered (ok 1, error 0, timeout 0, cancelled 0)\n"
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("audit act-mcp output lacks\n%s\nin\n%s", want, r.stdout)
	}

	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-mcp", "--json")
	var out audit.Activation
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		t.Fatalf("json: %v %d\n%s", err, r.code, r.stdout)
	}
	rep := out.Report
	if rep.Subscriptions == nil || rep.Subscriptions.Open != 1 || rep.ListChanges == nil || rep.ListChanges.Resources != 1 ||
		rep.RequestMethods[events.MethodGetPrompt].Timeout != 1 || rep.Relays == nil || rep.Relays.Error != 1 {
		t.Fatalf("report %+v", rep)
	}

	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-plain")
	if r.code != 0 {
		t.Fatalf("audit act-plain: %+v", r)
	}
	for _, line := range []string{"relays:", "subscriptions:", "list changes:", "requests by method:"} {
		if strings.Contains(r.stdout, line) {
			t.Fatalf("audit act-plain prints %q:\n%s", line, r.stdout)
		}
	}
	if r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all"); r.code != 0 {
		t.Fatalf("audit --all: %+v", r)
	}
}
