package projector_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"pgregory.net/rapid"
)

// memArchive is an Archive over stored MarshalActivation bytes, as the
// live wiring keeps them under the snapshot's keys.
type memArchive struct {
	parts map[string][]byte
	loads int
	fail  error
}

func (m *memArchive) Load(id string) (*projector.Activation, bool, error) {
	if m.fail != nil {
		return nil, false, m.fail
	}
	b, ok := m.parts[id]
	if !ok {
		return nil, false, nil
	}
	m.loads++
	a, err := projector.UnmarshalActivation(b)
	return a, err == nil, err
}

// ownerKey keeps owners apart from activations in the parts map, as the
// live wiring's part keys do.
func ownerKey(id string) string { return "o." + id }

func (m *memArchive) LoadOwner(id string) (*projector.Owner, bool, error) {
	if m.fail != nil {
		return nil, false, m.fail
	}
	b, ok := m.parts[ownerKey(id)]
	if !ok {
		return nil, false, nil
	}
	m.loads++
	o, err := projector.UnmarshalOwner(b)
	return o, err == nil, err
}

// snapshot is what one atomic snapshot batch stores: the live part and
// every retired activation (the ones it wrote and the older unchanged
// ones).
type snapshot struct {
	header []byte
	parts  map[string][]byte
}

// save writes a snapshot of s over prev as the live wiring does: the live
// part, the retired activations in memory (each either new to the archive
// or changed: an unchanged one is never encoded again), then Evict.
func save(t interface{ Fatalf(string, ...any) }, s *projector.State, prev snapshot) (snapshot, int) {
	header, err := projector.MarshalLive(s)
	if err != nil {
		t.Fatalf("MarshalLive: %v", err)
	}
	next := snapshot{header: header, parts: maps.Clone(prev.parts)}
	retired := s.Retired()
	for _, a := range retired {
		b, err := projector.MarshalActivation(a)
		if err != nil {
			t.Fatalf("MarshalActivation: %v", err)
		}
		if old, ok := prev.parts[a.ID]; ok && bytes.Equal(old, b) {
			t.Fatalf("snapshot at seq %d re-encodes the unchanged retired activation %s", s.Seq(), a.ID)
		}
		next.parts[a.ID] = b
	}
	for _, o := range s.RetiredOwners() {
		b, err := projector.MarshalOwner(o)
		if err != nil {
			t.Fatalf("MarshalOwner: %v", err)
		}
		if old, ok := prev.parts[ownerKey(o.ID)]; ok && bytes.Equal(old, b) {
			t.Fatalf("snapshot at seq %d re-encodes the unchanged retired owner %s", s.Seq(), o.ID)
		}
		next.parts[ownerKey(o.ID)] = b
	}
	return next, len(retired)
}

// restore opens a snapshot as the live wiring does: Unmarshal of the live
// part over an archive of the stored activations.
func restore(t interface{ Fatalf(string, ...any) }, snap snapshot) (*projector.State, *memArchive) {
	s, err := projector.Unmarshal(snap.header)
	if err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	ar := &memArchive{parts: snap.parts}
	s.SetArchive(ar)
	return s, ar
}

func reportJSON(t interface{ Fatalf(string, ...any) }, s *projector.State, id string) string {
	rep, ok, err := s.LoadReport(id)
	if err != nil {
		t.Fatalf("LoadReport %s: %v", id, err)
	}
	cr, cok := s.CloseReport(id)
	b, _ := json.Marshal(struct {
		OK      bool
		Report  projector.ActivationReport
		CloseOK bool
		Close   projector.CloseReport
	}{ok, rep, cok, cr})
	return string(b)
}

