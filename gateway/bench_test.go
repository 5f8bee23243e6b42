//go:build linux

package gateway

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The gateway's cost, measured against the baseline it replaces: a go-sdk
// client talking to the same MCP server (the runtime's go-sdk test server,
// its echo tool) directly over stdio (mcp.CommandTransport). The gateway
// path is a go-sdk client over Streamable HTTP to the gateway, which
// calls through the runtime (call gate, digest check, call.admitted and
// call.finished appended durably to a real ledger, the guardian relay) to
// the same server binary under the guardian. Both sides run in one
// benchmark, interleaved, so machine noise hits both alike; compare the
// ratios, not the absolute figures.
//
//	go test -run '^$' -bench 'Gateway(Call|Throughput64)' -benchtime 1000x ./gateway/

// benchServer is the config name of the benchmarks' server.
const benchServer = "ts"

// benchSide opens client sessions of one side of a comparison.
type benchSide struct {
	open func(b *testing.B) *mcp.ClientSession
	tool string
}

// benchGateway starts a ledger, a manager (live leases for sessions) and
// a gateway over the test server, all closed when b ends, and returns the
// gateway side.
func benchGateway(b *testing.B, sessions int) (benchSide, *runtime.Manager) {
	b.Helper()
	return benchGatewayWith(b, sessions, nil)
}

// benchGatewayWith is benchGateway with the gateway's options adjusted
// by tweak (nil: none).
func benchGatewayWith(b *testing.B, sessions int, tweak func(*Options)) (benchSide, *runtime.Manager) {
	b.Helper()
	l, err := ledger.Open(ledger.Options{Dir: filepath.Join(b.TempDir(), "ledger")})
	if err != nil {
		b.Fatal(err)
	}
	cfg := &runtime.MapConfigSource{}
	if err := cfg.Set(benchServer, testServer(nil)); err != nil {
		b.Fatal(err)
	}
	m, err := runtime.NewManager(runtime.Options{Config: cfg, Ledger: l, HelperPath: helperBin.Out, MaxLiveLeases: max(sessions, runtime.DefaultMaxLiveLeases)})
	if err != nil {
		b.Fatal(err)
	}
	gopts := Options{Manager: m, Servers: []string{benchServer}, MaxSessions: sessions + 1, MaxSessionsPerToken: sessions + 1}
	if tweak != nil {
		tweak(&gopts)
	}
	g, err := New(gopts)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv.Close()
		if err := g.Close(ctx); err != nil {
			b.Error(err)
		}
		if err := m.Close(ctx); err != nil {
			b.Error(err)
		}
		if err := l.Close(); err != nil {
			b.Error(err)
		}
	})
	return benchSide{tool: ToolName(benchServer, "echo"), open: func(b *testing.B) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench-gateway", Version: "0"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: srv.Client(), MaxRetries: -1}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		return cs
	}}, m
}

// benchLease returns a call through m's runtime alone (a session of its
// own, its own lease): the gateway's path without MCP over HTTP.
func benchLease(b *testing.B, m *runtime.Manager) func() {
	b.Helper()
	ctx := context.Background()
	scope, err := m.OpenSession(ctx, "bench-lease")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = scope.Release(ctx) })
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, benchServer)
	if err != nil {
		b.Fatal(err)
	}
	req := runtime.CallRequest{Server: benchServer, Tool: "echo", Arguments: map[string]any{"text": "benchmark"}}
	for _, pt := range tools {
		if pt.Name == "echo" {
			req.Digest = pt.Digest
		}
	}
	return func() {
		if res, err := capa.Call(ctx, req); err != nil || res.IsError {
			b.Error("lease call failed:", err)
		}
	}
}

// benchDirect is the baseline side: each session its own test server
// process, spoken to over its stdio.
func benchDirect() benchSide {
	return benchSide{tool: "echo", open: func(b *testing.B) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench-direct", Version: "0"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(testserverBin.Out)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		return cs
	}}
}

