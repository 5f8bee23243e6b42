package ledger

import (
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// BenchmarkCommitterSeal measures the committer's own work per event —
// sealing (seq, ULID, chain hash), its keys in the open batch, and with
// index=on the Merkle node index (leaf hash, completed nodes) — without the
// fsync that dominates BenchmarkAppend, so the ratio on/off is the index's
// cost to the committer.
func BenchmarkCommitterSeal(b *testing.B) {
	for _, index := range []bool{false, true} {
		name := "index=off"
		if index {
			name = "index=on"
		}
		b.Run(name, func(b *testing.B) {
			l, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			p, err := events.Prepare(events.Draft{Activation: "act-1", Session: "s1", Server: "srv",
				Payload: &events.CallFinished{CallID: "call-1", Tool: "echo", Outcome: "ok", DurationNS: 1234,
					ArgsSHA256: "abababababababababababababababababababababababababababababababab"}})
			if err != nil {
				b.Fatal(err)
			}
			// The committer is idle (nothing is appended): this goroutine
			// stands in for it.
			batch := l.db.NewBatch()
			t := time.Now()
			n := 0
			c := &committerLocal{}
			for b.Loop() {
				env, raw := l.seal(c, p, t)
				if index {
					l.treeAppend(batch, raw)
				}
				for j, k := range keys.For(&env) {
					if j == 0 {
						_ = batch.Set(k, raw, nil)
					} else {
						_ = batch.Set(k, nil, nil)
					}
				}
				if n++; n%256 == 0 {
					batch.Close()
					batch = l.db.NewBatch()
				}
			}
			batch.Close()
		})
	}
}
