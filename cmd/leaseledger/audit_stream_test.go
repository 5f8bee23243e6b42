package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// TestAuditAllStreamingTwin: audit --all, which settles and drops retired
// activations as it replays, prints exactly audit.Summarize of a plain
// full replay — on a log longer than several settlement intervals whose
// retired activations later get late events and reopens, with confirmed,
// unconfirmed, never-closed and never-started activations.
func TestAuditAllStreamingTwin(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var ds []events.Draft
	d := func(act, sess string, p events.Payload) {
		ds = append(ds, events.Draft{Activation: act, Session: sess, Server: "srv", Payload: p})
	}
	for i := range n {
		act, sess := fmt.Sprintf("act-%05d", i), fmt.Sprintf("s-%d", i%7)
		if i%13 == 0 { // a cap refusal: never started
			d(act, sess, &events.LeaseAcquireFailed{Reason: "cap", DurationNS: 1})
			continue
		}
		d(act, sess, &events.LeaseAcquiring{KeySession: sess, Fingerprint: auditDigest})
		d(act, sess, &events.LeaseAcquired{Fingerprint: auditDigest, DurationNS: 1})
		if i%5 != 0 { // every fifth never closes
			d(act, sess, &events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupBestEffort})
			if i%3 == 0 {
				for _, ob := range projector.Obligations {
					d(act, sess, &events.ConnectionBarrier{Obligation: ob, Outcome: events.BarrierOK, ElapsedNS: 1})
				}
			}
			d(act, sess, &events.ConnectionClosed{ElapsedNS: 1})
		}
		d(act, sess, &events.LeaseTerminated{Reason: "closed"})
		if j := i - 700; j > 0 && j%11 == 0 { // a late event long after retirement
			d(fmt.Sprintf("act-%05d", j), fmt.Sprintf("s-%d", j%7), &events.HTTPBarrier{Ref: "r1", Outcome: events.HTTPBarrierOK})
		}
		if j := i - 900; j > 0 && j%17 == 0 { // a reopen
			d(fmt.Sprintf("act-%05d", j), "s-x", &events.LeaseAcquiring{KeySession: "s-x", Fingerprint: auditDigest})
		}
	}
	for rest := ds; len(rest) > 0; {
		k := min(len(rest), 4096)
		if _, err := l.Append(context.Background(), rest[:k]...); err != nil {
			t.Fatal(err)
		}
		rest = rest[k:]
	}
	plain := projector.New()
	if err := l.Scan(context.Background(), ledger.Query{}, func(_ ledger.Seq, raw []byte) error { return plain.ApplyRaw(raw) }); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ds) < 3*auditSettleEvery {
		t.Fatalf("only %d events", len(ds))
	}
	for _, limit := range []int{0, 7} {
		args := []string{"--data-dir", dir, "audit", "--all", "--json", "--limit", fmt.Sprint(limit)}
		want := audit.Summarize(plain, audit.All) // --limit 0: all
		if limit > 0 {
			want = audit.Summarize(plain, limit)
		}
		r := runCLI(t, context.Background(), "", args...)
		var got audit.Summary
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("audit --all: %v %+v", err, r)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if string(a) != string(b) {
			t.Fatalf("limit %d: streaming audit --all differs from the full replay's summary:\n%.2000s\n%.2000s", limit, a, b)
		}
	}
}
