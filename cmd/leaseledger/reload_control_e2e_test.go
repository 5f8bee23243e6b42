//go:build linux

package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// TestControlReload: `leaseledger control reload` (the control API's
// leaseledger.api.runtime.reload) puts an edited mcp.json in force as
// SIGHUP does, and its reply says what changed — the server added, the
// server removed and its lease ended; a file that fails to load is
// refused config-not-loaded (exit status 1, nothing of the file in the
// refusal, serve's log says why) and the previous configuration stays in
// force; only the control user may reload.
func TestControlReload(t *testing.T) {
	bin := cliBinary(t)
	config, write := reloadableConfig(t)
	write("one")
	srv := startServe(t, bin, t.TempDir(), config,
		"--control-user", "ops", "--control-password", "ops-pw", "--read-only-user", "dash", "--read-only-password", "dash-pw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eWait)
	defer cancel()
	ctl := func(user, pass string) result {
		return runCLI(t, ctx, "", "control", "--nats", srv.natsURL, "--user", user, "--password", pass, "reload")
	}
	cs, closeGo := connectGo(t, ctx, srv.mcpURL, nil)
	defer closeGo()
	call := toolCaller(t, ctx, cs)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("one__echo"); err != nil { // a lease of one, which the reload ends
		t.Fatal(err)
	}

	write("two")
	if r := ctl("dash", "dash-pw"); r.code != 1 || !strings.Contains(r.stderr, "not permitted for this bus user") {
		t.Fatalf("reload as the read-only user: %+v", r)
	}
	r := ctl("ops", "ops-pw")
	if want := "config reloaded: 1 server(s), added [two], removed [one] (1 lease(s) ended)\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("control reload: %+v, want stdout %q", r, want)
	}
	testproc.Eventually(t, "serve reported the reload", func() bool {
		return strings.Contains(srv.out.String(), "leaseledger: config reloaded: 1 server(s), added [two], removed [one] (1 lease(s) ended) (control API)")
	})
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("two__echo"); err != nil {
		t.Fatalf("call on the added server: %v", err)
	}
	if err := call("one__echo"); err == nil {
		t.Fatal("the removed server still answers")
	}

	// A file that does not load: refused, nothing of it in the refusal,
	// the configuration in force unchanged.
	if err := os.WriteFile(config, []byte(`{"mcpServers": {"s3cret-entry": `), 0o644); err != nil {
		t.Fatal(err)
	}
	r = ctl("ops", "ops-pw")
	if r.code != 1 || !strings.Contains(r.stderr, "configuration not loaded") ||
		!strings.Contains(r.stderr, "the previous configuration stays in force") || strings.Contains(r.stderr+r.stdout, "s3cret") {
		t.Fatalf("control reload of a broken file: %+v", r)
	}
	testproc.Eventually(t, "serve said why", func() bool {
		return strings.Contains(srv.out.String(), "leaseledger: config not reloaded (the previous one stays in force)")
	})
	if err := call("two__echo"); err != nil {
		t.Fatalf("call after a refused reload: %v", err)
	}
	// Reloading the file in force again changes nothing.
	write("two")
	if r := ctl("ops", "ops-pw"); r.code != 0 || r.stdout != "config reloaded: 1 server(s), added [], removed [] (0 lease(s) ended)\n" {
		t.Fatalf("control reload of the same file: %+v", r)
	}

	loaded := srv.busEvents("config.loaded")
	if len(loaded) != 3 || !strings.Contains(string(loaded[1].Data), `"added":1`) || !strings.Contains(string(loaded[1].Data), `"removed":1`) ||
		!strings.Contains(string(loaded[2].Data), `"added":0`) {
		t.Fatalf("config.loaded events: %+v", loaded)
	}
	removed := 0
	for _, e := range srv.busEvents("lease.terminated") {
		if strings.Contains(string(e.Data), `"reason":"removed"`) && e.Server == "one" {
			removed++
		}
	}
	if removed != 1 {
		t.Fatalf("%d lease.terminated{removed} of server one, want 1", removed)
	}
	closeGo()
	if code := srv.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, srv.out.String())
	}
}
