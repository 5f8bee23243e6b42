package ledger_test

import (
	"context"
	"testing"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// BenchmarkTreeReadOnlyProof times one inclusion proof against the head of
// a read-only ledger of treeBenchEvents events, with its Merkle node index
// ("index", the baseline) and without it ("noindex": the nodes come from
// the events). Without the index the first proof scans the log; the nodes
// it computes are cached, so the next ones cost about what they cost with
// the index (the ratio noindex/index is the measure).
func BenchmarkTreeReadOnlyProof(b *testing.B) {
	const treeBenchEvents = 100_000
	ctx := context.Background()
	for _, name := range []string{"index", "noindex"} {
		dir := b.TempDir()
		l := open(b, dir)
		appendTree(b, l, treeBenchEvents, 1000)
		l.Close()
		if name == "noindex" {
			ledgertest.DropTreeIndex(b, dir)
		}
		b.Run(name, func(b *testing.B) {
			ro, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			defer ro.Close()
			b.ResetTimer()
			for i := range b.N {
				seq := ledger.Seq(i*7919%treeBenchEvents) + 1
				if _, err := ro.InclusionProof(ctx, seq, treeBenchEvents); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