// TestArchiveEquivalence is the retirement twin: for generated logs, a
// State that retires closed activations into an archive, snapshots (live
// part + changed retired activations, then Evict) and restarts at random
// seqs — sometimes from an older snapshot than the last one taken, as
// after a crash between snapshot batches — gives byte-identical reports
// and close reports for every activation, and the same MarshalLive, as the
// plain in-memory State. Late events, repeated closes and reopens of
// retired activations come from the generator's three activation ids.
func TestArchiveEquivalence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		log := genLog(t)
		plain := projector.New()
		for _, e := range log {
			if err := plain.Apply(&e.env); err != nil {
				t.Fatalf("Apply seq %d: %v", e.env.Seq, err)
			}
		}

		st := projector.New()
		ar := &memArchive{parts: map[string][]byte{}}
		st.SetArchive(ar)
		snaps := []snapshot{{header: mustMarshalLive(t, st), parts: map[string][]byte{}}}
		restarts := 0
		for i := 0; i < len(log); {
			e := log[i]
			raw := rapid.Bool().Draw(t, "raw")
			var err error
			if raw {
				err = st.ApplyRaw(e.raw)
			} else {
				err = st.Apply(&e.env)
			}
			if err != nil {
				t.Fatalf("archived apply seq %d: %v", e.env.Seq, err)
			}
			i++
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1: // snapshot, then drop what it covers
				snap, _ := save(t, st, snaps[len(snaps)-1])
				snaps = append(snaps, snap)
				ar.parts = snap.parts
				st.Evict(st.Seq())
			case 2: // restart (at most 3 times: a restart may go back a long way)
				if restarts++; restarts > 3 {
					break
				} // from a stored snapshot: an older one when the newer batches were lost
				snap := snaps[rapid.IntRange(0, len(snaps)-1).Draw(t, "which")]
				snaps = append(snaps, snap) // the store holds it again as the newest
				st, ar = restore(t, snap)
				i = int(st.Seq()) // seqs are 1-based: the next event is log[seq]
			}
		}
		if got, want := mustMarshalLive(t, st), mustMarshalLive(t, plain); !bytes.Equal(got, want) {
			t.Fatalf("live part differs:\n%s\n%s", got, want)
		}
		for _, id := range plain.ActivationIDs() {
			if got, want := reportJSON(t, st, id), reportJSON(t, plain, id); got != want {
				t.Fatalf("report %s differs:\n%s\n%s", id, got, want)
			}
		}
		for _, id := range st.ActivationIDs() {
			if _, ok := plain.Activation(id); !ok {
				t.Fatalf("archived state holds %s, unknown to the plain state", id)
			}
		}
		for _, id := range []string{"o0", "o1"} { // genDraft's owners
			if got, want := ownerJSON(st, id), ownerJSON(plain, id); got != want {
				t.Fatalf("owner %s differs:\n%s\n%s", id, got, want)
			}
		}
	})
}

func ownerJSON(s *projector.State, id string) string {
	o, ok := s.Owner(id)
	b, _ := json.Marshal(struct {
		OK    bool
		Owner *projector.Owner
	}{ok, o})
	return string(b)
}

