package live_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/live"
)

// streamDigest is the config fingerprint of the stream tests' leases.
const streamDigest = "2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a"

// streamLog appends a log longer than several settlement intervals whose
// retired activations later get late events and reopens, with confirmed,
// unconfirmed, never-closed and never-started activations, and returns
// its ledger (open) and the number of events.
func streamLog(t *testing.T) (*ledger.Ledger, int) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const n = 3000
	var ds []events.Draft
	d := func(act, sess string, p events.Payload) {
		ds = append(ds, events.Draft{Activation: act, Session: sess, Server: "srv", Payload: p})
	}
	for i := range n {
		act, sess := fmt.Sprintf("act-%05d", i), fmt.Sprintf("s-%d", i%7)
		if i%150 == 0 { // the access policy reloaded: past projector.MaxPolicyLoads over the log
			ds = append(ds, events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: streamDigest, Policies: i / 150}})
		}
		if i%4 == 0 { // a decision, of ids past projector.MaxAccessPolicies over the log
			d(act, sess, &events.AccessDecided{Action: events.AccessStartServer, Allowed: i%8 == 0, Policies: []string{fmt.Sprintf("p%d", i%70)}, PolicyDigest: streamDigest})
		}
		if i%13 == 0 { // a cap refusal: never started
			d(act, sess, &events.LeaseAcquireFailed{Reason: "cap", DurationNS: 1})
			continue
		}
		d(act, sess, &events.LeaseAcquiring{KeySession: sess, Fingerprint: streamDigest})
		d(act, sess, &events.LeaseAcquired{Fingerprint: streamDigest, DurationNS: 1})
		if i%5 != 0 { // every fifth never closes
			d(act, sess, &events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupBestEffort})
			if i%3 == 0 {
				for _, ob := range projector.Obligations {
					d(act, sess, &events.ConnectionBarrier{Obligation: ob, Outcome: events.BarrierOK, ElapsedNS: 1})
				}
			}
			d(act, sess, &events.ConnectionClosed{ElapsedNS: 1})
		}
		d(act, sess, &events.LeaseTerminated{Reason: events.TerminatedConnectionClosed})
		if j := i - 700; j > 0 && j%11 == 0 { // a late event long after retirement
			d(fmt.Sprintf("act-%05d", j), fmt.Sprintf("s-%d", j%7), &events.HTTPBarrier{Ref: "r1", Outcome: events.HTTPBarrierOK})
			d(fmt.Sprintf("act-%05d", j), fmt.Sprintf("s-%d", j%7), &events.AccessDecided{Action: events.AccessReadResource, TargetSHA256: streamDigest, PolicyDigest: streamDigest})
		}
		if j := i - 900; j > 0 && j%17 == 0 { // a reopen
			d(fmt.Sprintf("act-%05d", j), "s-x", &events.LeaseAcquiring{KeySession: "s-x", Fingerprint: streamDigest})
		}
	}
	appendAll(t, l, ds)
	return l, len(ds)
}

// TestStreamAuditTwin: an audit stream fed by Scan, which settles and
// drops retired activations as it replays, returns exactly audit.Summarize
// of a plain full replay, for a listing limit that cuts the list and for
// every unconfirmed activation; so does one fed by Add alone (as
// `audit --bundle` feeds it). Progress is reported.
func TestStreamAuditTwin(t *testing.T) {
	l, n := streamLog(t)
	if n < 3*live.DefaultSettleEvery {
		t.Fatalf("only %d events: fewer than three settlements", n)
	}
	plain := replayState(t, l)
	for _, limit := range []int{audit.All, 7} {
		want, _ := json.Marshal(audit.Summarize(plain, limit))
		var calls, last uint64
		s := live.NewStream(live.StreamOptions{Audit: true, Limit: limit, Progress: func(done, head uint64) { calls, last = calls+1, done }})
		if err := s.Scan(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		sum, err := s.Summary()
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(sum); string(got) != string(want) {
			t.Fatalf("limit %d: the streaming audit differs from the full replay's summary:\n%.2000s\n%.2000s", limit, got, want)
		}
		if calls < 3 || last != uint64(n) {
			t.Fatalf("progress: %d calls, last at %d of %d events", calls, last, n)
		}
		if _, err := s.Summary(); !errors.Is(err, live.ErrStreamEnded) {
			t.Fatalf("second Summary: %v", err)
		}
		if err := s.Add(ledger.Seq(n+1), nil); !errors.Is(err, live.ErrStreamEnded) {
			t.Fatalf("Add after Summary: %v", err)
		}

		pushed := live.NewStream(live.StreamOptions{Audit: true, Limit: limit})
		if err := l.Scan(context.Background(), ledger.Query{}, pushed.Add); err != nil {
			t.Fatal(err)
		}
		if sum, err = pushed.Summary(); err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(sum); string(got) != string(want) {
			t.Fatalf("limit %d: the audit stream fed by Add differs from the full replay's summary", limit)
		}
	}
}

// A settling audit stream drops what it settled: the test log's audit
// would hold every activation, the stream far fewer at the end. (Without
// settlement this fails: the twin above could pass by keeping everything.)
func TestStreamAuditSettles(t *testing.T) {
	l, _ := streamLog(t)
	s := live.NewStream(live.StreamOptions{Audit: true})
	if err := s.Scan(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	all := len(replayState(t, l).ActivationIDs())
	if in := live.StreamInMemory(s); in*2 > all {
		t.Fatalf("%d of %d activations in memory after the scan: retired ones were not settled", in, all)
	}
}

// A lease stream, fed by Scan or by Add (as over a serve's replay API),
// has the lease table and seq of a plain full replay while it forgets
// retired activations; it has no summary.
func TestStreamLeasesTwin(t *testing.T) {
	l, n := streamLog(t)
	plain := replayState(t, l)
	want, _ := json.Marshal(plain.Leases())
	all := len(plain.ActivationIDs())
	scanned := live.NewStream(live.StreamOptions{Every: 500})
	if err := scanned.Scan(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	pushed := live.NewStream(live.StreamOptions{Every: 500})
	if err := l.Scan(context.Background(), ledger.Query{}, pushed.Add); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*live.Stream{"scan": scanned, "add": pushed} {
		if got, _ := json.Marshal(s.Leases()); string(got) != string(want) || s.Seq() != uint64(n) {
			t.Fatalf("%s: lease table at seq %d differs from the full replay's at %d", name, s.Seq(), n)
		}
		if in := live.StreamInMemory(s); in*2 > all {
			t.Fatalf("%s: %d of %d activations in memory: retired ones were not forgotten", name, in, all)
		}
		if _, err := s.Summary(); !errors.Is(err, live.ErrNotAudit) {
			t.Fatalf("%s: Summary of a lease stream: %v", name, err)
		}
	}
}
