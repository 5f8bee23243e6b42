package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/live"
)

// cliControlRuntime records what the control API asked of the runtime (the
// real runtime behind serve is exercised by serve's own tests).
type cliControlRuntime struct {
	mu    sync.Mutex
	calls []string
}

func (r *cliControlRuntime) record(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *cliControlRuntime) Revoke(_ context.Context, q control.RevokeRequest) (int, error) {
	if q.Server == "nothing" {
		return 0, fmt.Errorf("runtime: %w", control.ErrNotFound)
	}
	r.record(fmt.Sprintf("revoke %s %t %s %s %t", q.Session, q.Shared, q.Server, q.Reason, q.Deny))
	if q.Server == "idle" {
		return 0, nil
	}
	return 1, nil
}

func (r *cliControlRuntime) Allow(_ context.Context, q control.AllowRequest) error {
	r.record(fmt.Sprintf("allow %s %t %s", q.Session, q.Shared, q.Server))
	return nil
}

func (r *cliControlRuntime) EndSession(_ context.Context, s string) error {
	if s == "gone" {
		return fmt.Errorf("gateway: %w", control.ErrNotFound)
	}
	r.record("end " + s)
	return nil
}

func (r *cliControlRuntime) ReapIdle(_ context.Context, d time.Duration) (int, error) {
	r.record(fmt.Sprint("reap ", d))
	return 1, nil
}

func (r *cliControlRuntime) Reload(context.Context) (control.ReloadReply, error) {
	r.record("reload")
	return control.ReloadReply{Servers: 2, Added: []string{"b", "c"}, Removed: []string{"a"}, LeasesEnded: 1}, nil
}

// TestControlCommands drives `leaseledger control` against a real bus
// serving the control API over a real projection.
func TestControlCommands(t *testing.T) {
	ctx := context.Background()
	p, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: t.TempDir()}, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	in, err := os.ReadFile("testdata/lease.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(in)), "\n") {
		d, err := events.ParseInput([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Ledger().Append(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	rt := &cliControlRuntime{}
	b, err := bus.Start(p.Ledger(), bus.Options{Port: bus.RandomPort, ReadOnlyUser: "dash", ReadOnlyPassword: "pw",
		ControlUser: "ops", ControlPassword: "pw3", Services: append(control.ProjectionServices(p), control.RuntimeServices(rt, p)...)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctl := func(user, pass string, args ...string) result {
		return runCLI(t, ctx, "", append([]string{"control", "--nats", b.ClientURL(), "--user", user, "--password", pass}, args...)...)
	}
	for _, c := range []struct {
		args []string
		out  string
		call string
	}{
		{[]string{"revoke", "--session", "s-1", "--server", "everything"}, "lease s-1/everything revoked", "revoke s-1 false everything operator false"},
		{[]string{"revoke", "--shared", "--server", "other", "--deny", "--reason", "incident_7"}, "shared lease of other revoked and denied", "revoke  true other incident_7 true"},
		{[]string{"revoke", "--session", "s-1", "--server", "idle", "--deny"}, "lease s-1/idle denied (no lease to revoke)", "revoke s-1 false idle operator true"},
		{[]string{"allow", "--session", "s-1", "--server", "idle"}, "server idle allowed to session s-1", "allow s-1 false idle"},
		{[]string{"allow", "--shared", "--server", "other"}, "shared lease of other allowed", "allow  true other"},
		{[]string{"end-session", "s-1"}, "session s-1 ended", "end s-1"},
		{[]string{"reap", "--idle-max", "90s"}, "1 lease(s) reaped", "reap 1m30s"},
		{[]string{"reload"}, "config reloaded: 2 server(s), added [b c], removed [a] (1 lease(s) ended)", "reload"},
		{[]string{"leases"}, "lease table at seq 7: 1 lease(s)", ""},
	} {
		r := ctl("ops", "pw3", c.args...)
		if r.code != 0 || !strings.Contains(r.stdout, c.out) {
			t.Fatalf("control %v: %+v", c.args, r)
		}
		rt.mu.Lock()
		last := ""
		if len(rt.calls) > 0 {
			last = rt.calls[len(rt.calls)-1]
		}
		rt.mu.Unlock()
		if c.call != "" && last != c.call {
			t.Fatalf("control %v: runtime saw %q, want %q", c.args, last, c.call)
		}
	}
	r := ctl("ops", "pw3", "leases", "--json")
	var out struct {
		Seq    uint64 `json:"seq"`
		Leases []struct {
			Server string `json:"server"`
			State  string `json:"state"`
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Seq != 7 || len(out.Leases) != 1 || out.Leases[0].Server != "everything" {
		t.Fatalf("leases --json: %v %+v", err, r)
	}
	// Refusals: an invalid request, an unknown session, and any user but
	// the control user, each with exit status 1 and nothing done.
	n := len(rt.calls)
	for _, c := range []struct {
		user, pass string
		args       []string
		err        string
	}{
		{"ops", "pw3", []string{"revoke", "--server", "everything"}, "invalid request: give exactly one of session and shared"},
		{"ops", "pw3", []string{"end-session", "gone"}, "not found: no such session"},
		{"ops", "pw3", []string{"revoke", "--session", "s-1", "--server", "nothing"}, "not found: no such lease"},
		{"ops", "pw3", []string{"allow", "--server", "everything"}, "invalid request: give exactly one of session and shared"},
		{"dash", "pw", []string{"revoke", "--session", "s-1", "--server", "everything"}, "not permitted for this bus user (connect as serve's --control-user)"},
		{"", "", []string{"reap"}, "not permitted"},
		{"dash", "pw", []string{"reload"}, "not permitted for this bus user (connect as serve's --control-user)"},
	} {
		r := ctl(c.user, c.pass, c.args...)
		if r.code != 1 || !strings.Contains(r.stderr, c.err) {
			t.Fatalf("control %v as %q: %+v, want %q", c.args, c.user, r, c.err)
		}
	}
	if len(rt.calls) != n {
		t.Fatalf("refused commands reached the runtime: %v", rt.calls[n:])
	}
}
