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
}
