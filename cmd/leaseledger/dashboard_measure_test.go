package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/leaseledger/leaseledger/bus/busclient"
)

const (
	// measureLatencyEvents are appended one at a time to time commit to
	// shown; measureHeapEvents in batches of measureBatch to weigh the
	// page after following them.
	measureLatencyEvents = 1000
	measureHeapEvents    = 100_000
	measureBatch         = 500
)

// TestDashboardMeasure measures, with LEASELEDGER_MEASURE=1 (a
// measurement, not a check: it asserts nothing about the figures), the
// time from an event's commit to its row in the page — p50/p99 over
// measureLatencyEvents appends, from the event's sealing time and from the
// append's acknowledgement — and the page's JS heap (CDP
// Performance.getMetrics JSHeapUsedSize, after a collection) once it has
// followed measureHeapEvents more:
//
//	LEASELEDGER_MEASURE=1 go test -run TestDashboardMeasure -v ./cmd/leaseledger/
func TestDashboardMeasure(t *testing.T) {
	if os.Getenv("LEASELEDGER_MEASURE") == "" {
		t.Skip("a measurement: LEASELEDGER_MEASURE=1 runs it")
	}
	chromium := requireChromium(t)
	requireNode(t)
	bin := cliBinary(t)
	srv := startServe(t, bin, t.TempDir(), writeConfig(t, ""), "--ws-port", "-1", "--writer-user", "w", "--writer-password", "pw")
	defer srv.stop(syscall.SIGTERM)
	nc, err := nats.Connect(srv.natsURL, busclient.UserOptions("w", "pw")...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client := busclient.NewClient(nc)
	ctx := context.Background()
	lines := exampleLines(t)

	b := newBrowser(t, chromium)
	b.do(chromedp.Navigate(srv.dashboardURL()))
	b.await(`__dashboard.state === "live" && __dashboard.next > 0`, e2eWait)

	// Commit to shown, one append at a time.
	acked := map[uint64]time.Time{}
	var last uint64
	for i := 0; i < measureLatencyEvents; i++ {
		acks, err := client.Append(ctx, lines[i%len(lines)])
		if err != nil {
			t.Fatal(err)
		}
		last = uint64(acks[0].Seq)
		acked[last] = time.Now()
		time.Sleep(2 * time.Millisecond) // a steady stream, not one burst
	}
	// Until the last one is on the screen, not only applied.
	b.await("__dashboard.shown.length > 0 && __dashboard.shown[__dashboard.shown.length-1][0] >= "+strconv.FormatUint(last, 10), time.Minute)
	shown := eval[[][3]float64](b, "__dashboard.shown")
	var fromSealed, fromAck []float64
	for _, s := range shown {
		if at, ok := acked[uint64(s[0])]; ok {
			fromSealed = append(fromSealed, s[1]-s[2])
			fromAck = append(fromAck, s[1]-float64(at.UnixNano())/1e6)
		}
	}
	t.Logf("commit to shown over %d events: from sealing p50 %.1f ms p99 %.1f ms; from the acknowledgement p50 %.1f ms p99 %.1f ms",
		len(fromSealed), pct(fromSealed, 50), pct(fromSealed, 99), pct(fromAck, 50), pct(fromAck, 99))

	// The page's heap after following measureHeapEvents more.
	heap := func() float64 {
		m, err := chromedp.Run(b.ctx, func(ctx context.Context, tg *chromedp.Target) (float64, error) {
			if _, err := cdp.Call(ctx, tg, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
				return 0, err
			}
			if _, err := cdp.Call(ctx, tg, performance.Enable, performance.EnableParams{}); err != nil {
				return 0, err
			}
			res, err := cdp.Call(ctx, tg, performance.GetMetrics, cdp.Empty{})
			if err != nil {
				return 0, err
			}
			for _, m := range res.Metrics {
				if m.Name == "JSHeapUsedSize" {
					return m.Value, nil
				}
			}
			return 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := heap()
	start := time.Now()
	for n := 0; n < measureHeapEvents; n += measureBatch {
		var body bytes.Buffer
		for i := 0; i < measureBatch; i++ {
			body.Write(lines[(n+i)%len(lines)])
		}
		acks, err := client.Append(ctx, body.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		last = uint64(acks[len(acks)-1].Seq)
	}
	appended := time.Since(start)
	b.await("__dashboard.next > "+strconv.FormatUint(last, 10), 5*time.Minute)
	followed := time.Since(start)
	after := heap()
	t.Logf("JS heap used: %.1f MiB before, %.1f MiB after following %d more events (appended in %v, all shown after %v; head seq %d; page: %s)",
		before/(1<<20), after/(1<<20), measureHeapEvents, appended.Round(time.Millisecond), followed.Round(time.Millisecond), last,
		eval[string](b, "JSON.stringify({applied: __dashboard.applied, replayed: __dashboard.replayed, connections: __dashboard.connections})"))
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Logf("console: %v", errs)
	}
}

// exampleLines are examples/events.jsonl's lines, newline included.
func exampleLines(t *testing.T) [][]byte {
	t.Helper()
	data, err := os.ReadFile("../../examples/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 && json.Valid(l) {
			out = append(out, append(slices.Clip(l), '\n'))
		}
	}
	return out
}

// pct is the p-th percentile of xs (nearest rank).
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
