package live_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
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

// appendBare appends ds to the ledger in dir opened bare, with no
// projection: the tail a killed serve leaves for the next start to replay.
func appendBare(t testing.TB, dir string, ds []events.Draft) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, ds)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// fullReplay rebuilds the state from the whole log of an open ledger and
// returns its live part (what Projection.Marshal returns).
func fullReplay(t testing.TB, l *ledger.Ledger) []byte {
	t.Helper()
	b, err := projector.MarshalLive(replayState(t, l))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replayState is the plain in-memory state of a full replay.
func replayState(t testing.TB, l *ledger.Ledger) *projector.State {
	t.Helper()
	s := projector.New()
	if err := l.Scan(context.Background(), ledger.Query{}, func(_ ledger.Seq, raw []byte) error { return s.ApplyRaw(raw) }); err != nil {
		t.Fatal(err)
	}
	return s
}

// sameReports checks that every activation's report and close report read
// through p (from memory or from its stored part) equals the full replay's.
func sameReports(t testing.TB, p *live.Projection, want *projector.State) {
	t.Helper()
	for _, id := range want.ActivationIDs() {
		wr, _ := want.Report(id)
		gr, ok, err := p.Report(id)
		if err != nil || !ok {
			t.Fatalf("report %s: %v %v", id, ok, err)
		}
		wc, wok := want.CloseReport(id)
		gc, gok, err := p.CloseReport(id)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal([]any{wr, wok, wc})
		b, _ := json.Marshal([]any{gr, gok, gc})
		if !bytes.Equal(a, b) {
			t.Fatalf("report %s differs from full replay:\n%s\n%s", id, b, a)
		}
	}
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

// TestSnapshotAfterRestart: a projection started from a stored snapshot
// plus a tail builds its snapshotter's shadow from that snapshot only when
// it first snapshots (not on the way to serving); what that snapshot and
// the next ones store is still exactly the live state and a full replay's,
// with every report read back from the stored parts equal to a full
// replay's after a further restart.
func TestSnapshotAfterRestart(t *testing.T) {
	dir := t.TempDir()
	work := eventgen.Workload(5000, 25)
	p := mustOpen(t, dir, -1)
	appendAll(t, p.Ledger(), work[:2000])
	if err := p.Close(); err != nil { // the final snapshot, at 2000
		t.Fatal(err)
	}
	// A tail the next start replays (what a killed serve leaves).
	appendBare(t, dir, work[2000:2700])

	p = mustOpen(t, dir, -1)
	if st := p.Stats(); st.SnapshotSeq != 2000 || st.Replayed != 700 || st.Snapshots != 0 {
		t.Fatalf("open stats %+v", st)
	}
	if m := p.Memory(); m.Shadow != 0 {
		t.Errorf("Open built a shadow of %d activations before any snapshot", m.Shadow)
	}
	for i, chunk := range [][]events.Draft{work[2700:3500], nil, work[3500:]} {
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
		if covers != p.Ledger().Head().Seq || !bytes.Equal(data, liveState) || !bytes.Equal(data, fullReplay(t, p.Ledger())) {
			t.Fatalf("snapshot %d after the restart (covers %d, head %d) differs from the live state or a full replay", i, covers, p.Ledger().Head().Seq)
		}
	}
	want := replayState(t, p.Ledger())
	sameReports(t, p, want)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Restarted from that snapshot with nothing to replay, and closed at
	// once: the final snapshot (the first, building the shadow) changes
	// nothing a reader sees.
	for range 2 {
		p = mustOpen(t, dir, -1)
		if st := p.Stats(); st.SnapshotSeq != uint64(len(work)) || st.Replayed != 0 {
			t.Fatalf("reopen stats %+v", st)
		}
		sameReports(t, p, want)
		sameSummary(t, p, want)
		if got, _ := p.Marshal(); !bytes.Equal(got, fullReplay(t, p.Ledger())) {
			t.Fatal("live part after the restart differs from full replay")
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSnapshotAfterStoringReplay: a start whose tail replay stored
// snapshots of its own (every SnapshotEvery events) snapshots on from the
// newest of them: no activation the replay's snapshots encoded is encoded
// again (each of the history's retired activations is encoded once in
// all), and the snapshot equals the live state and a full replay.
func TestSnapshotAfterStoringReplay(t *testing.T) {
	dir := t.TempDir()
	work := eventgen.Workload(20_000, 500)
	p := mustOpen(t, dir, -1)
	appendAll(t, p.Ledger(), work[:1000])
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	encoded := p.Memory().Encoded // by the final snapshot
	appendBare(t, dir, work[1000:16_000])

	p = mustOpen(t, dir, 5000) // stores at 6000, 11000 and 16000 while replaying
	defer p.Close()
	if st := p.Stats(); st.SnapshotSeq != 1000 || st.Replayed != 15_000 || st.Snapshots != 3 {
		t.Fatalf("open stats %+v", st)
	}
	appendAll(t, p.Ledger(), work[16_000:])
	if err := p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	want := replayState(t, p.Ledger())
	if encoded += p.Memory().Encoded; encoded > uint64(want.InMemory()) {
		t.Fatalf("%d encodings for %d activations: the snapshot after the replay encoded again what the replay's had", encoded, want.InMemory())
	}
	covers, data, err := p.Ledger().LoadSnapshot(live.DefaultSnapshotName)
	if err != nil {
		t.Fatal(err)
	}
	if liveState, _ := p.Marshal(); covers != ledger.Seq(len(work)) || !bytes.Equal(data, liveState) || !bytes.Equal(data, fullReplay(t, p.Ledger())) {
		t.Fatalf("snapshot (covers %d) differs from the live state or a full replay", covers)
	}
	sameReports(t, p, want)
}

// TestUnchangedSnapshotNotStoredAgain: a snapshot is stored only when
// events were applied since the stored one — a restart that appends
// nothing and stops stores nothing (nothing for the next start to replay
// and flush) — and one is stored whenever there were, so that the next
// start still replays nothing.
func TestUnchangedSnapshotNotStoredAgain(t *testing.T) {
	dir := t.TempDir()
	work := eventgen.Workload(3000, 60)
	stores := 0
	open := func() *live.Projection {
		p := mustOpen(t, dir, -1)
		live.SetAfterStore(p, func() { stores++ })
		return p
	}
	p := open()
	appendAll(t, p.Ledger(), work[:1000])
	for range 2 {
		if err := p.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if stores != 1 {
		t.Fatalf("%d snapshots stored for one interval with events", stores)
	}
	// Idle restarts: nothing replayed, nothing stored.
	for range 2 {
		stores = 0
		p = open()
		if st := p.Stats(); st.SnapshotSeq != 1000 || st.Replayed != 0 {
			t.Fatalf("idle restart: %+v", st)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if stores != 0 {
			t.Fatalf("an idle restart stored %d snapshots", stores)
		}
	}
	// A tail replayed at the start is stored at the stop even with no
	// append in between; appends are stored too.
	appendBare(t, dir, work[1000:2000])
	for i, chunk := range [][]events.Draft{nil, work[2000:]} {
		stores = 0
		p = open()
		appendAll(t, p.Ledger(), chunk)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if stores != 1 {
			t.Fatalf("stop %d after new events stored %d snapshots", i, stores)
		}
	}
	p = open()
	defer p.Close()
	if st := p.Stats(); st.SnapshotSeq != uint64(len(work)) || st.Replayed != 0 {
		t.Fatalf("restart after the stores: %+v", st)
	}
	if got, _ := p.Marshal(); !bytes.Equal(got, fullReplay(t, p.Ledger())) {
		t.Fatal("live part differs from full replay")
	}
	sameReports(t, p, replayState(t, p.Ledger()))
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

// TestRetiredLeaveMemory: with periodic snapshots, closed activations
// leave memory once a snapshot covers them (the live state and the shadow
// hold live leases plus one interval's worth), every retired activation is
// encoded once, reports read from the stored parts equal a full replay's,
// and a restart loads the header and replays only the tail — also after a
// whole-log replay (no usable snapshot), which snapshots as it goes.
func TestRetiredLeaveMemory(t *testing.T) {
	dir := t.TempDir()
	const every = 2000
	work := eventgen.Workload(60_000, 1500) // 40 events per activation, 97 sessions
	p := mustOpen(t, dir, every)
	peak := 0
	for i := 0; i < len(work); i += 500 {
		appendAll(t, p.Ledger(), work[i:min(i+500, len(work))])
		if err := p.Snapshot(); err != nil {
			t.Fatal(err)
		}
		m := p.Memory()
		peak = max(peak, m.Activations, m.Shadow)
	}
	// 97 sessions keep one lease (and its activation) each; the rest are
	// retired within a snapshot interval (500 events: 13 activations).
	if bound := 97 + 2*(500/40+1); peak > bound {
		t.Fatalf("peak %d activations in memory, bound %d", peak, bound)
	}
	want := replayState(t, p.Ledger())
	sameReports(t, p, want)
	sameSummary(t, p, want)
	if got, _ := p.Marshal(); !bytes.Equal(got, fullReplay(t, p.Ledger())) {
		t.Fatal("live part differs from full replay")
	}
	if enc := p.Memory().Encoded; enc > uint64(want.InMemory()) {
		t.Fatalf("%d encodings for %d activations: an unchanged retired activation was encoded again", enc, want.InMemory())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	p = mustOpen(t, dir, every)
	if st := p.Stats(); st.Replayed != 0 || st.SnapshotIgnored != "" {
		t.Fatalf("reopen: %+v", st)
	}
	if m := p.Memory(); m.Activations > 97+1 {
		t.Fatalf("reopen holds %d activations", m.Activations)
	}
	sameReports(t, p, want)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// No usable header: a whole-log replay snapshots every SnapshotEvery
	// events, deleting the stale parts first.
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SaveSnapshot(live.DefaultSnapshotName, 1, []byte(`{"format":"leaseledger-projector","version":0,"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	p = mustOpen(t, dir, every)
	defer p.Close()
	if st := p.Stats(); st.SnapshotIgnored == "" || st.Snapshots < uint64(len(work)/every)-1 {
		t.Fatalf("full replay: %+v", st)
	}
	if m := p.Memory(); m.Activations > 97+every/40+1 {
		t.Fatalf("after a full replay %d activations in memory", m.Activations)
	}
	sameReports(t, p, want)
	sameSummary(t, p, want)
}

// sameSummary: Projection.Summarize (memory, then the stored parts) equals
// audit.Summarize of a full replay, with every unconfirmed listed and with
// a short list.
func sameSummary(t testing.TB, p *live.Projection, want *projector.State) {
	t.Helper()
	for _, limit := range []int{audit.All, 3} {
		got, err := p.Summarize(context.Background(), limit)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(audit.Summarize(want, limit))
		if !bytes.Equal(a, b) {
			t.Fatalf("summary (limit %d) differs from full replay:\n%s\n%s", limit, a, b)
		}
	}
}
