package projector_test

import (
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
)

// TestHostBound: the state keeps the host the latest host.bound names —
// through Apply, ApplyRaw and a snapshot — and counts it as no anomaly;
// the audit summary carries it.
func TestHostBound(t *testing.T) {
	c := eventgen.NewChain(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	bound := events.Draft{Payload: &events.HostBound{Host: "host-eu-1"}}
	lease := events.Draft{Activation: "act-1", Session: "s-1", Server: "srv",
		Payload: &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}}
	byEnv, byRaw := projector.New(), projector.New()
	for _, d := range []events.Draft{bound, lease} {
		env, raw := c.Seal(d)
		if err := byEnv.Apply(&env); err != nil {
			t.Fatal(err)
		}
		if err := byRaw.ApplyRaw(raw); err != nil {
			t.Fatal(err)
		}
	}
	for name, s := range map[string]*projector.State{"Apply": byEnv, "ApplyRaw": byRaw} {
		if s.Host() != "host-eu-1" {
			t.Fatalf("%s: Host() = %q", name, s.Host())
		}
		if s.Anomalies() != (projector.Anomalies{}) {
			t.Fatalf("%s: anomalies %+v after a host.bound", name, s.Anomalies())
		}
	}
	b, err := projector.Marshal(byEnv)
	if err != nil {
		t.Fatal(err)
	}
	back, err := projector.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Host() != "host-eu-1" {
		t.Fatalf("after a snapshot: Host() = %q", back.Host())
	}
	if sum := audit.Summarize(byRaw, 0); sum.Host != "host-eu-1" {
		t.Fatalf("summary host %q", sum.Host)
	}
	if projector.New().Host() != "" {
		t.Fatal("an empty state has a host")
	}
}
