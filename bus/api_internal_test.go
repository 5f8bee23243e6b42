package bus

import (
	"fmt"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// Append errors after which the ledger cannot say whether the events were
// written are marked in doubt (busclient.HeaderInDoubt); refusals are not.
func TestInDoubtReplies(t *testing.T) {
	wrap := func(sentinel error) error {
		return &ledger.Error{Op: "append", Err: fmt.Errorf("%w: cause", sentinel)}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wrap(ledger.ErrFailed), true},
		{wrap(ledger.ErrUnacknowledged), true},
		{wrap(ledger.ErrClosed), false},
		{wrap(ledger.ErrClock), false},
		{wrap(ledger.ErrTooManyEvents), false},
		{wrap(events.ErrInvalid), false},
		{fmt.Errorf("line 2: %w", events.ErrUnknownKind), false},
	} {
		if got := inDoubt(c.err); got != c.want {
			t.Errorf("inDoubt(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