// echo calls the side's echo tool once on cs.
func (s benchSide) echo(b *testing.B, cs *mcp.ClientSession) {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: s.tool, Arguments: map[string]any{"text": "benchmark"}})
	if err != nil || res.IsError {
		b.Error("echo failed:", err)
	}
}

// BenchmarkGatewayCall measures one tool call's latency through the
// gateway and directly, sequentially, alternating in chunks; it reports
// both and their ratio, and the runtime's lease call without the gateway
// (the same durable events and guardian relay, no MCP over HTTP), so the
// gateway's own share shows (gateway/lease).
func BenchmarkGatewayCall(b *testing.B) {
	gw, m := benchGateway(b, 2)
	direct := benchDirect()
	gs, ds, lease := gw.open(b), direct.open(b), benchLease(b, m)
	for range 50 { // warm every path (the first calls start the leases)
		gw.echo(b, gs)
		direct.echo(b, ds)
		lease()
	}
	b.ResetTimer()
	var tGateway, tDirect, tLease time.Duration
	const chunk = 50
	for done := 0; done < b.N; {
		n := min(chunk, b.N-done)
		t0 := time.Now()
		for range n {
			direct.echo(b, ds)
		}
		t1 := time.Now()
		for range n {
			gw.echo(b, gs)
		}
		t2 := time.Now()
		for range n {
			lease()
		}
		tDirect += t1.Sub(t0)
		tGateway += t2.Sub(t1)
		tLease += time.Since(t2)
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(tGateway.Microseconds())/float64(b.N), "gateway-µs/call")
	b.ReportMetric(float64(tDirect.Microseconds())/float64(b.N), "direct-µs/call")
	b.ReportMetric(float64(tLease.Microseconds())/float64(b.N), "lease-µs/call")
	b.ReportMetric(float64(tGateway)/float64(tDirect), "latency-ratio")
	b.ReportMetric(float64(tGateway)/float64(tLease), "gateway/lease")
}

// benchSessions is the concurrency of BenchmarkGatewayThroughput64.
const benchSessions = 64

// BenchmarkGatewayThroughput64 measures tool-call throughput with 64
// concurrent sessions on each side (64 MCP sessions on the gateway, so 64
// leases and 64 server processes under guardians; 64 direct sessions, 64
// server processes): each b.N iteration is one round in which every
// session makes callsPerRound calls, the two sides' rounds alternating.
// It reports calls per second on each side and their ratio.
func BenchmarkGatewayThroughput64(b *testing.B) {
	const callsPerRound = 8
	gw, _ := benchGateway(b, benchSessions)
	direct := benchDirect()
	type side struct {
		benchSide
		sessions []*mcp.ClientSession
		total    time.Duration
	}
	sides := []*side{{benchSide: gw}, {benchSide: direct}}
	for _, s := range sides {
		for range benchSessions {
			s.sessions = append(s.sessions, s.open(b))
		}
	}
	round := func(s *side) {
		var wg sync.WaitGroup
		t0 := time.Now()
		for _, cs := range s.sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range callsPerRound {
					s.echo(b, cs)
				}
			}()
		}
		wg.Wait()
		s.total += time.Since(t0)
	}
	for _, s := range sides { // warm: every gateway session starts its lease
		round(s)
		s.total = 0
	}
	b.ResetTimer()
	for i := range b.N {
		// Alternate which side goes first.
		round(sides[i%2])
		round(sides[1-i%2])
	}
	b.StopTimer()
	calls := float64(b.N * benchSessions * callsPerRound)
	gwRate, directRate := calls/sides[0].total.Seconds(), calls/sides[1].total.Seconds()
	b.ReportMetric(gwRate, "gateway-calls/s")
	b.ReportMetric(directRate, "direct-calls/s")
	b.ReportMetric(gwRate/directRate, "throughput-ratio")
}
