package main

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/leaseledger/leaseledger/projector/live"
)

// Serve's recovery line names every count live.Recover reports, and the
// reasons it recorded them with (TestGatewayServeKilled matches it).
func TestRecoveryText(t *testing.T) {
	got := recoveryText(live.RecoveryReport{Sessions: 2, Leases: 3, Lost: 4})
	want := "2 MCP session(s) and 3 lease(s) a previous serve left open recorded as ended (host_lost; 4 guardian(s) helper_lost, unconfirmed)"
	if got != want {
		t.Fatalf("recovery line:\n%s\nwant\n%s", got, want)
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
