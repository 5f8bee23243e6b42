package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/live"
)

// previousServe is what a serve killed at these moments left in its
// ledger: mcp-ending was killed during its session's end (session.ended
// and lease.terminated recorded, the guardian's receipt not yet), mcp-open
// while its session was open, act-shared's shared lease was ready; the
// embedded sessions belong to another host and are left alone.
const previousServe = `
{"kind":"session.opened","session":"mcp-ending","data":{"transport":"mcp_http"}}
{"kind":"lease.acquiring","activation":"act-ending","session":"mcp-ending","server":"tools","data":{"key_session":"mcp-ending","fingerprint":"2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a","shared":false}}
{"kind":"lease.child_started","activation":"act-ending","session":"mcp-ending","server":"tools","data":{"pid":1001,"guardian_pid":1000,"cleanup":"verified"}}
{"kind":"lease.terminated","activation":"act-ending","session":"mcp-ending","server":"tools","data":{"reason":"session_ended"}}
{"kind":"session.ended","session":"mcp-ending","data":{"leases_terminated":1,"shared_spared":0}}
{"kind":"session.opened","session":"mcp-open","data":{"transport":"mcp_http"}}
{"kind":"lease.acquiring","activation":"act-open","session":"mcp-open","server":"tools","data":{"key_session":"mcp-open","fingerprint":"2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a","shared":false}}
{"kind":"lease.child_started","activation":"act-open","session":"mcp-open","server":"tools","data":{"pid":1003,"guardian_pid":1002,"cleanup":"verified"}}
{"kind":"lease.acquiring","activation":"act-shared","session":"_shared","server":"shared","data":{"key_session":"_shared","fingerprint":"2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a","shared":true}}
{"kind":"lease.child_started","activation":"act-shared","session":"_shared","server":"shared","data":{"pid":1005,"guardian_pid":1004,"cleanup":"verified"}}
{"kind":"session.opened","session":"emb-ended","data":{"transport":"embedded"}}
{"kind":"lease.acquiring","activation":"act-emb-ended","session":"emb-ended","server":"tools","data":{"key_session":"emb-ended","fingerprint":"2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a","shared":false}}
{"kind":"lease.child_started","activation":"act-emb-ended","session":"emb-ended","server":"tools","data":{"pid":1007,"guardian_pid":1006,"cleanup":"verified"}}
{"kind":"lease.terminated","activation":"act-emb-ended","session":"emb-ended","server":"tools","data":{"reason":"session_ended"}}
{"kind":"session.ended","session":"emb-ended","data":{"leases_terminated":1,"shared_spared":0}}
{"kind":"session.opened","session":"emb-open","data":{"transport":"embedded"}}
{"kind":"lease.acquiring","activation":"act-emb-open","session":"emb-open","server":"tools","data":{"key_session":"emb-open","fingerprint":"2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a","shared":false}}
{"kind":"lease.child_started","activation":"act-emb-open","session":"emb-open","server":"tools","data":{"pid":1009,"guardian_pid":1008,"cleanup":"verified"}}
`

// Restart recovery records guardian.lost{helper_lost} for every activation
// of a previous serve's mcp_http sessions whose guardian has no final
// evidence, whatever the state of its session and lease (a kill during
// the session's end included), ends the live leases of open mcp_http
// sessions and the live shared leases (host_lost), and leaves other
// hosts' sessions alone. A second start finds nothing left.
func TestGatewayRecoverPrevious(t *testing.T) {
	ctx := context.Background()
	p, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: t.TempDir()}, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	lines := strings.Split(strings.TrimSpace(previousServe), "\n")
	for _, line := range lines {
		d, err := events.ParseInput([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Ledger().Append(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := recoverPrevious(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := (recoveryReport{sessions: 1, leases: 2, lost: 3}); rep != want {
		t.Fatalf("recovery %+v, want %+v", rep, want)
	}
	got := map[string]bool{}
	n := 0
	for x, err := range p.Ledger().Events(ctx, ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n > len(lines) {
			got[string(x.Kind)+" "+x.Activation+x.Session] = true
		}
	}
	for _, want := range []string{"guardian.lost act-endingmcp-ending", "lease.terminated act-openmcp-open", "guardian.lost act-openmcp-open",
		"session.ended mcp-open", "lease.terminated act-shared_shared", "guardian.lost act-shared_shared"} {
		if !got[want] {
			t.Errorf("not recorded: %s (recorded %v)", want, got)
		}
	}
	if len(got) != 6 {
		t.Errorf("recorded %v, want 6 events", got)
	}
	if rep, err := recoverPrevious(ctx, p); err != nil || rep.any() {
		t.Fatalf("second recovery: %+v %v", rep, err)
	}
}

// The MCP endpoint's HTTP server bounds a client's header read and idle
// keep-alive connection.
func TestGatewayHTTPServerTimeouts(t *testing.T) {
	s := mcpServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	if s.ReadHeaderTimeout != mcpReadHeaderTimeout || s.IdleTimeout != mcpIdleTimeout || s.ReadHeaderTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Fatalf("timeouts: header %v, idle %v", s.ReadHeaderTimeout, s.IdleTimeout)
	}
}
