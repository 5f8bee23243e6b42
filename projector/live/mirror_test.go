package live_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/internal/eventgen"
	"github.com/leaseledger/leaseledger/projector/live"
)

// TestLiveProjectionOverMirror: a live projection over a mirror ledger fed
// by Import (the collector's) equals the live projection over the source
// ledger — state, summary and every report — while importing, and after
// the mirror's projection restarts from its snapshot plus an imported tail.
func TestLiveProjectionOverMirror(t *testing.T) {
	ctx := context.Background()
	srcDir, mDir := t.TempDir(), t.TempDir()
	src := mustOpen(t, srcDir, 700)
	defer src.Close()
	if _, err := src.Ledger().BindHost(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	openMirror := func() *live.Projection {
		p, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: mDir, Mirror: true}, SnapshotEvery: 500})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	m := openMirror()
	work := eventgen.Workload(8000, 50)
	importTo := func(m *live.Projection) {
		t.Helper()
		for from := m.Ledger().Head().Seq + 1; from <= src.Ledger().Head().Seq; {
			var raws [][]byte
			for s := from; s <= src.Ledger().Head().Seq && len(raws) < 333; s++ {
				raw, err := src.Ledger().GetRaw(s)
				if err != nil {
					t.Fatal(err)
				}
				raws = append(raws, raw)
			}
			h, err := m.Ledger().Import(ctx, raws)
			if err != nil {
				t.Fatal(err)
			}
			from = h.Seq + 1
		}
	}
	half := len(work) / 2
	appendAll(t, src.Ledger(), work[:half])
	importTo(m)
	same(t, src, m)
	m.Close()
	appendAll(t, src.Ledger(), work[half:])
	m = openMirror() // snapshot plus a tail imported after the restart
	defer m.Close()
	importTo(m)
	same(t, src, m)
}

// same checks that the projections over the source and the mirror agree.
func same(t *testing.T, src, m *live.Projection) {
	t.Helper()
	a, err := src.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the mirror's live state differs from the source's")
	}
	sa, err := src.Summarize(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := m.Summarize(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(sa)
	jb, _ := json.Marshal(sb)
	if !bytes.Equal(ja, jb) || sa.Host != "h1" {
		t.Fatalf("summaries differ or lack the host:\n%s\n%s", ja, jb)
	}
	sameReports(t, m, replayState(t, src.Ledger()))
}
