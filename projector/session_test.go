package projector_test

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector"
)

func sessionOpened(session, principal string, tr events.SessionTransport) events.Draft {
	return events.Draft{Session: session, Payload: &events.SessionOpened{Principal: principal, Transport: tr}}
}

func sessionEnded(session string) events.Draft {
	return events.Draft{Session: session, Payload: &events.SessionEnded{}}
}

// The projection keeps open sessions with who opened them, drops a session
// at its end, and counts a re-open of a session whose end was never
// recorded.
func TestSessions(t *testing.T) {
	f := newFeed(t)
	f.apply(sessionOpened("s-2", "", events.SessionEmbedded), sessionOpened("s-1", "team-a", events.SessionMCPHTTP))
	got := f.s.Sessions()
	if len(got) != 2 || got[0].ID != "s-1" || got[1].ID != "s-2" {
		t.Fatalf("sessions %+v", got)
	}
	if s := got[0]; s.Principal != "team-a" || s.Transport != events.SessionMCPHTTP || s.OpenedSeq != 2 || s.OpenedAt.IsZero() || s.Reopened != 0 {
		t.Fatalf("s-1: %+v", s)
	}
	if s := got[1]; s.Principal != "" || s.Transport != events.SessionEmbedded || s.OpenedSeq != 1 {
		t.Fatalf("s-2: %+v", s)
	}

	f.apply(sessionEnded("s-1"), sessionEnded("s-9"))
	if _, ok := f.s.Session("s-1"); ok {
		t.Fatal("an ended session is still open")
	}
	if n := len(f.s.Sessions()); n != 1 {
		t.Fatalf("%d open sessions, want 1", n)
	}

	f.apply(sessionOpened("s-2", "team-b", events.SessionMCPHTTP))
	if s, ok := f.s.Session("s-2"); !ok || s.Reopened != 1 || s.Principal != "team-b" || s.OpenedSeq != 5 {
		t.Fatalf("re-opened s-2: %+v %v", s, ok)
	}
	f.apply(events.Draft{Payload: &events.SessionOpened{Transport: events.SessionEmbedded}})
	if a := f.s.Anomalies(); a.Unattributed != 1 || a.Unknown != 0 {
		t.Fatalf("anomalies %+v", a)
	}
}

// The table holds open sessions only: ten thousand sessions opened and
// ended leave nothing behind, in the state or in its snapshot.
func TestSessionsBoundedByOpen(t *testing.T) {
	f := newFeed(t)
	empty, _ := projector.Marshal(projector.New())
	for i := range 10_000 {
		s := "s-" + strconv.Itoa(i)
		f.apply(sessionOpened(s, "team-a", events.SessionMCPHTTP), sessionEnded(s))
	}
	if n := len(f.s.Sessions()); n != 0 {
		t.Fatalf("%d sessions kept after their end", n)
	}
	if b, _ := projector.Marshal(f.s); len(b) > len(empty)+64 {
		t.Fatalf("snapshot grew to %d bytes (empty: %d)", len(b), len(empty))
	}
}

// Open sessions survive a snapshot round trip; a snapshot of the layout
// before them (version 2) is refused, so the caller replays the log.
func TestSessionsSnapshot(t *testing.T) {
	f := newFeed(t)
	f.apply(sessionOpened("s-1", "team-a", events.SessionMCPHTTP), sessionOpened("s-2", "", events.SessionEmbedded), sessionEnded("s-2"))
	b, err := projector.Marshal(f.s)
	if err != nil {
		t.Fatal(err)
	}
	r, err := projector.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Sessions(), f.s.Sessions()) || len(r.Sessions()) != 1 {
		t.Fatalf("restored %+v, want %+v", r.Sessions(), f.s.Sessions())
	}
	if again, _ := projector.Marshal(r); !bytes.Equal(again, b) {
		t.Fatal("snapshot round trip differs")
	}
	current := []byte(`"version":` + strconv.Itoa(projector.SnapshotVersion))
	older := bytes.Replace(b, current, []byte(`"version":2`), 1)
	var fe *projector.FormatError
	if _, err := projector.Unmarshal(older); !errors.As(err, &fe) || fe.Version != 2 {
		t.Fatalf("version 2 snapshot: %v", err)
	}
	bad := bytes.Replace(b, []byte(`"sessions":{"s-1":{"session":"s-1"`), []byte(`"sessions":{"s-1":{"session":"s-7"`), 1)
	if bytes.Equal(bad, b) {
		t.Fatalf("snapshot layout changed: %s", b)
	}
	if _, err := projector.Unmarshal(bad); !errors.Is(err, projector.ErrSnapshotCorrupt) {
		t.Fatalf("mismatched session entry: %v", err)
	}
}
