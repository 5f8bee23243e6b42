package live_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// Request owners in random order — registrations after an owner's end,
// repeated ends, handles re-registered to other owners, completions and
// cancels of ended handles — with snapshots and restarts at random points
// give exactly what a full replay gives: retiring ended owners changes
// nothing a reader can see.
func TestOwnersRandomWithRestarts(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		dir := t.TempDir()
		rng := rand.New(rand.NewSource(seed))
		p := mustOpen(t, dir, -1)
		h := 0
		for i := range 400 {
			o := fmt.Sprintf("o-%d", rng.Intn(30))
			var ds []events.Draft
			switch rng.Intn(6) {
			case 0, 1:
				h++
				ds = append(ds, draft("act-1", "s-1", &events.RequestRegistered{Handle: fmt.Sprintf("h-%d", h), Owner: o, Method: "resources/read", TimeoutNS: 5}))
			case 2:
				ds = append(ds, draft("act-1", "s-1", &events.RequestRegistered{Handle: fmt.Sprintf("h-%d", rng.Intn(h+1)), Owner: o, Method: "resources/read", TimeoutNS: 5}))
			case 3:
				ds = append(ds, events.Draft{Session: "s-1", Payload: &events.RequestOwnerEnded{Owner: o, HandlesSettled: 1}})
			case 4:
				ds = append(ds, draft("act-1", "s-1", &events.RequestCompleted{Handle: fmt.Sprintf("h-%d", rng.Intn(h+1)), Outcome: events.RequestOK}))
			case 5:
				ds = append(ds, draft("act-1", "s-1", &events.RequestCancelled{Handle: fmt.Sprintf("h-%d", rng.Intn(h+1)), Reason: "x", TransportAccepted: "unknown", NotificationDelivered: "unknown", Remote: "unknown"}))
			}
			appendAll(t, p.Ledger(), ds)
			switch rng.Intn(8) {
			case 0, 1:
				if err := p.Snapshot(); err != nil {
					t.Fatal(err)
				}
			case 2:
				compareAll(t, p, fmt.Sprintf("seed %d i %d", seed, i))
				if rng.Intn(2) == 0 {
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
	}
}
