//go:build linux

package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// inDoubtLedger appends like its ledger but reports the first
// session.opened as failed: durable, never acknowledged (a ledger's
// ErrUnacknowledged, a bus client's in-doubt timeout).
type inDoubtLedger struct {
	*memLedger
	done atomic.Bool
}

var errInDoubt = errors.New("append not acknowledged")

func (l *inDoubtLedger) Append(ctx context.Context, drafts ...events.Draft) ([]events.Seq, error) {
	seqs, err := l.memLedger.Append(ctx, drafts...)
	if err == nil && drafts[0].Payload.Kind() == "session.opened" && l.done.CompareAndSwap(false, true) {
		return nil, errInDoubt
	}
	return seqs, err
}

// An open whose session.opened has an unknown outcome records
// session.ended before failing, so a durable session.opened is never left
// without its end; the id can be opened again afterwards.
func TestOpenSessionInDoubtRecordsTheEnd(t *testing.T) {
	var l *inDoubtLedger
	p := newPolicyEnv(t, func(o *Options) {
		l = &inDoubtLedger{memLedger: o.Ledger.(*memLedger)}
		o.Ledger = l
	})
	ctx := context.Background()
	if _, err := p.m.OpenSession(ctx, "s1"); !errors.Is(err, ErrLedger) || !errors.Is(err, errInDoubt) {
		t.Fatalf("open with an unacknowledged record: %v", err)
	}
	var kinds []string
	for _, x := range p.events() {
		if x.Session == "s1" {
			kinds = append(kinds, string(x.Kind))
		}
	}
	if len(kinds) != 2 || kinds[0] != "session.opened" || kinds[1] != "session.ended" {
		t.Fatalf("recorded %v, want session.opened then session.ended", kinds)
	}
	p.open("s1")
}