// TestEndedOwnersLeaveLivePart: 10^4 request owners (one per gateway
// session) register a handle and end, with a snapshot (and Evict) every
// 500 events: the live part stays the size of a handful of owners however
// many ended, the owners in memory stay bounded by a snapshot interval's
// worth, and a later registration or repeated end of an evicted owner
// loads it back with the same result as the plain State.
func TestEndedOwnersLeaveLivePart(t *testing.T) {
	const n, every = 10_000, 500
	c := eventgen.NewChain(t0)
	plain, st := projector.New(), projector.New()
	ar := &memArchive{parts: map[string][]byte{}}
	st.SetArchive(ar)
	snap := snapshot{parts: ar.parts}
	applied, peak, firstHeader := 0, 0, 0
	both := func(ds ...events.Draft) {
		t.Helper()
		for _, d := range ds {
			env, _ := c.Seal(d)
			for _, s := range []*projector.State{plain, st} {
				if err := s.Apply(&env); err != nil {
					t.Fatalf("Apply %s: %v", env.Kind, err)
				}
			}
			if applied++; applied%every == 0 {
				snap, _ = save(t, st, snap)
				ar.parts = snap.parts
				st.Evict(st.Seq())
				if firstHeader == 0 {
					firstHeader = len(snap.header)
				}
				if len(snap.header) > firstHeader+256 {
					t.Fatalf("after %d events the live part is %d bytes (first snapshot: %d)", applied, len(snap.header), firstHeader)
				}
			}
			peak = max(peak, st.OwnersInMemory())
		}
	}
	for i := range n {
		o := fmt.Sprintf("o-%05d", i)
		both(events.Draft{Activation: "act-1", Session: "s-1", Server: "srv", Payload: &events.RequestRegistered{Handle: "h-" + o, Owner: o, Method: "resources/read", TimeoutNS: 5}},
			events.Draft{Activation: "act-1", Session: "s-1", Server: "srv", Payload: &events.RequestCompleted{Handle: "h-" + o, Outcome: events.RequestOK}},
			events.Draft{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: o, HandlesSettled: 1}})
	}
	if peak > every/3+2 {
		t.Fatalf("peak %d owners in memory, bound %d", peak, every/3+2)
	}
	// Late events for evicted owners: both anomalies, read back exactly.
	both(events.Draft{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: "o-00007"}},
		events.Draft{Activation: "act-1", Session: "s-1", Server: "srv", Payload: &events.RequestRegistered{Handle: "h-late", Owner: "o-00008", Method: "resources/read", TimeoutNS: 5}})
	for _, id := range []string{"o-00007", "o-00008", "o-00009", "o-09999"} {
		if got, want := ownerJSON(st, id), ownerJSON(plain, id); got != want {
			t.Fatalf("owner %s differs:\n%s\n%s", id, got, want)
		}
	}
	if got, want := mustMarshalLive(t, st), mustMarshalLive(t, plain); !bytes.Equal(got, want) {
		t.Fatalf("live part differs:\n%s\n%s", got, want)
	}
}

func mustMarshalLive(t interface{ Fatalf(string, ...any) }, s *projector.State) []byte {
	b, err := projector.MarshalLive(s)
	if err != nil {
		t.Fatalf("MarshalLive: %v", err)
	}
	return b
}

// closedActivation returns the drafts of one activation that acquires a
// lease, closes with a retained report and whose lease ends: retired once
// its session ends (or another acquisition replaces the lease).
func closedActivation(act, sess string) []events.Draft {
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: act, Session: sess, Server: "srv", Payload: p}
	}
	return []events.Draft{
		d(&events.LeaseAcquiring{KeySession: sess, Fingerprint: eventgen.Digest}),
		d(&events.LeaseAcquired{Fingerprint: eventgen.Digest, DurationNS: 5}),
		d(&events.ConnectionOpened{Transport: events.TransportStdio, Cleanup: events.CleanupBestEffort}),
		d(&events.ConnectionClosed{ElapsedNS: 9}),
		d(&events.LeaseTerminated{Reason: events.TerminatedConnectionClosed}),
	}
}

func applyDrafts(t *testing.T, c *eventgen.Chain, s *projector.State, ds ...events.Draft) {
	t.Helper()
	for _, d := range ds {
		env, _ := c.Seal(d)
		if err := s.Apply(&env); err != nil {
			t.Fatalf("Apply %s: %v", env.Kind, err)
		}
	}
}

