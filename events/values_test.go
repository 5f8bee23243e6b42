package events

import (
	"errors"
	"testing"
)

// checkSet holds one closed set to its rules: every listed value is valid
// and accepted by member, values are distinct, and anything else is
// refused with ErrInvalid.
func checkSet[T interface {
	~string
	Valid() bool
	values() []T
}](t *testing.T, zero T) {
	t.Helper()
	seen := map[T]bool{}
	for _, v := range zero.values() {
		if !v.Valid() || member("f", v) != nil || seen[v] {
			t.Errorf("%T value %q: valid=%v dup=%v", v, v, v.Valid(), seen[v])
		}
		seen[v] = true
	}
	for _, bad := range []T{"", "OK", "nope", T(string(zero.values()[0]) + " ")} {
		if bad.Valid() || !errors.Is(member("f", bad), ErrInvalid) {
			t.Errorf("%T accepted %q", bad, bad)
		}
	}
}

func TestClosedSets(t *testing.T) {
	checkSet(t, Cleanup(""))
	checkSet(t, PoisonReason(""))
	checkSet(t, CallOutcome(""))
	checkSet(t, RequestMethod(""))
	checkSet(t, CompletionRef(""))
	checkSet(t, SubscriptionEndReason(""))
	checkSet(t, RequestOutcome(""))
	checkSet(t, Delivery(""))
	checkSet(t, Remote(""))
	checkSet(t, Transport(""))
	checkSet(t, Phase(""))
	checkSet(t, Obligation(""))
	checkSet(t, BarrierOutcome(""))
	checkSet(t, Signal(""))
	checkSet(t, LostReason(""))
	checkSet(t, HTTPMethod(""))
	checkSet(t, HTTPOutcome(""))
	checkSet(t, HTTPBarrierOutcome(""))
	checkSet(t, SessionTransport(""))
	checkSet(t, Status(""))
	checkSet(t, Result(""))
	checkSet(t, TerminationReason(""))
	checkSet(t, RefusalReason(""))
	checkSet(t, FailureCause(""))
	checkSet(t, RelayMethod(""))
	checkSet(t, RelayOutcome(""))
	checkSet(t, ElicitMode(""))
	checkSet(t, ListKind(""))
	checkSet(t, LogLevel(""))
}

// TestBarrierOutcomeStatus holds the outcome→status rule that the
// runtime's and the projector's close reports share: every outcome maps to
// a valid status, only ok confirms, error and timeout fail, pending,
// unsupported and missing keep their names, and no outcome is missing.
func TestBarrierOutcomeStatus(t *testing.T) {
	want := map[BarrierOutcome]Status{
		BarrierOK: StatusConfirmed, BarrierError: StatusFailed, BarrierTimeout: StatusFailed,
		BarrierMissing: StatusMissing, BarrierUnsupported: StatusUnsupported, BarrierPending: StatusPending,
		"": StatusMissing,
	}
	for _, o := range append(BarrierOutcome("").values(), "") {
		got := o.Status()
		if got != want[o] || !got.Valid() {
			t.Errorf("BarrierOutcome(%q).Status() = %q, want %q", o, got, want[o])
		}
	}
}

// TestPhases: a connection's phases are ordered active, closing, closed;
// only the later two may be recorded, so connection.phase refuses active.
func TestPhases(t *testing.T) {
	for _, p := range Phase("").values() {
		if p.Recorded() == (p == PhaseActive) {
			t.Errorf("Phase %q: Recorded %v", p, p.Recorded())
		}
	}
	if err := (&ConnectionPhase{Phase: PhaseActive}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("connection.phase{active}: %v, want ErrInvalid", err)
	}
	if err := (&ConnectionPhase{Phase: PhaseClosing}).Validate(); err != nil {
		t.Errorf("connection.phase{closing}: %v", err)
	}
}

// TestCloseObligations: report order is the catalogue order, and every
// obligation is in it once.
func TestCloseObligations(t *testing.T) {
	all := CloseObligations()
	seen := map[Obligation]bool{}
	for _, o := range all {
		if !o.Valid() || seen[o] {
			t.Errorf("obligation %q: valid %v, repeated %v", o, o.Valid(), seen[o])
		}
		seen[o] = true
	}
	if all[0] != ObligationTransport || all[3] != ObligationHTTPRequests {
		t.Errorf("report order %v", all)
	}
}

// TestPoisonRefusal: the call that poisons a lease is refused with a valid
// refusal reason of the poison's name.
func TestPoisonRefusal(t *testing.T) {
	for _, p := range PoisonReason("").values() {
		if r := p.Refusal(); !r.Valid() || string(r) != string(p) {
			t.Errorf("PoisonReason(%q).Refusal() = %q", p, r)
		}
	}
}
