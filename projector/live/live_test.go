package live_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"github.com/leaseledger/leaseledger/projector/live"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func appendAll(t testing.TB, l *ledger.Ledger, ds []events.Draft) {
	t.Helper()
	for len(ds) > 0 {
		n := min(len(ds), 4096)
		if _, err := l.Append(context.Background(), ds[:n]...); err != nil {
			t.Fatal(err)
		}
		ds = ds[n:]
	}
}

// fullReplay rebuilds the state from the whole log of an open ledger.
func fullReplay(t testing.TB, l *ledger.Ledger) []byte {
	t.Helper()
	s := projector.New()
	if err := l.Scan(context.Background(), ledger.Query{}, func(_ ledger.Seq, raw []byte) error { return s.ApplyRaw(raw) }); err != nil {
		t.Fatal(err)
	}
	b, err := projector.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustOpen(t *testing.T, dir string, every int) *live.Projection {
	t.Helper()
	p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: dir}, SnapshotEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRestartSnapshotPlusTail: live state == full replay; after a restart
// from a snapshot plus a tail appended while the projection was not
// running, still byte-identical to a full replay.
func TestRestartSnapshotPlusTail(t *testing.T) {
	dir := t.TempDir()
	work := eventgen.Workload(6000, 40)
	p := mustOpen(t, dir, 500)
	appendAll(t, p.Ledger(), work[:3000])
	// Reports reflect an Append as soon as it returns.
	a := "act-000001"
	if rep, ok, err := p.CloseReport(a); err != nil || !ok || rep.Result != projector.ResultConfirmed {
		t.Fatalf("close report of %s right after Append: %+v %v %v", a, rep, ok, err)
	}
	liveState, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if want := fullReplay(t, p.Ledger()); !bytes.Equal(liveState, want) {
		t.Fatal("live state differs from full replay")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Append a tail with no projection attached.
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	covers, _, err := l.LoadSnapshot(live.DefaultSnapshotName)
	if err != nil || covers != 3000 {
		t.Fatalf("snapshot on close covers %d: %v", covers, err)
	}
	appendAll(t, l, work[3000:])
	want := fullReplay(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	p = mustOpen(t, dir, 500)
	if st := p.Stats(); st.SnapshotSeq != 3000 || st.Replayed != uint64(len(work)-3000) || st.SnapshotIgnored != "" {
		t.Fatalf("open stats %+v", st)
	}
	got, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("snapshot + tail differs from full replay")
	}
	// Periodic snapshots: more appends cross SnapshotEvery.
	appendAll(t, p.Ledger(), eventgen.Workload(1200, 5))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOlderSnapshotIgnored: a snapshot of another format version is never
// trusted; Open replays the whole log and says why.
func TestOlderSnapshotIgnored(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, eventgen.Workload(500, 4))
	want := fullReplay(t, l)
	if err := l.SaveSnapshot(live.DefaultSnapshotName, 100, []byte(`{"format":"leaseledger-projector","version":0,"seq":100}`)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	p := mustOpen(t, dir, -1)
	defer p.Close()
	st := p.Stats()
	if st.SnapshotSeq != 0 || st.SnapshotIgnored == "" || st.Replayed != uint64(p.Ledger().Head().Seq) {
		t.Fatalf("stats %+v", st)
	}
	if got, _ := p.Marshal(); !bytes.Equal(got, want) {
		t.Fatal("state after ignoring the snapshot differs from full replay")
	}
}

// TestChainsBeforeAck: a caller's BeforeAck observer still sees batches.
func TestChainsBeforeAck(t *testing.T) {
	var n countObserver
	p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: t.TempDir(), BeforeAck: &n}})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, p.Ledger(), eventgen.Workload(100, 2))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n.n == 0 {
		t.Fatal("chained observer saw nothing")
	}
}

type countObserver struct{ n int }

func (c *countObserver) Committed(b []ledger.Record) { c.n += len(b) }

// TestSnapshotEqualsLiveState: the snapshotter serialises its own shadow
// state (so the live state's lock is not held while encoding); what it
// stores must be exactly the live state at the seq it covers.
func TestSnapshotEqualsLiveState(t *testing.T) {
	dir := t.TempDir()
	p := mustOpen(t, dir, -1) // no periodic snapshots: only the explicit ones
	defer p.Close()
	work := eventgen.Workload(3000, 30)
	for i, chunk := range [][]events.Draft{work[:700], work[700:1900], work[1900:]} {
		appendAll(t, p.Ledger(), chunk)
		if err := p.Snapshot(); err != nil {
			t.Fatal(err)
		}
		covers, data, err := p.Ledger().LoadSnapshot(live.DefaultSnapshotName)
		if err != nil {
			t.Fatal(err)
		}
		liveState, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if covers != p.Ledger().Head().Seq || !bytes.Equal(data, liveState) {
			t.Fatalf("snapshot %d (covers %d, head %d) differs from the live state", i, covers, p.Ledger().Head().Seq)
		}
	}
}