// TestRetiredLateEventAndReopen: a late event for a retired, evicted
// activation loads it back and counts as late; a reopen brings it back
// live (in the live part) with the reopened verdict; both equal the plain
// State.
func TestRetiredLateEventAndReopen(t *testing.T) {
	c := eventgen.NewChain(t0)
	plain, st := projector.New(), projector.New()
	ar := &memArchive{parts: map[string][]byte{}}
	st.SetArchive(ar)
	both := func(ds ...events.Draft) {
		t.Helper()
		for _, d := range ds {
			env, _ := c.Seal(d)
			for _, s := range []*projector.State{plain, st} {
				if err := s.Apply(&env); err != nil {
					t.Fatalf("Apply %s: %v", env.Kind, err)
				}
			}
		}
	}
	snap := func() {
		t.Helper()
		next, _ := save(t, st, snapshot{parts: ar.parts})
		ar.parts = next.parts
		st.Evict(st.Seq())
	}
	both(closedActivation("act-a", "s-1")...)
	both(events.Draft{Session: "s-1", Payload: &events.SessionEnded{LeasesTerminated: 1}})
	snap()
	if _, inMem := inMemory(st, "act-a"); inMem || st.InMemory() != 0 {
		t.Fatalf("retired activation still in memory (%d in memory)", st.InMemory())
	}
	if _, ok := ar.parts["act-a"]; !ok {
		t.Fatal("retired activation not stored")
	}
	check := func(what string) {
		t.Helper()
		if got, want := reportJSON(t, st, "act-a"), reportJSON(t, plain, "act-a"); got != want {
			t.Fatalf("%s: report differs:\n%s\n%s", what, got, want)
		}
		if got, want := mustMarshalLive(t, st), mustMarshalLive(t, plain); !bytes.Equal(got, want) {
			t.Fatalf("%s: live part differs:\n%s\n%s", what, got, want)
		}
	}
	check("retired")

	loads := ar.loads
	both(events.Draft{Activation: "act-a", Session: "s-1", Server: "srv", Payload: &events.HTTPBarrier{Ref: "r9", Outcome: events.HTTPBarrierOK}})
	if ar.loads != loads+1 {
		t.Fatalf("late event: %d archive loads, want 1", ar.loads-loads)
	}
	if rep, _ := st.Report("act-a"); rep.LateEvents != 1 {
		t.Fatalf("late events %d, want 1", rep.LateEvents)
	}
	check("late event")
	snap()
	if st.InMemory() != 0 {
		t.Fatalf("late event: %d activations still in memory after the snapshot", st.InMemory())
	}

	both(events.Draft{Activation: "act-a", Session: "s-2", Server: "srv", Payload: &events.LeaseAcquiring{KeySession: "s-2", Fingerprint: eventgen.Digest}})
	snap()
	if _, inMem := inMemory(st, "act-a"); !inMem {
		t.Fatal("reopened activation left memory while its lease is in the table")
	}
	if v, _, _ := st.Verdict("act-a"); v != projector.ResultUnconfirmed {
		t.Fatalf("reopened verdict %s", v)
	}
	check("reopen")
	// Restarting from that snapshot gives the same state.
	re, _ := restore(t, snapshot{header: mustMarshalLive(t, st), parts: ar.parts})
	if got, want := reportJSON(t, re, "act-a"), reportJSON(t, plain, "act-a"); got != want {
		t.Fatalf("restart: report differs:\n%s\n%s", got, want)
	}
}

func inMemory(s *projector.State, id string) (int, bool) {
	for i, x := range s.ActivationIDs() {
		if x == id {
			return i, true
		}
	}
	return 0, false
}

