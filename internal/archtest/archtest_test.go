// Package archtest checks the repository's layering against the real
// import graph: the arrows docs/architecture.md draws, the layer rules of
// its package table, and the dependency bounds that keep the runtime and
// the guardian helper small. It has only tests.
package archtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/leaseledger/leaseledger"

// goList runs `go list` from the module root with the given arguments.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.Bytes())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// graph is package → its direct, non-test imports inside the module, with
// the module prefix dropped ("bus", "cmd/leaseledger").
type graph map[string][]string

func realGraph(t *testing.T) graph {
	g := graph{}
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...") {
		fields := strings.Fields(line)
		pkg := short(fields[0])
		if pkg == "internal/archtest" {
			continue
		}
		var deps []string
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module+"/") {
				deps = append(deps, short(imp))
			}
		}
		sort.Strings(deps)
		g[pkg] = deps
	}
	return g
}

func short(p string) string { return strings.TrimPrefix(p, module+"/") }

// documentedGraph reads the block between the imports markers of
// docs/architecture.md: one line per package, "pkg → a, b" or "pkg → —".
func documentedGraph(t *testing.T) graph {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- imports:begin -->", "<!-- imports:end -->"
	i, j := bytes.Index(b, []byte(begin)), bytes.Index(b, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("docs/architecture.md has no %s … %s block", begin, end)
	}
	g := graph{}
	sc := bufio.NewScanner(bytes.NewReader(b[i+len(begin) : j]))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "```") {
			continue
		}
		pkg, deps, ok := strings.Cut(line, "→")
		if !ok {
			t.Fatalf("docs/architecture.md: import line without →: %q", line)
		}
		pkg = strings.TrimSpace(pkg)
		var ds []string
		if d := strings.TrimSpace(deps); d != "—" {
			for _, x := range strings.Split(d, ",") {
				ds = append(ds, strings.TrimSpace(x))
			}
		}
		sort.Strings(ds)
		if _, dup := g[pkg]; dup {
			t.Fatalf("docs/architecture.md lists %s twice", pkg)
		}
		g[pkg] = ds
	}
	return g
}

// The documented arrows are exactly the real ones: a missing arrow or an
// undocumented one fails.
func TestArchitectureDocMatchesImports(t *testing.T) {
	real, doc := realGraph(t), documentedGraph(t)
	for pkg, deps := range real {
		d, ok := doc[pkg]
		if !ok {
			t.Errorf("package %s is not in docs/architecture.md (imports: %v)", pkg, deps)
			continue
		}
		for _, x := range deps {
			if !slices.Contains(d, x) {
				t.Errorf("undocumented arrow %s → %s", pkg, x)
			}
		}
		for _, x := range d {
			if !slices.Contains(deps, x) {
				t.Errorf("documented arrow %s → %s does not exist", pkg, x)
			}
		}
	}
	for pkg := range doc {
		if _, ok := real[pkg]; !ok {
			t.Errorf("docs/architecture.md documents %s, which does not exist", pkg)
		}
	}
}

// Arrows point down the layer table: events, schemas and guardian import no
// other layer; ledger and projector only events (and schemas); bus only
// events and ledger; runtime only events and guardian; policy only events;
// gateway only events, runtime and policy; control only events, ledger, bus and projector (the runtime
// through an interface); cmd anything. Packages under internal/ are leaves
// (they import nothing of ours outside internal/) that any layer may use:
// the benchmarks under ledger/ read CPU time through internal/cputime.
func TestLayers(t *testing.T) {
	allowed := map[string][]string{
		"events":    {},
		"schemas":   {},
		"guardian":  {},
		"ledger":    {"events", "schemas"},
		"bus":       {"events", "ledger"}, // the embedded NATS server over the log, and its client
		"projector": {"events", "ledger"}, // only projector/live may tie the reducer to the log
		"runtime":   {"events", "guardian"},
		"policy":    {"events"},                               // the access policy (Cedar): schema, sets, decisions
		"gateway":   {"events", "runtime", "policy"},          // the MCP endpoint over the runtime
		"control":   {"events", "ledger", "bus", "projector"}, // the bus APIs over the projection; the runtime through an interface
		"collector": {"events", "ledger", "bus"},              // the fleet's mirror: mirror ledgers fed over the bus protocol
		"dashboard": {},                                       // the browser page: it speaks to the bus from the browser, links nothing of ours
		"internal":  {},
	}
	for pkg, deps := range realGraph(t) {
		top, _, _ := strings.Cut(pkg, "/")
		if top == "cmd" {
			continue
		}
		ok, known := allowed[top]
		if !known {
			t.Errorf("package %s is in no layer", pkg)
			continue
		}
		for _, d := range deps {
			dtop, _, _ := strings.Cut(d, "/")
			if dtop == top || slices.Contains(ok, dtop) || dtop == "internal" && top != "internal" {
				continue
			}
			t.Errorf("%s imports %s: arrows point down the layer table only", pkg, d)
		}
		if top == "projector" && pkg != "projector/live" {
			for _, d := range deps {
				if strings.HasPrefix(d, "ledger") {
					t.Errorf("%s imports %s: only projector/live ties the reducer to the log", pkg, d)
				}
			}
		}
	}
}

