package live_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"github.com/leaseledger/leaseledger/projector/live"
)

func draft(act, sess string, p events.Payload) events.Draft {
	return events.Draft{Activation: act, Session: sess, Server: "srv", Payload: p}
}

// closedWithCall is one activation that acquires, admits a call, closes
// and ends its lease: retired once its session ends or its lease key is
// taken again.
func closedWithCall(act, sess string) []events.Draft {
	return []events.Draft{
		draft(act, sess, &events.LeaseAcquiring{KeySession: sess, Fingerprint: eventgen.Digest}),
		draft(act, sess, &events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 5}),
		draft(act, sess, &events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupBestEffort}),
		draft(act, sess, &events.CallAdmitted{CallID: "c1", Tool: "t", Digest: eventgen.Digest}),
		draft(act, sess, &events.ConnectionClosed{ElapsedNS: 9}),
		draft(act, sess, &events.LeaseTerminated{Reason: events.TerminatedConnectionClosed}),
	}
}

// sameStored checks the stored parts byte for byte: every stored
// activation not in the live state's memory (where a newer version
// governs) is exactly a full replay's MarshalActivation of it, and every
// stored owner reads as the full replay's owner.
func sameStored(t testing.TB, p *live.Projection, want *projector.State) {
	t.Helper()
	inMem := map[string]bool{}
	if err := p.View(func(s *projector.State) {
		for _, id := range s.ActivationIDs() {
			inMem[id] = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := p.Ledger().ScanSnapshotParts(context.Background(), live.DefaultSnapshotName, "", func(key string, v []byte) error {
		kind, id, _ := strings.Cut(key, ".")
		switch kind {
		case "a":
			if inMem[id] {
				return nil
			}
			a, ok := want.Activation(id)
			if !ok {
				return fmt.Errorf("stored activation %s unknown to the full replay", id)
			}
			b, err := projector.MarshalActivation(a)
			if err != nil {
				return err
			}
			if !bytes.Equal(b, v) {
				return fmt.Errorf("stored activation %s differs from the full replay's:\n%s\n%s", id, v, b)
			}
			n++
		case "o":
			var got *projector.Owner
			if err := p.View(func(s *projector.State) { got, _ = s.Owner(id) }); err != nil {
				return err
			}
			w, _ := want.Owner(id)
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(w)
			if !bytes.Equal(a, b) {
				return fmt.Errorf("owner %s differs from the full replay's:\n%s\n%s", id, a, b)
			}
		case "u", "v": // the verdict index: unconfirmed ones under u.
			if inMem[id] {
				return nil
			}
			if v, _, _ := want.Verdict(id); (v == projector.ResultUnconfirmed) != (kind == "u") {
				return fmt.Errorf("verdict index %s: the full replay's verdict is %s", key, v)
			}
		case "s": // stored stats: Summarize's twin test checks them
		default:
			return fmt.Errorf("unexpected part key %q", key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// compareAll: reports, live part, summary and stored parts equal a full
// replay's.
func compareAll(t testing.TB, p *live.Projection, what string) {
	t.Helper()
	want := replayState(t, p.Ledger())
	sameReports(t, p, want)
	if got, _ := p.Marshal(); !bytes.Equal(got, fullReplay(t, p.Ledger())) {
		t.Fatalf("%s: live part differs from full replay", what)
	}
	sameStored(t, p, want)
	sameSummary(t, p, want)
}

// TestEndedOwnersKeepHeaderConstant: request owners (the gateway makes
// one per MCP session) that register, complete and end leave the
// snapshot's live part: its header stays the same size while thousands
// end, and a restart reads them back equal to a full replay.
func TestEndedOwnersKeepHeaderConstant(t *testing.T) {
	dir := t.TempDir()
	p := mustOpen(t, dir, -1)
	var sizes []int
	for round := range 3 {
		var ds []events.Draft
		for i := range 2000 {
			o := fmt.Sprintf("o-%d-%d", round, i)
			ds = append(ds, draft("act-1", "s-1", &events.RequestRegistered{Handle: "h-" + o, Owner: o, Method: "resources/read", TimeoutNS: 5}),
				draft("act-1", "s-1", &events.RequestCompleted{Handle: "h-" + o, Outcome: events.RequestOK}),
				events.Draft{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: o, HandlesSettled: 1}})
		}
		appendAll(t, p.Ledger(), ds)
		if err := p.Snapshot(); err != nil {
			t.Fatal(err)
		}
		_, h, err := p.Ledger().LoadSnapshot(live.DefaultSnapshotName)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(h))
		if m := p.Memory(); m.Owners != 0 {
			t.Fatalf("%d owners in memory after the snapshot", m.Owners)
		}
	}
	// The seq and applied counters grow by a digit at most; the live part
	// is one open activation, no owner.
	if sizes[2] > sizes[0]+16 || sizes[0] > 4096 {
		t.Fatalf("snapshot header grows with ended owners: %v bytes", sizes)
	}
	// A repeated end and a late registration of stored owners.
	appendAll(t, p.Ledger(), []events.Draft{{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: "o-0-7"}},
		draft("act-1", "s-1", &events.RequestRegistered{Handle: "h-late", Owner: "o-1-9", Method: "resources/read", TimeoutNS: 5})})
	compareAll(t, p, "late owner events")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustOpen(t, dir, -1)
	defer p.Close()
	compareAll(t, p, "restart")
}

// TestLargeActivationStored: a retired activation whose encoding exceeds
// SnapshotChunkBytes (many never-confirmed resources) is stored in
// chunks: the snapshot succeeds, later ones too, and its report read back
// (also after a restart) equals a full replay's.
func TestLargeActivationStored(t *testing.T) {
	dir := t.TempDir()
	p := mustOpen(t, dir, -1)
	ds := []events.Draft{draft("big", "s-1", &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: eventgen.Digest}),
		draft("big", "s-1", &events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupBestEffort})}
	for i := range 24_000 {
		ds = append(ds, draft("big", "s-1", &events.HTTPRegistered{Ref: fmt.Sprintf("ref-%06d", i), Scope: "tools", Method: events.HTTPPost, Origin: "https://mcp.example.com"}))
	}
	ds = append(ds, draft("big", "s-1", &events.ConnectionClosed{ElapsedNS: 1}), draft("big", "s-1", &events.LeaseTerminated{Reason: events.TerminatedConnectionClosed}),
		events.Draft{Session: "s-1", Payload: &events.SessionEnded{LeasesTerminated: 1}})
	appendAll(t, p.Ledger(), ds)
	if err := p.Snapshot(); err != nil {
		t.Fatalf("snapshot with a large activation: %v", err)
	}
	v, ok, err := p.Ledger().LoadSnapshotPart(live.DefaultSnapshotName, "a.big")
	if err != nil || !ok || len(v) <= ledger.SnapshotChunkBytes {
		t.Fatalf("large part: %d bytes, %v %v (want more than SnapshotChunkBytes=%d)", len(v), ok, err, ledger.SnapshotChunkBytes)
	}
	for i := range 20 {
		s := fmt.Sprintf("t-%d", i)
		appendAll(t, p.Ledger(), append(closedWithCall(fmt.Sprintf("b-%03d", i), s), events.Draft{Session: s, Payload: &events.SessionEnded{LeasesTerminated: 1}}))
	}
	// A late event loads the large activation back and changes it.
	appendAll(t, p.Ledger(), []events.Draft{draft("big", "s-1", &events.HTTPBarrier{Ref: "ref-000001", Outcome: events.HTTPBarrierOK})})
	if err := p.Snapshot(); err != nil {
		t.Fatalf("snapshot after a large activation: %v", err)
	}
	if m := p.Memory(); m.Activations != 0 {
		t.Fatalf("%d activations in memory after the snapshot", m.Activations)
	}
	compareAll(t, p, "large activation")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = mustOpen(t, dir, -1)
	defer p.Close()
	compareAll(t, p, "restart")
}

// TestLiveLateReopenRestart: late evidence, late call.finished, repeated
// closes, reopens and session ends for retired (often evicted)
// activations, with snapshots and restarts at random points: reports,
// live part, summary and every stored part equal a full replay's.
func TestLiveLateReopenRestart(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		dir := t.TempDir()
		rng := rand.New(rand.NewSource(seed))
		p := mustOpen(t, dir, -1)
		var acts []string
		for i := range 300 {
			act := fmt.Sprintf("a-%04d", i)
			sess := fmt.Sprintf("s-%d", rng.Intn(5))
			acts = append(acts, act)
			ds := closedWithCall(act, sess)
			old := acts[rng.Intn(len(acts))]
			switch rng.Intn(6) {
			case 0:
				ds = append(ds, draft(old, sess, &events.HTTPBarrier{Ref: "r1", Outcome: events.HTTPBarrierOK}))
			case 1:
				ds = append(ds, draft(old, sess, &events.CallFinished{CallID: "c1", Tool: "t", Outcome: events.CallOK, ArgsSHA256: eventgen.Digest}))
			case 2:
				ds = append(ds, draft(old, "s-x", &events.LeaseAcquiring{KeySession: "s-x", Fingerprint: eventgen.Digest}))
			case 3:
				ds = append(ds, events.Draft{Session: sess, Payload: &events.SessionEnded{LeasesTerminated: 1}})
			case 4:
				ds = append(ds, draft(old, sess, &events.ConnectionClosed{ElapsedNS: 3}))
			}
			appendAll(t, p.Ledger(), ds)
			switch rng.Intn(10) {
			case 0, 1:
				if err := p.Snapshot(); err != nil {
					t.Fatal(err)
				}
			case 2:
				if rng.Intn(4) == 0 {
					compareAll(t, p, fmt.Sprintf("seed %d i %d", seed, i))
					if err := p.Close(); err != nil {
						t.Fatal(err)
					}
					p = mustOpen(t, dir, -1)
				}
			}
		}
		compareAll(t, p, "end")
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		p = mustOpen(t, dir, -1)
		compareAll(t, p, "reopen")
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadersDuringSnapshots (run with -race): reports and summaries read
// while snapshots store and evict never miss an activation, and Summarize
// counts each once: never fewer than were acknowledged before the call,
// never more than after it, verdict counts summing to the total and every
// unconfirmed one listed.
func TestReadersDuringSnapshots(t *testing.T) {
	p := mustOpen(t, t.TempDir(), -1)
	defer p.Close()
	var known atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // writer
		defer wg.Done()
		defer close(stop)
		for i := range 400 {
			sess := fmt.Sprintf("s-%d", i%4)
			ds := closedWithCall(fmt.Sprintf("a-%04d", i), sess)
			if i%3 == 0 && i > 10 {
				ds = append(ds, draft(fmt.Sprintf("a-%04d", i-10), sess, &events.HTTPBarrier{Ref: "r", Outcome: events.HTTPBarrierOK}))
			}
			if i%7 == 0 {
				ds = append(ds, events.Draft{Session: sess, Payload: &events.SessionEnded{LeasesTerminated: 1}})
			}
			if _, err := p.Ledger().Append(context.Background(), ds...); err != nil {
				t.Error(err)
				return
			}
			known.Store(int64(i + 1))
		}
	}()
	go func() { // snapshotter
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.Snapshot(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // readers
		defer wg.Done()
		for j := 0; ; j++ {
			select {
			case <-stop:
				return
			default:
			}
			n := known.Load()
			if n == 0 {
				continue
			}
			id := fmt.Sprintf("a-%04d", int64(j)%n)
			if _, ok, err := p.Report(id); err != nil || !ok {
				t.Errorf("report %s: %v %v", id, ok, err)
				return
			}
			if j%50 == 0 {
				s, err := p.Summarize(context.Background(), audit.All)
				after := known.Load()
				if err != nil {
					t.Error(err)
					return
				}
				total := 0
				for _, v := range s.Verdicts {
					total += v
				}
				// after+1: the append in flight during the call may be
				// reflected before known says so.
				if int64(s.Activations) < n || int64(s.Activations) > after+1 || total != s.Activations || s.Omitted != 0 {
					t.Errorf("summary: activations %d (before %d, after %d), verdicts sum %d, omitted %d", s.Activations, n, after, total, s.Omitted)
					return
				}
				if len(s.Unconfirmed) != s.Verdicts["unconfirmed"] {
					t.Errorf("listed %d unconfirmed, counted %d", len(s.Unconfirmed), s.Verdicts["unconfirmed"])
					return
				}
			}
		}
	}()
	wg.Wait()
}

// TestEvictUpToCovered: the live state evicts only what the stored
// snapshot covers. An activation retired by an event appended after the
// snapshotter's seq (here: between its durable batch and the eviction)
// is not in that snapshot, so it must stay in memory; evicting up to the
// live state's seq instead would lose it.
func TestEvictUpToCovered(t *testing.T) {
	p := mustOpen(t, t.TempDir(), -1)
	defer p.Close()
	appendAll(t, p.Ledger(), closedWithCall("act-late", "s-1"))
	live.SetAfterStore(p, func() {
		appendAll(t, p.Ledger(), []events.Draft{{Session: "s-1", Payload: &events.SessionEnded{LeasesTerminated: 1}}})
	})
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	live.SetAfterStore(p, nil)
	want := replayState(t, p.Ledger())
	sameReports(t, p, want)
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	compareAll(t, p, "after the next snapshot")
}