// TestArchiveErrorLeavesStateUnchanged: a failing archive read fails the
// Apply with ErrArchive and changes nothing.
func TestArchiveErrorLeavesStateUnchanged(t *testing.T) {
	c := eventgen.NewChain(t0)
	st := projector.New()
	ar := &memArchive{parts: map[string][]byte{}}
	st.SetArchive(ar)
	applyDrafts(t, c, st, closedActivation("act-a", "s-1")...)
	applyDrafts(t, c, st, events.Draft{Session: "s-1", Payload: &events.SessionEnded{LeasesTerminated: 1}})
	next, _ := save(t, st, snapshot{parts: ar.parts})
	ar.parts = next.parts
	st.Evict(st.Seq())
	before := mustMarshalLive(t, st)
	ar.fail = errors.New("disk on fire")
	env, _ := c.Seal(events.Draft{Activation: "act-a", Session: "s-1", Server: "srv", Payload: &events.ConnectionClosed{ElapsedNS: 1}})
	if err := st.Apply(&env); !errors.Is(err, projector.ErrArchive) {
		t.Fatalf("Apply with a failing archive: %v, want ErrArchive", err)
	}
	if _, _, err := st.LoadReport("act-a"); !errors.Is(err, projector.ErrArchive) {
		t.Fatalf("LoadReport with a failing archive: %v, want ErrArchive", err)
	}
	if after := mustMarshalLive(t, st); !bytes.Equal(before, after) || st.Seq() != uint64(env.Seq)-1 {
		t.Fatal("a failed Apply changed the state")
	}
}

// TestRetiredMemoryBounded: 2×10^4 activations that open and close, on 97
// sessions whose leases replace each other at their keys, with a snapshot
// (and Evict) every 1,000 events: the activations in memory stay bounded
// by the live leases plus one snapshot interval's worth, and every snapshot
// encodes only what changed since the previous one.
func TestRetiredMemoryBounded(t *testing.T) {
	const n, every = 20_000, 1_000
	c := eventgen.NewChain(t0)
	st := projector.New()
	ar := &memArchive{parts: map[string][]byte{}}
	st.SetArchive(ar)
	var snap snapshot
	snap.parts = ar.parts
	applied, encoded, peak := 0, 0, 0
	for i := range n {
		for _, d := range closedActivation(fmt.Sprintf("act-%06d", i), fmt.Sprintf("s-%d", i%97)) {
			env, _ := c.Seal(d)
			if err := st.Apply(&env); err != nil {
				t.Fatal(err)
			}
			if applied++; applied%every == 0 {
				var k int
				snap, k = save(t, st, snap)
				encoded += k
				ar.parts = snap.parts
				st.Evict(st.Seq())
			}
			peak = max(peak, st.InMemory())
		}
	}
	// 97 activations hold their session's lease; a snapshot interval
	// retires at most every/5 activations (five events each) and the one
	// in progress.
	if bound := 97 + every/5 + 1; peak > bound {
		t.Fatalf("peak %d activations in memory, bound %d", peak, bound)
	}
	// Every retired activation was encoded exactly once: none again.
	if encoded != len(ar.parts) {
		t.Fatalf("%d encodings for %d stored activations", encoded, len(ar.parts))
	}
	if len(ar.parts) < n-97-every/5-1 {
		t.Fatalf("only %d of %d activations stored", len(ar.parts), n)
	}
}

type forgetful struct{}

func (forgetful) Load(string) (*projector.Activation, bool, error) { return nil, false, nil }

// TestLeaseTableIgnoresRetired: the lease table, open sessions and the
// anomaly counters do not depend on retired activations — a replay that
// forgets them (an Archive that holds nothing, Evict at random points),
// as `leaseledger leases` runs, builds the same ones as the plain State.
func TestLeaseTableIgnoresRetired(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		log := genLog(t)
		plain, st := projector.New(), projector.New()
		st.SetArchive(forgetful{})
		for _, e := range log {
			if err := plain.ApplyRaw(e.raw); err != nil {
				t.Fatal(err)
			}
			if err := st.ApplyRaw(e.raw); err != nil {
				t.Fatal(err)
			}
			if rapid.IntRange(0, 4).Draw(t, "evict") == 0 {
				st.Evict(st.Seq())
			}
		}
		view := func(s *projector.State) string {
			b, _ := json.Marshal([]any{s.Seq(), s.Leases(), s.Sessions(), s.Anomalies()})
			return string(b)
		}
		if got, want := view(st), view(plain); got != want {
			t.Fatalf("lease table differs:\n%s\n%s", got, want)
		}
	})
}
