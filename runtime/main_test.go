//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
)

// Binaries built once by TestMain: the guardian helper (as shipped) and our
// go-sdk test server.
var bins struct{ dir, helper, testserver string }

// everythingPath is where CI installs @modelcontextprotocol/server-everything.
var everythingPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runtime-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.helper = filepath.Join(dir, guardian.HelperName)
	bins.testserver = filepath.Join(dir, "testserver")
	if err := testproc.Build(
		testproc.Binary{Out: bins.helper, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger-guardian"},
		testproc.Binary{Out: bins.testserver, Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"},
	); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	if wd, err := os.Getwd(); err == nil {
		everythingPath = filepath.Join(filepath.Dir(wd), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	}
	code := m.Run()
	if code == 0 {
		if err := testproc.Leftovers(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// everything returns the config entry for server-everything over stdio. It
// fails (never skips) when the npm package is missing: CI installs it.
func everything(t testing.TB) ServerConfig {
	t.Helper()
	if _, err := os.Stat(everythingPath); err != nil {
		t.Fatalf("@modelcontextprotocol/server-everything not installed at %s (run `npm ci` in the repo root: package.json pins it): %v", everythingPath, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not on PATH: %v", err)
	}
	return ServerConfig{Command: node, Args: []string{everythingPath, "stdio"}}
}

// testServer returns a config entry for our go-sdk test server.
func testServer(env map[string]string) ServerConfig {
	return ServerConfig{Command: bins.testserver, Env: env}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int { return testproc.ChildrenOf(pid) }

// fakeClock lets tests move time forward for idle reaping.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// env is one test's manager, ledger and config.
type env struct {
	t     *testing.T
	m     *Manager
	l     *ledger.Ledger
	cfg   *MapConfigSource
	clock *fakeClock
}

func newEnv(t *testing.T, tweak func(*Options)) *env {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, l: l, cfg: &MapConfigSource{}, clock: &fakeClock{}}
	opts := Options{
		Config: e.cfg, Ledger: l, HelperPath: bins.helper, Now: e.clock.Now,
		EOFGrace: time.Second, TermGrace: 500 * time.Millisecond, KillGrace: time.Second, PipeGrace: 200 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&opts)
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Close(ctx)
		if kids := childrenOf(os.Getpid()); len(kids) > 0 {
			t.Errorf("child processes remain after Close: %v", kids)
		}
		e.checkCleanupsConfirmed()
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// ev is a decoded event.
type ev struct {
	Seq        ledger.Seq
	Kind       events.Kind
	Activation string
	Session    string
	Payload    events.Payload
}

func (e *env) events() []ev {
	e.t.Helper()
	var out []ev
	for env, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			e.t.Fatal(err)
		}
		p, err := events.DecodePayload(env.Kind, env.Data)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ev{ledger.Seq(env.Seq), env.Kind, env.Activation, env.Session, p})
	}
	return out
}

func (e *env) kinds(act string) []string {
	var out []string
	for _, x := range e.events() {
		if act == "" || x.Activation == act {
			out = append(out, string(x.Kind))
		}
	}
	return out
}

func count(evs []ev, kind events.Kind, pred func(ev) bool) int {
	n := 0
	for _, x := range evs {
		if x.Kind == kind && (pred == nil || pred(x)) {
			n++
		}
	}
	return n
}

// checkCleanupsConfirmed is the audit: every activation that started a
// guardian has a guardian.receipt and no guardian.lost.
func (e *env) checkCleanupsConfirmed() {
	e.t.Helper()
	evs := e.events()
	started := map[string]bool{}
	receipt := map[string]bool{}
	for _, x := range evs {
		switch x.Kind {
		case "guardian.started":
			started[x.Activation] = true
		case "guardian.receipt":
			receipt[x.Activation] = true
		case "guardian.lost":
			e.t.Errorf("activation %s: guardian.lost %+v", x.Activation, x.Payload)
		}
	}
	for a := range started {
		if !receipt[a] {
			e.t.Errorf("activation %s: no guardian.receipt", a)
		}
	}
	// The audit verdict, recomputed by the projector from the log alone.
	st := projector.New()
	for env, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			e.t.Fatal(err)
		}
		if err := st.Apply(&env); err != nil {
			e.t.Fatal(err)
		}
	}
	for a := range started {
		if v, reasons, _ := st.Verdict(a); v != projector.ResultConfirmed {
			e.t.Errorf("activation %s: audit verdict %s: %v", a, v, reasons)
		}
	}
	for _, l := range st.Leases() {
		if l.Live() {
			e.t.Errorf("projector lease table: %s still %s after Close", l.Key(), l.State)
		}
		if l.GateViolations != 0 {
			e.t.Errorf("projector lease %s: %d gate violations", l.Key(), l.GateViolations)
		}
	}
}

// digestOf returns the digest of tool from a listing.
func digestOf(t testing.TB, tools []PinnedTool, name string) string {
	t.Helper()
	for _, pt := range tools {
		if pt.Name == name {
			return pt.Digest
		}
	}
	t.Fatalf("tool %q not listed", name)
	return ""
}

func mustJSON(v any) json.RawMessage { b, _ := json.Marshal(v); return b }

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// leaseOf returns the live lease of key (test-only introspection).
func (m *Manager) leaseOf(session, server string) *lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leases[leaseKey{session, server}]
}
