//go:build linux

package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkHTTPCallOverhead measures one lease call over Streamable HTTP
// (config lookup, gate, digest check, call.admitted + call.finished and
// the request's http.* evidence appended durably, the boundary's redirect
// and header policy) against a plain go-sdk client over
// StreamableClientTransport calling the same tool on the same server
// (server-everything in streamableHttp mode), in one run, interleaved in
// chunks, sequentially and with 16 callers at once on each side. It reports
// the per-call latencies and their ratios.
//
//	go test -run '^$' -bench HTTPCallOverhead -benchtime 2000x ./runtime/
func BenchmarkHTTPCallOverhead(b *testing.B) {
	ctx := context.Background()
	l := benchLedger(b)
	endpoint := everythingHTTP(b)
	c := mcp.NewClient(&mcp.Implementation{Name: "plain", Version: "0"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	plain, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { plain.Close() })
	capa, req := benchLease(b, ctx, ServerConfig{URL: endpoint}, l)
	plainArgs := map[string]any{"message": "benchmark"}
	leaseCall := func() {
		if res, err := capa.Call(ctx, req); err != nil || res.IsError {
			b.Error("lease call failed", err)
		}
	}
	plainCall := func() {
		if res, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: plainArgs}); err != nil || res.IsError {
			b.Error("plain call failed", err)
		}
	}
	// run makes n calls with conc callers and returns the elapsed time.
	run := func(call func(), n, conc int) time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		per := n / conc
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					call()
				}
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	for range 50 {
		leaseCall()
		plainCall()
	}
	b.ResetTimer()
	const chunk = 160
	var tPlain, tLease, tPlain16, tLease16 time.Duration
	calls := 0
	for calls < b.N {
		tPlain += run(plainCall, chunk, 1)
		tLease += run(leaseCall, chunk, 1)
		tPlain16 += run(plainCall, chunk, 16)
		tLease16 += run(leaseCall, chunk, 16)
		calls += chunk
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(calls) }
	b.ReportMetric(per(tPlain)/1e3, "plain-µs/call")
	b.ReportMetric(per(tLease)/1e3, "lease-µs/call")
	b.ReportMetric(per(tLease)/per(tPlain), "ratio")
	b.ReportMetric(per(tPlain16)/1e3, "plain16-µs/call")
	b.ReportMetric(per(tLease16)/1e3, "lease16-µs/call")
	b.ReportMetric(per(tLease16)/per(tPlain16), "ratio16")
	b.ReportMetric(0, "ns/op")
}
