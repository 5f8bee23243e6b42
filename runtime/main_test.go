//go:build linux

package runtime

import (
	"context"
	"encoding/json"
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

// Binaries built once by TestMain (testproc.Main): the guardian helper (as
// shipped) and our go-sdk test server. Their Out fields hold the absolute
// paths once the tests run.
var (
	helperBin     = &testproc.Binary{Out: guardian.HelperName, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger-guardian"}
	testserverBin = &testproc.Binary{Out: "testserver", Pkg: "github.com/leaseledger/leaseledger/runtime/internal/testserver"}
)

// everythingPath is where `npm ci` installs @modelcontextprotocol/server-everything.
var everythingPath string

func TestMain(m *testing.M) {
	if wd, err := os.Getwd(); err == nil {
		everythingPath = filepath.Join(filepath.Dir(wd), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	}
	testproc.Main(m, helperBin, testserverBin)
}

// BuiltBinaries returns the paths of the guardian helper and the go-sdk
// test server TestMain built, for the examples (package runtime_test).
func BuiltBinaries() (helper, testserver string) { return helperBin.Out, testserverBin.Out }

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
	return ServerConfig{Command: testserverBin.Out, Env: env}
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
		Config: e.cfg, Ledger: l, HelperPath: helperBin.Out, Now: e.clock.Now,
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
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
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
	// Calls' outcomes are queued before Call returns, not awaited: wait
	// until the ones queued so far are durable (readable).
	e.m.awaitFacts(nil)
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

// checkCleanupsConfirmed audits the test's ledger (auditEnvelopes).
func (e *env) checkCleanupsConfirmed() {
	e.t.Helper()
	var envs []events.Envelope
	for env, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			e.t.Fatal(err)
		}
		envs = append(envs, env)
	}
	auditEnvelopes(e.t, envs)
}

// auditEnvelopes is the audit run after every test: every activation that
// started a guardian has a guardian.receipt and no guardian.lost, the
// projector (replaying the events alone) says confirmed for each,
// unverified for every direct child's ("cleanup": "direct") and
// never_started for every other, and its lease table has no live lease and
// no gate violation.
func auditEnvelopes(t *testing.T, envs []events.Envelope) {
	t.Helper()
	started := map[string]bool{}
	receipt := map[string]bool{}
	direct := map[string]bool{} // "cleanup": "direct": lease.child_started best_effort
	st := projector.New()
	for i := range envs {
		x := &envs[i]
		switch x.Kind {
		case "guardian.started":
			started[x.Activation] = true
		case "guardian.receipt":
			receipt[x.Activation] = true
		case "guardian.lost":
			t.Errorf("activation %s: guardian.lost at seq %d", x.Activation, x.Seq)
		case "lease.child_started":
			if p, err := x.Payload(); err == nil && p.(*events.LeaseChildStarted).Cleanup == events.CleanupBestEffort {
				direct[x.Activation] = true
			}
		}
		if err := st.Apply(x); err != nil {
			t.Fatal(err)
		}
	}
	checkRequestsSettled(t, envs)
	for a := range started {
		if !receipt[a] {
			t.Errorf("activation %s: no guardian.receipt", a)
		}
		if v, reasons, _ := st.Verdict(a); v != projector.ResultConfirmed {
			t.Errorf("activation %s: audit verdict %s: %v", a, v, reasons)
		}
	}
	// A direct child's activation is never confirmed: closed as the host
	// observed (it saw the child exit), it is unverified.
	for a := range direct {
		if v, reasons, _ := st.Verdict(a); v != projector.ResultUnverified {
			t.Errorf("direct activation %s: audit verdict %s: %v", a, v, reasons)
		}
	}
	// Every other activation (a cap refusal, a spawn failure) started
	// nothing: the audit must say so, not count it as unconfirmed.
	for _, a := range st.ActivationIDs() {
		if v, reasons, _ := st.Verdict(a); !started[a] && !direct[a] && v != projector.ResultNeverStarted && v != projector.ResultConfirmed {
			t.Errorf("activation %s (no guardian started): audit verdict %s: %v", a, v, reasons)
		}
	}
	for _, l := range st.Leases() {
		if l.Live() {
			t.Errorf("projector lease table: %s still %s after Close", l.Key(), l.State)
		}
		if l.GateViolations != 0 {
			t.Errorf("projector lease %s: %d gate violations", l.Key(), l.GateViolations)
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

// mapped returns how many leases the manager's map holds (ready or
// starting).
func (m *Manager) mapped() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.leases)
}

// checkRequestsSettled holds every registered resource request to exactly
// one settlement: request.completed, or request.cancelled that settled it
// locally (a cancel after completion records local_settled false). No
// request event may name an unregistered handle.
func checkRequestsSettled(t *testing.T, envs []events.Envelope) {
	t.Helper()
	settled := map[string]int{}
	for i := range envs {
		p, err := envs[i].Payload()
		if err != nil {
			t.Fatal(err)
		}
		h := ""
		switch p := p.(type) {
		case *events.RequestRegistered:
			if _, dup := settled[p.Handle]; dup {
				t.Errorf("handle %s registered twice", p.Handle)
			}
			settled[p.Handle] = 0
			continue
		case *events.RequestCompleted:
			h = p.Handle
			settled[h]++
		case *events.RequestCancelled:
			h = p.Handle
			if p.LocalSettled {
				settled[h]++
			}
		case *events.RequestDispatched:
			h = p.Handle
		case *events.RequestContinued:
			h = p.Handle
		case *events.RequestAwaitTimedOut:
			h = p.Handle
		default:
			continue
		}
		if _, ok := settled[h]; !ok {
			t.Errorf("seq %d: %s for unregistered handle %s", envs[i].Seq, envs[i].Kind, h)
		}
	}
	for h, n := range settled {
		if n != 1 {
			t.Errorf("handle %s settled %d times", h, n)
		}
	}
}
