package ledgermetrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgermetrics"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCollector(t *testing.T) {
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ds := make([]events.Draft, 250)
	for i := range ds {
		ds[i] = events.Draft{Activation: "a", Payload: &events.CallAdmitted{CallID: "c", Tool: "echo", Digest: strings.Repeat("ab", 32)}}
	}
	if _, err := l.Append(context.Background(), ds[:100]...); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), ds[100:]...); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(ledgermetrics.NewCollector(l)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			got[mf.GetName()] = m.GetCounter().GetValue()
		} else {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	if got["leaseledger_head_seq"] != 250 || got["leaseledger_appended_events_total"] != 250 ||
		got["leaseledger_commits_total"] < 1 || got["leaseledger_commits_total"] > 2 || got["leaseledger_failed"] != 0 {
		t.Fatalf("metrics %v", got)
	}
}
