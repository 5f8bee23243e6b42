package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// The official MCP conformance suite (npm @modelcontextprotocol/conformance,
// pinned in package.json with the Node 22 it needs; .ci/run installs both
// and sets LEASELEDGER_REQUIRE_CONFORMANCE, so CI fails rather than skips)
// and the server it is run against: go-sdk's own conformance server.
const (
	conformanceNode   = "node_modules/node/bin/node"
	conformanceSuite  = "node_modules/@modelcontextprotocol/conformance/dist/index.js"
	conformanceServer = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"
	// conformanceRunWait bounds one run of the whole suite (about 3 s here).
	conformanceRunWait = 3 * time.Minute
)

// TestConformanceThroughServe is the acceptance check of the transparent
// gateway: the official conformance suite, run once directly against
// go-sdk's conformance server, then through `serve` with that server as
// an HTTP upstream and as a stdio upstream (its entry's "prefix": "", so
// the suite finds the names it calls). Every scenario that passes directly
// must pass through serve both ways, and `audit --all` on serve's ledger
// (both runs write one) must exit 0. The suite runs in its server mode
// only, one invocation per side (not one per scenario), on loopback ports
// the kernel picks (scripts/conformance is the same check for humans,
// with a table).
func TestConformanceThroughServe(t *testing.T) {
	node, suite := filepath.Join(repoRoot, conformanceNode), filepath.Join(repoRoot, conformanceSuite)
	for _, p := range []string{node, suite} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("LEASELEDGER_REQUIRE_CONFORMANCE") != "" { // .ci/run sets it: CI never skips
				t.Fatalf("%s missing (npm ci installs the pinned suite and Node 22): %v", p, err)
			}
			t.Skipf("%s missing (npm ci installs the pinned suite and Node 22): %v", p, err)
		}
	}
	node, _ = filepath.Abs(node)
	suite, _ = filepath.Abs(suite)
	bin := cliBinary(t)
	srvBin := filepath.Join(t.TempDir(), "everything-server")
	if err := testproc.Build(testproc.Binary{Out: srvBin, Pkg: conformanceServer}); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	srv := exec.Command(srvBin, "-http", "127.0.0.1:"+strconv.Itoa(port), "-stateless=false")
	srvOut := &lockedBuffer{}
	srv.Stdout, srv.Stderr = srvOut, srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	})
	upstream := "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"
	testproc.Eventually(t, "the conformance server listening", func() bool { return strings.Contains(srvOut.String(), "listening at") })
	if strings.Contains(srvOut.String(), "address already in use") {
		t.Fatalf("the conformance server did not start:\n%s", srvOut.String())
	}

	results := t.TempDir()
	run := func(side, url string) map[string]conformanceResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), conformanceRunWait)
		defer cancel()
		dir := filepath.Join(results, side)
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, node, suite, "server", "--url", url, "-o", dir)
		out, err := cmd.CombinedOutput() // exits non-zero when a scenario fails: the results say which
		if ctx.Err() != nil {
			t.Fatalf("%s: the suite did not finish in %v:\n%s", side, conformanceRunWait, out)
		}
		res := readConformance(t, dir)
		t.Logf("%s: %d scenarios in %v (suite exit: %v)", side, len(res), time.Since(t0).Round(time.Millisecond), err)
		if len(res) == 0 {
			t.Fatalf("%s: no results:\n%s", side, out)
		}
		return res
	}
	direct := run("direct", upstream)

	dataDir := t.TempDir()
	through := func(side string, entry map[string]any) map[string]conformanceResult {
		t.Helper()
		entry["prefix"] = ""
		b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"conformance": entry}})
		config := filepath.Join(t.TempDir(), "mcp.json")
		if err := os.WriteFile(config, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s := startServe(t, bin, dataDir, config)
		res := run(side, s.mcpURL)
		if code := s.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("%s: serve exited %d:\n%s", side, code, s.out.String())
		}
		return res
	}
	overHTTP := through("http", map[string]any{"type": "http", "url": upstream})
	overStdio := through("stdio", map[string]any{"command": srvBin})

	names := slices.Sorted(func(yield func(string) bool) {
		for n := range direct {
			if !yield(n) {
				return
			}
		}
	})
	var table strings.Builder
	fmt.Fprintf(&table, "%-32s %-12s %-12s %-12s\n", "scenario", "direct", "http", "stdio")
	passed := map[string]int{}
	for _, n := range names {
		row := []conformanceResult{direct[n], overHTTP[n], overStdio[n]}
		for i, side := range []string{"direct", "http", "stdio"} {
			if row[i].pass() {
				passed[side]++
			}
		}
		fmt.Fprintf(&table, "%-32s %-12s %-12s %-12s\n", n, row[0], row[1], row[2])
	}
	fmt.Fprintf(&table, "%-32s %-12s %-12s %-12s", "passed",
		fmt.Sprintf("%d/%d", passed["direct"], len(names)), fmt.Sprintf("%d/%d", passed["http"], len(names)), fmt.Sprintf("%d/%d", passed["stdio"], len(names)))
	t.Logf("conformance:\n%s", table.String())
	if passed["direct"] == 0 {
		t.Fatal("no scenario passes directly: the harness, not the gateway, is broken")
	}
	for _, n := range names {
		if !direct[n].pass() {
			continue
		}
		for side, res := range map[string]map[string]conformanceResult{"http": overHTTP, "stdio": overStdio} {
			if r := res[n]; !r.pass() {
				t.Errorf("%s passes directly, not through serve over %s: %s", n, side, r.detail())
			}
		}
	}

	r := runCLI(t, context.Background(), "", "--data-dir", dataDir, "audit", "--all")
	if r.code != 0 {
		t.Fatalf("audit --all exited %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// conformanceResult is one scenario's checks (its checks.json).
type conformanceResult struct {
	ran    bool
	checks []conformanceCheck
}

type conformanceCheck struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// pass: the scenario ran at least one check and none failed.
func (r conformanceResult) pass() bool {
	if !r.ran || len(r.checks) == 0 {
		return false
	}
	for _, c := range r.checks {
		if c.Status == "FAILURE" {
			return false
		}
	}
	return true
}

func (r conformanceResult) String() string {
	switch {
	case !r.ran:
		return "missing"
	case r.pass():
		return "pass"
	}
	failed := 0
	for _, c := range r.checks {
		if c.Status == "FAILURE" {
			failed++
		}
	}
	return fmt.Sprintf("FAIL(%d/%d)", failed, len(r.checks))
}

// detail names the failed checks and their messages.
func (r conformanceResult) detail() string {
	if !r.ran {
		return "no result"
	}
	var out []string
	for _, c := range r.checks {
		if c.Status == "FAILURE" {
			out = append(out, c.ID+": "+c.ErrorMessage)
		}
	}
	if len(out) == 0 {
		return "no checks"
	}
	return strings.Join(out, "; ")
}

// conformanceDir is a result directory's name: server-<scenario>-<time>.
var conformanceDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$`)

// readConformance reads the results the suite wrote under dir.
func readConformance(t *testing.T, dir string) map[string]conformanceResult {
	t.Helper()
	out := map[string]conformanceResult{}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		m := conformanceDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		r := conformanceResult{ran: true}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json")); err == nil {
			_ = json.Unmarshal(b, &r.checks)
		}
		out[m[1]] = r
	}
	return out
}
