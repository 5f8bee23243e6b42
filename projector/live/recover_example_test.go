package live_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/live"
)

// A host that runs a gateway on a ledger of its own (as serve does) calls
// Recover once at start, after opening its projection and before its
// runtime appends anything: what its killed predecessor left open — here
// one MCP session with a running stdio server — is recorded as ended.
func ExampleRecover() {
	dir, err := os.MkdirTemp("", "recover-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	p, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: dir}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	// The previous run's last events: a session, its lease and guardian.
	for _, line := range []string{
		`{"kind":"session.opened","session":"mcp-1","data":{"transport":"mcp_http"}}`,
		`{"kind":"lease.acquiring","activation":"act-1","session":"mcp-1","server":"tools","data":{"key_session":"mcp-1","fingerprint":"2ef0feed634eb44e47f1d1831fe58db3f793487e90858894f6ff3fbc83321f4a","shared":false}}`,
		`{"kind":"lease.child_started","activation":"act-1","session":"mcp-1","server":"tools","data":{"pid":1001,"guardian_pid":1000,"cleanup":"verified"}}`,
	} {
		d, err := events.ParseInput([]byte(line))
		if err == nil {
			_, err = p.Ledger().Append(ctx, d)
		}
		if err != nil {
			fmt.Println(err)
			return
		}
	}

	rep, err := live.Recover(ctx, p, live.GatewayOwnership())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("sessions ended %d, leases %s %d, guardians lost %d\n", rep.Sessions, events.TerminatedHostLost, rep.Leases, rep.Lost)
	verdict := ""
	_ = p.View(func(s *projector.State) { verdict, _, _ = s.Verdict("act-1") })
	fmt.Println("act-1:", verdict)
	// Output:
	// sessions ended 1, leases host_lost 1, guardians lost 1
	// act-1: unconfirmed
}
