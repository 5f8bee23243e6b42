package live_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/live"
)

// previousRun is what a gateway host killed at these moments left in its
// ledger: mcp-ending was killed during its session's end (session.ended
// and lease.terminated recorded, the guardian's receipt not yet), mcp-open
// while its session was open, act-shared's shared lease was ready; the
// embedded sessions are another transport's.
const previousRun = `
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

// openPrevious opens a projection over a fresh ledger holding previousRun
// and returns it with the number of events appended.
func openPrevious(t *testing.T) (*live.Projection, int) {
	t.Helper()
	ctx := context.Background()
	p, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: t.TempDir()}, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	lines := strings.Split(strings.TrimSpace(previousRun), "\n")
	for _, line := range lines {
		d, err := events.ParseInput([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Ledger().Append(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	return p, len(lines)
}

// recordedAfter lists the events of p's ledger after seq after as
// "<kind> <activation><session> <reason>", in seq order.
func recordedAfter(t *testing.T, p *live.Projection, after int) []string {
	t.Helper()
	var got []string
	for x, err := range p.Ledger().Events(context.Background(), ledger.Query{From: ledger.Seq(after + 1)}) {
		if err != nil {
			t.Fatal(err)
		}
		pl, err := x.Payload()
		if err != nil {
			t.Fatal(err)
		}
		reason := ""
		switch pl := pl.(type) {
		case *events.LeaseTerminated:
			reason = string(pl.Reason)
		case *events.GuardianLost:
			reason = string(pl.Reason)
		}
		got = append(got, strings.TrimSpace(string(x.Kind)+" "+x.Activation+x.Session+" "+reason))
	}
	return got
}

// With a gateway host's ownership (serve's), Recover records
// guardian.lost{helper_lost} for every activation of the previous run's
// mcp_http sessions whose guardian has no final evidence, whatever the
// state of its session and lease (a kill during the session's end
// included), ends the live leases of open mcp_http sessions and the live
// shared leases (host_lost), each session's events before its
// session.ended, and leaves the other transports' sessions alone. A
// second Recover finds nothing left.
func TestRecoverGatewayHost(t *testing.T) {
	ctx := context.Background()
	p, n := openPrevious(t)
	rep, err := live.Recover(ctx, p, live.GatewayOwnership())
	if err != nil {
		t.Fatal(err)
	}
	if want := (live.RecoveryReport{Sessions: 1, Leases: 2, Lost: 3}); rep != want {
		t.Fatalf("recovery %+v, want %+v", rep, want)
	}
	want := []string{ // sessions in order; a session's end last
		"lease.terminated act-shared_shared host_lost", "guardian.lost act-shared_shared helper_lost",
		"guardian.lost act-endingmcp-ending helper_lost",
		"lease.terminated act-openmcp-open host_lost", "guardian.lost act-openmcp-open helper_lost", "session.ended mcp-open",
	}
	if got := recordedAfter(t, p, n); !slices.Equal(got, want) {
		t.Fatalf("recorded\n%q\nwant\n%q", got, want)
	}
	if rep, err := live.Recover(ctx, p, live.GatewayOwnership()); err != nil || rep.Any() {
		t.Fatalf("second recovery: %+v %v", rep, err)
	}
}

// The ownership is the caller's contract: a host that owns only embedded
// sessions and no shared lease ends exactly those (the open one with its
// lease, the ended one's pending guardian) and leaves the mcp_http
// sessions and the shared lease alone; a host that owns nothing records
// nothing.
func TestRecoverOwnership(t *testing.T) {
	ctx := context.Background()
	p, n := openPrevious(t)
	if rep, err := live.Recover(ctx, p, live.Ownership{}); err != nil || rep.Any() {
		t.Fatalf("owning nothing: %+v %v", rep, err)
	}
	rep, err := live.Recover(ctx, p, live.Ownership{Transports: []events.SessionTransport{events.SessionEmbedded}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (live.RecoveryReport{Sessions: 1, Leases: 1, Lost: 2}); rep != want {
		t.Fatalf("recovery %+v, want %+v", rep, want)
	}
	want := []string{
		"guardian.lost act-emb-endedemb-ended helper_lost",
		"lease.terminated act-emb-openemb-open host_lost", "guardian.lost act-emb-openemb-open helper_lost", "session.ended emb-open",
	}
	if got := recordedAfter(t, p, n); !slices.Equal(got, want) {
		t.Fatalf("recorded\n%q\nwant\n%q", got, want)
	}
}