// The runtime links neither the storage engine, nor the bus, nor metrics:
// a host that embeds it appends through an interface.
func TestRuntimeDependencies(t *testing.T) {
	for _, dep := range goList(t, "-deps", "./runtime") {
		for _, banned := range []string{"nats-server", "cockroachdb/pebble", "prometheus", module + "/ledger"} {
			if strings.Contains(dep, banned) {
				t.Errorf("runtime depends on %s", dep)
			}
		}
	}
}

// The bus client links neither the NATS server, nor the storage engine, nor
// metrics, nor the log: a host that appends to a running serve over NATS
// needs only the client side of the protocol.
func TestBusClientDependencies(t *testing.T) {
	for _, dep := range goList(t, "-deps", "./bus/busclient") {
		for _, banned := range []string{"nats-server", "cockroachdb/pebble", "prometheus"} {
			if strings.Contains(dep, banned) {
				t.Errorf("bus/busclient depends on %s", dep)
			}
		}
		if dep == module+"/ledger" || strings.HasPrefix(dep, module+"/ledger/") || dep == module+"/bus" {
			t.Errorf("bus/busclient depends on %s", dep)
		}
	}
}

// The guardian helper binary links the wire and helper packages, never the
// host side.
func TestGuardianHelperDependencies(t *testing.T) {
	deps := goList(t, "-deps", "./cmd/leaseledger-guardian")
	if slices.Contains(deps, module+"/guardian") {
		t.Error("cmd/leaseledger-guardian links the host package guardian")
	}
	for _, d := range deps {
		if strings.HasPrefix(d, module+"/") && !strings.HasPrefix(d, module+"/guardian/") && d != module+"/cmd/leaseledger-guardian" {
			t.Errorf("cmd/leaseledger-guardian links %s", d)
		}
	}
}

// The log alone links neither NATS nor the schema engine, and exports no
// metrics itself (Pebble links the Prometheus client for its own
// histograms, so only a direct import is refused).
func TestLedgerDependencies(t *testing.T) {
	for _, dep := range goList(t, "-deps", "./ledger") {
		for _, banned := range []string{"nats-io", "jsonschema"} {
			if strings.Contains(dep, banned) {
				t.Errorf("ledger depends on %s", dep)
			}
		}
	}
	for _, imp := range strings.Fields(goList(t, "-f", `{{join .Imports " "}}`, "./ledger")[0]) {
		if strings.Contains(imp, "prometheus") {
			t.Errorf("ledger imports %s", imp)
		}
	}
}

// No non-test Go file is over MaxFileLines lines: files that size hold
// more than one concern.
func TestFileSize(t *testing.T) {
	const MaxFileLines = 600
	// Files of every platform: IgnoredGoFiles holds those another GOOS
	// would build (helper_other.go), and test files excluded by tags.
	for _, line := range goList(t, "-f", `{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}} {{end}}{{range .IgnoredGoFiles}}{{$d}}/{{.}} {{end}}`, "./...") {
		for _, f := range strings.Fields(line) {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(b, []byte("\n")); n > MaxFileLines {
				t.Errorf("%s has %d lines, limit %d", f, n, MaxFileLines)
			}
		}
	}
}

// The reducer meets stored log bytes in one package: projector defines
// State.ApplyRaw and only projector/live calls it (replay, snapshots, the
// streams that fold a whole log), so that every reader of the log sees the
// reducer the same way. cmd builds no reducer state of its own
// (projector.New): it wires a live.Stream or live.Projection and prints.
func TestApplyRawOnlyInLive(t *testing.T) {
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{$d := .Dir}}{{range .GoFiles}} {{$d}}/{{.}}{{end}}`, "./...") {
		fields := strings.Fields(line)
		pkg := short(fields[0])
		if pkg == "projector" || pkg == "projector/live" {
			continue
		}
		top, _, _ := strings.Cut(pkg, "/")
		for _, f := range fields[1:] {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte("ApplyRaw(")) {
				t.Errorf("%s calls ApplyRaw: only projector/live folds log bytes", f)
			}
			if top == "cmd" && bytes.Contains(b, []byte("projector.New(")) {
				t.Errorf("%s builds a reducer state (projector.New): cmd wires projector/live and prints", f)
			}
		}
	}
}
