// Package gatewaybench measures what a tool call costs through the
// leaseledger gateway against the floor any gateway is held against — a
// plain MCP proxy — in one run, as issue 28 states its goals
// (`leaseledger bench gateway`).
//
// It starts everything itself: a go-sdk upstream with an echo tool over
// Streamable HTTP (in process, on loopback) and over stdio (the runtime's
// go-sdk test server binary, its echo tool); the plain proxy floor (a
// go-sdk server whose echo tool forwards each call through a go-sdk client
// session of its own — no ledger, no lease — to the HTTP upstream, to the
// stdio server as its own child, and to the stdio server under a guardian
// of its own, the relay a lease adds); and the gateway stack `serve` runs
// (a ledger with fsync opened through its live projection, the embedded
// bus, runtime.Manager with the guardian helper, gateway.Gateway on a
// loopback HTTP server). Every client is a go-sdk client over Streamable
// HTTP (direct stdio: over the server's stdio), speaking ProtocolVersion.
//
// Seven sides, each with its own sessions: direct-http, proxy-http,
// gateway-http; direct-stdio, proxy-stdio, proxy-guardian-stdio,
// gateway-stdio. Each round runs a raw fsync sample (4 KiB write +
// fdatasync on a growing file in Config.Dir, the ledger's disk), then the
// sequential phase (Config.Calls calls, each timed) on every side, then a
// throughput phase per Config.Sessions level on every side, the sides'
// order rotating from round to round so machine noise hits all alike.
//
// Run returns the figures and the ratios: gateway p50 / (proxy p50
// + fsync p50) per transport (over stdio the proxy is the one through the
// guardian: the goal adds the relay's floor) and gateway throughput /
// proxy throughput at each level.
package gatewaybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/internal/cputime"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Side names.
const (
	DirectHTTP    = "direct-http"
	ProxyHTTP     = "proxy-http"
	GatewayHTTP   = "gateway-http"
	DirectStdio   = "direct-stdio"
	ProxyStdio    = "proxy-stdio"
	ProxyGuardian = "proxy-guardian-stdio"
	GatewayStdio  = "gateway-stdio"
)

// SideNames lists the sides in the order Result.Sides has them.
var SideNames = []string{DirectHTTP, ProxyHTTP, GatewayHTTP, DirectStdio, ProxyStdio, ProxyGuardian, GatewayStdio}

// Goals of issue 28.
const (
	// LatencyGoal bounds gateway p50 / (proxy p50 + fsync p50).
	LatencyGoal = 1.10
	// ThroughputGoal is the least gateway / proxy calls per second.
	ThroughputGoal = 0.90
)

// Defaults of the command's flags: a run well under a minute.
const (
	DefaultCalls  = 300
	DefaultRounds = 3
)

// DefaultSessions are the throughput levels of the issue.
var DefaultSessions = []int{16, 64}

// minCallsPerSession is the least a session makes in one throughput
// phase, however few Calls are asked for, so that the phase is not all
// ramp-up and ramp-down.
const minCallsPerSession = 8

// phaseTimeout bounds one phase, so that a hang fails the run. Calls run
// under the phase's context, not one of their own: the go-sdk client reads
// a POST's event stream to its end after handing the response over, under
// the call's context, so cancelling each call's context as it returns
// would cut that read and drop the connection — a new TCP connection for
// a third of the calls, a cost of the harness, not of the side.
const phaseTimeout = 10 * time.Minute

// closeBudget bounds the clean-up at the end of a run.
const closeBudget = 2 * time.Minute

// Config describes one Run.
type Config struct {
	// Calls is the number of timed sequential calls per side per round,
	// and the calls of one throughput phase (spread over its sessions, at
	// least minCallsPerSession each).
	Calls int `json:"calls"`
	// Sessions are the concurrency levels of the throughput phases.
	Sessions []int `json:"sessions"`
	Rounds   int   `json:"rounds"`
	// Dir is the scratch directory: the ledger's data directory and the
	// fsync floor's file are made in it (the same disk).
	Dir string `json:"dir"`
	// HelperPath and HelperArgs start the guardian helper (as serve's
	// --guardian-helper, or the leaseledger binary with its helper
	// argument).
	HelperPath string   `json:"helper_path"`
	HelperArgs []string `json:"helper_args,omitempty"`
	// StdioServer is the go-sdk server binary with an echo tool the stdio
	// sides run (StdioServerPkg, BuildStdioServer).
	StdioServer string `json:"stdio_server"`
	// Profile, when its Dir is set, adds a profiled pass after the rounds.
	Profile ProfileConfig `json:"profile"`
	// Log receives progress lines; nil discards them.
	Log io.Writer `json:"-"`
}

// Latency is a distribution of call (or fsync) latencies.
type Latency struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
}

// latencyOf sorts ds (in place) and reads its percentiles.
func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Latency{N: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// Phase is one load on one side, summed over the rounds.
type Phase struct {
	// Sessions is the concurrency: 1 for the sequential phase.
	Sessions int           `json:"sessions"`
	Calls    int           `json:"calls"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// CPU is this process's CPU time over the phase (the in-process
	// clients, proxies, gateway stack and HTTP upstream; not the stdio
	// servers or guardian helpers, which are other processes).
	CPU time.Duration `json:"cpu_ns"`
	// Events and Commits are what the ledger appended and committed
	// (each commit one fsync) over the phase (gateway sides), CommitTime
	// the ledger's summed commit time (apply to fsync observed).
	Events     uint64        `json:"ledger_events,omitempty"`
	Commits    uint64        `json:"ledger_commits,omitempty"`
	CommitTime time.Duration `json:"ledger_commit_ns,omitempty"`
	// FrontConns are the TCP connections the side's clients opened to
	// the endpoint they call (upstream, proxy or gateway), UpstreamConns
	// those the HTTP upstream accepted (HTTP sides), over the phase:
	// with keep-alive working both stay near 0 once sessions are open.
	FrontConns    int64 `json:"front_conns"`
	UpstreamConns int64 `json:"upstream_conns"`
}

func (p *Phase) add(o Phase) {
	p.Calls += o.Calls
	p.Elapsed += o.Elapsed
	p.CPU += o.CPU
	p.Events += o.Events
	p.Commits += o.Commits
	p.CommitTime += o.CommitTime
	p.FrontConns += o.FrontConns
	p.UpstreamConns += o.UpstreamConns
}

// Rate is calls per second.
func (p Phase) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Calls) / p.Elapsed.Seconds()
}

// CPUPerCall is this process's CPU per call.
func (p Phase) CPUPerCall() time.Duration { return p.CPU / time.Duration(max(p.Calls, 1)) }

// EventsPerCall and CommitsPerCall are the ledger's events and commits
// (fsyncs) per call.
func (p Phase) EventsPerCall() float64  { return float64(p.Events) / float64(max(p.Calls, 1)) }
func (p Phase) CommitsPerCall() float64 { return float64(p.Commits) / float64(max(p.Calls, 1)) }

// Side is one side's figures.
type Side struct {
	Name string `json:"name"`
	// Sequential is the latency of the sequential phase's calls.
	Sequential Latency `json:"sequential"`
	// Phases are the sequential phase, then one per Config.Sessions level.
	Phases []Phase `json:"phases"`
	// Gateway reports a gateway side (its ledger figures are meaningful).
	Gateway bool `json:"gateway"`
}

// Throughput returns the phase of the given concurrency.
func (s Side) Throughput(sessions int) (Phase, bool) {
	for _, p := range s.Phases[1:] {
		if p.Sessions == sessions {
			return p, true
		}
	}
	return Phase{}, false
}

// Ratio is one of the ratios.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Goal is "<= x" or ">= x", empty for a ratio given as context.
	Goal string `json:"goal,omitempty"`
	Met  bool   `json:"met"`
}

// Result is a finished Run.
type Result struct {
	Config Config `json:"config"`
	// Fsync is the raw fsync floor: 4 KiB write + fdatasync on a growing
	// file in Config.Dir.
	Fsync  Latency `json:"fsync"`
	Sides  []Side  `json:"sides"`
	Ratios []Ratio `json:"ratios"`
	// Profiles lists the profiled phases (Config.Profile).
	Profiles []Profiled `json:"profiles,omitempty"`
}

// Side returns the named side.
func (r Result) Side(name string) (Side, bool) {
	for _, s := range r.Sides {
		if s.Name == name {
			return s, true
		}
	}
	return Side{}, false
}

// ratios computes the ratios from r's sides.
func (r Result) ratios() []Ratio {
	get := func(n string) Side { s, _ := r.Side(n); return s }
	ms := func(d time.Duration) float64 { return float64(d) }
	var out []Ratio
	le := func(name string, v, goal float64) {
		out = append(out, Ratio{Name: name, Value: v, Goal: fmt.Sprintf("<= %.2f", goal), Met: v <= goal})
	}
	ge := func(name string, v, goal float64) {
		out = append(out, Ratio{Name: name, Value: v, Goal: fmt.Sprintf(">= %.2f", goal), Met: v >= goal})
	}
	info := func(name string, v float64) { out = append(out, Ratio{Name: name, Value: v}) }
	div := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	f := ms(r.Fsync.P50)
	for _, t := range []struct{ label, direct, proxy, floor, gw string }{
		{"http", DirectHTTP, ProxyHTTP, ProxyHTTP, GatewayHTTP},
		{"stdio", DirectStdio, ProxyStdio, ProxyGuardian, GatewayStdio},
	} {
		gw, floor, proxy, direct := get(t.gw), get(t.floor), get(t.proxy), get(t.direct)
		what := "proxy"
		if t.floor != t.proxy {
			what = "proxy through the guardian"
		}
		le(fmt.Sprintf("%s: gateway p50 / (%s p50 + fsync p50)", t.label, what), div(ms(gw.Sequential.P50), ms(floor.Sequential.P50)+f), LatencyGoal)
		info(fmt.Sprintf("%s: gateway p50 / %s p50", t.label, what), div(ms(gw.Sequential.P50), ms(floor.Sequential.P50)))
		if t.floor != t.proxy {
			info(t.label+": proxy through the guardian p50 / proxy p50", div(ms(floor.Sequential.P50), ms(proxy.Sequential.P50)))
		}
		info(t.label+": proxy p50 / direct p50", div(ms(proxy.Sequential.P50), ms(direct.Sequential.P50)))
		for _, n := range r.Config.Sessions {
			g, _ := gw.Throughput(n)
			p, _ := proxy.Throughput(n)
			ge(fmt.Sprintf("%s: gateway / proxy calls/s at %d sessions", t.label, n), div(g.Rate(), p.Rate()), ThroughputGoal)
			if t.floor != t.proxy {
				fl, _ := floor.Throughput(n)
				info(fmt.Sprintf("%s: gateway / proxy through the guardian calls/s at %d sessions", t.label, n), div(g.Rate(), fl.Rate()))
			}
		}
	}
	return out
}

// String prints r as a table.
func (r Result) String() string {
	var b []byte
	pf := func(format string, a ...any) { b = fmt.Appendf(b, format, a...) }
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	levels := ""
	for i, n := range r.Config.Sessions {
		if i > 0 {
			levels += ","
		}
		levels += fmt.Sprint(n)
	}
	pf("bench gateway: %d sequential calls per side per round, throughput at %s sessions, %d rounds, MCP %s\n",
		r.Config.Calls, levels, r.Config.Rounds, ProtocolVersion)
	pf("fsync floor (4 KiB write + fdatasync, growing file, ledger's disk): p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  (n=%d)\n\n",
		ms(r.Fsync.P50), ms(r.Fsync.P90), ms(r.Fsync.P99), r.Fsync.N)
	pf("%-22s %9s %9s %9s %10s", "side", "p50 ms", "p90 ms", "p99 ms", "cpu µs/call")
	for _, n := range r.Config.Sessions {
		pf(" %12s", fmt.Sprintf("calls/s@%d", n))
	}
	pf("  ledger: events/call, fsyncs/call seq")
	for _, n := range r.Config.Sessions {
		pf(",@%d", n)
	}
	pf("\n")
	for _, s := range r.Sides {
		pf("%-22s %9.3f %9.3f %9.3f %10.0f", s.Name, ms(s.Sequential.P50), ms(s.Sequential.P90), ms(s.Sequential.P99), float64(s.Phases[0].CPUPerCall())/1e3)
		for _, p := range s.Phases[1:] {
			pf(" %12.0f", p.Rate())
		}
		if s.Gateway {
			pf("  %.2f", s.Phases[0].EventsPerCall())
			for i, p := range s.Phases {
				sep := ", "
				if i > 0 {
					sep = "/"
				}
				pf("%s%.2f", sep, p.CommitsPerCall())
			}
		}
		pf("\n")
	}
	pf("\nnew TCP connections per 100 calls, to the endpoint called / to the HTTP upstream: sequential")
	for _, n := range r.Config.Sessions {
		pf(", @%d", n)
	}
	pf("\n")
	for _, s := range r.Sides {
		pf("%-22s", s.Name)
		for _, p := range s.Phases {
			pf(" %6.1f / %-6.1f", 100*float64(p.FrontConns)/float64(max(p.Calls, 1)), 100*float64(p.UpstreamConns)/float64(max(p.Calls, 1)))
		}
		pf("\n")
	}
	pf("\nratios (goal):\n")
	for _, q := range r.Ratios {
		verdict := ""
		if q.Goal != "" {
			verdict = "  goal " + q.Goal
			if q.Met {
				verdict += "  met"
			} else {
				verdict += "  not met"
			}
		}
		pf("  %-72s %7.3f%s\n", q.Name, q.Value, verdict)
	}
	for _, p := range r.Profiles {
		pf("profiled %s at %d session(s): %d calls, %.0f calls/s; go tool pprof -top %s", p.Side, p.Sessions, p.Calls, p.Rate, p.CPU)
		pf("; blocking: go tool pprof -top -diff_base %s %s\n", p.BlockBase, p.Block)
	}
	return string(b[:len(b)-1])
}

// side is one side while it runs.
type side struct {
	name   string
	tool   string
	open   func(ctx context.Context) (*mcp.ClientSession, error)
	ledger *ledger.Ledger // gateway sides
	// front and upstream count the connections the side's clients opened
	// to what they call, and those opened to the HTTP upstream (nil over
	// stdio); the upstream is shared, phases never overlap.
	front, upstream *atomic.Int64
	sessions        []*mcp.ClientSession
	lat             []time.Duration
	phases          []Phase
}

// call makes one echo call on cs.
func (s *side) call(ctx context.Context, cs *mcp.ClientSession) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: s.tool, Arguments: echoArgs})
	if err != nil {
		return fmt.Errorf("gatewaybench: %s: %w", s.name, err)
	}
	if res.IsError {
		return fmt.Errorf("gatewaybench: %s: the echo call returned a tool error", s.name)
	}
	return nil
}

// snapshot is what a phase's figures are differences of.
type snapshot struct {
	cpu             time.Duration
	st              ledger.Stats
	front, upstream int64
}

func (s *side) snap() snapshot {
	cpu, _ := cputime.Process()
	out := snapshot{cpu: cpu}
	if s.ledger != nil {
		out.st = s.ledger.Stats()
	}
	if s.front != nil {
		out.front = s.front.Load()
	}
	if s.upstream != nil {
		out.upstream = s.upstream.Load()
	}
	return out
}

func (s *side) phase(sessions, calls int, elapsed time.Duration, a, b snapshot) Phase {
	return Phase{Sessions: sessions, Calls: calls, Elapsed: elapsed, CPU: b.cpu - a.cpu,
		Events: b.st.Events - a.st.Events, Commits: b.st.Commits - a.st.Commits, CommitTime: time.Duration(b.st.CommitNanos - a.st.CommitNanos),
		FrontConns: b.front - a.front, UpstreamConns: b.upstream - a.upstream}
}

// warmCalls precede each side's sequential phase in every round, untimed.
const warmCalls = 5

// sequential makes n timed calls on the side's first session.
func (s *side) sequential(ctx context.Context, n int) (Phase, []time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout)
	defer cancel()
	cs := s.sessions[0]
	for range warmCalls {
		if err := s.call(ctx, cs); err != nil {
			return Phase{}, nil, err
		}
	}
	lat := make([]time.Duration, 0, n)
	a := s.snap()
	start := time.Now()
	for range n {
		t := time.Now()
		if err := s.call(ctx, cs); err != nil {
			return Phase{}, nil, err
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	return s.phase(1, n, elapsed, a, s.snap()), lat, nil
}

// perSession is the calls each of c sessions makes in a throughput phase.
func perSession(calls, c int) int { return max((calls+c-1)/c, minCallsPerSession) }

// concurrent makes per calls on each of the side's first c sessions at
// once, released together.
func (s *side) concurrent(ctx context.Context, c, per int) (Phase, error) {
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, c)
	release := make(chan struct{})
	for i, cs := range s.sessions[:c] {
		wg.Go(func() {
			<-release
			for range per {
				if err := s.call(ctx, cs); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	a := s.snap()
	start := time.Now()
	close(release)
	wg.Wait()
	elapsed := time.Since(start)
	b := s.snap()
	if err := errors.Join(errs...); err != nil {
		return Phase{}, err
	}
	return s.phase(c, c*per, elapsed, a, b), nil
}

// openSessions opens n sessions on the side and makes two calls on each
// (a gateway session's first call acquires its lease; a proxy session's
// first call dials its upstream), a few sessions at a time.
func (s *side) openSessions(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout)
	defer cancel()
	s.sessions = make([]*mcp.ClientSession, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cs, err := s.open(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("gatewaybench: %s: opening a session: %w", s.name, err)
				return
			}
			s.sessions[i] = cs
			for range 2 {
				if err := s.call(ctx, cs); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// closeSessions closes the side's sessions, in parallel.
func (s *side) closeSessions() error {
	errs := make([]error, len(s.sessions))
	var wg sync.WaitGroup
	for i, cs := range s.sessions {
		if cs != nil {
			wg.Go(func() { errs[i] = cs.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// env is everything a run started, closed by close.
type env struct {
	upstream *loopback
	proxies  []*proxy
	stack    *stack
	clients  []*http.Client // their idle connections are closed at the end
	sides    []*side
}

func (e *env) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeBudget)
	defer cancel()
	var errs []error
	for _, s := range e.sides {
		errs = append(errs, s.closeSessions())
	}
	if e.stack != nil {
		errs = append(errs, e.stack.close(ctx))
	}
	for _, p := range e.proxies {
		errs = append(errs, p.close(ctx))
	}
	if e.upstream != nil {
		e.upstream.close()
	}
	for _, c := range e.clients {
		closeIdle(c)
	}
	return errors.Join(errs...)
}

// validate checks cfg and fills its defaults.
func (cfg *Config) validate() error {
	if len(cfg.Sessions) == 0 {
		cfg.Sessions = slices.Clone(DefaultSessions)
	}
	for _, n := range cfg.Sessions {
		if n <= 0 {
			return fmt.Errorf("gatewaybench: sessions %v: each must be positive", cfg.Sessions)
		}
	}
	switch {
	case cfg.Calls <= 0, cfg.Rounds <= 0:
		return errors.New("gatewaybench: Calls and Rounds must be positive")
	case cfg.Dir == "", cfg.HelperPath == "", cfg.StdioServer == "":
		return errors.New("gatewaybench: Dir, HelperPath and StdioServer must be set")
	}
	return cfg.Profile.validate()
}

func (cfg Config) logf(format string, a ...any) {
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "bench gateway: "+format+"\n", a...)
	}
}

// Run executes the benchmark (see the package comment).
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	res.Config = cfg
	e := &env{}
	defer func() { err = errors.Join(err, e.close()) }()
	maxSessions := slices.Max(cfg.Sessions)

	// The upstreams and the floors.
	if e.upstream, err = serveLoopback(streamableHandler(newEchoServer())); err != nil {
		return res, err
	}
	proxyClient := newHTTPClient()
	e.clients = append(e.clients, proxyClient)
	dialers := map[string]upstreamDialer{
		ProxyHTTP:     httpUpstream(e.upstream.url, proxyClient),
		ProxyStdio:    stdioUpstream(cfg.StdioServer),
		ProxyGuardian: guardianUpstream(cfg.StdioServer, cfg.HelperPath, cfg.HelperArgs),
	}
	proxies := map[string]*loopback{}
	for _, name := range []string{ProxyHTTP, ProxyStdio, ProxyGuardian} {
		p, err := startProxy(dialers[name])
		if err != nil {
			return res, err
		}
		e.proxies = append(e.proxies, p)
		proxies[name] = p.lb
	}
	// The gateway stack.
	dataDir := filepath.Join(cfg.Dir, "data")
	if e.stack, err = startStack(ctx, dataDir, e.upstream.url, cfg.StdioServer, cfg.HelperPath, cfg.HelperArgs, maxSessions); err != nil {
		return res, err
	}

	// The sides, each with its own HTTP client.
	overHTTP := func(name string, front *loopback, tool string, l *ledger.Ledger, upstream *atomic.Int64) *side {
		c := newHTTPClient()
		e.clients = append(e.clients, c)
		return &side{name: name, tool: tool, ledger: l, front: &front.accepted, upstream: upstream, open: func(ctx context.Context) (*mcp.ClientSession, error) {
			return connect(ctx, "bench-"+name, &mcp.StreamableClientTransport{Endpoint: front.url, HTTPClient: c})
		}}
	}
	up := &e.upstream.accepted
	e.sides = []*side{
		overHTTP(DirectHTTP, e.upstream, "echo", nil, up),
		overHTTP(ProxyHTTP, proxies[ProxyHTTP], "echo", nil, up),
		overHTTP(GatewayHTTP, e.stack.lbs[serverHTTP], gateway.ToolName(serverHTTP, "echo"), e.stack.ledgr, up),
		{name: DirectStdio, tool: "echo", open: func(ctx context.Context) (*mcp.ClientSession, error) {
			return connect(ctx, "bench-"+DirectStdio, &mcp.CommandTransport{Command: exec.Command(cfg.StdioServer)})
		}},
		overHTTP(ProxyStdio, proxies[ProxyStdio], "echo", nil, nil),
		overHTTP(ProxyGuardian, proxies[ProxyGuardian], "echo", nil, nil),
		overHTTP(GatewayStdio, e.stack.lbs[serverStdio], gateway.ToolName(serverStdio, "echo"), e.stack.ledgr, nil),
	}
	for _, s := range e.sides {
		t := time.Now()
		if err := s.openSessions(ctx, maxSessions); err != nil {
			return res, err
		}
		s.phases = make([]Phase, 1+len(cfg.Sessions))
		s.phases[0].Sessions = 1
		for i, n := range cfg.Sessions {
			s.phases[1+i].Sessions = n
		}
		cfg.logf("%s: %d sessions open in %v", s.name, maxSessions, time.Since(t).Round(time.Millisecond))
	}

	var fsyncs []time.Duration
	for round := range cfg.Rounds {
		t := time.Now()
		fs, err := fsyncFloor(filepath.Join(cfg.Dir, fmt.Sprintf("fsync-%d", round)), cfg.Calls)
		if err != nil {
			return res, err
		}
		fsyncs = append(fsyncs, fs...)
		n := len(e.sides)
		for k := range n {
			s := e.sides[(k+round)%n]
			p, lat, err := s.sequential(ctx, cfg.Calls)
			if err != nil {
				return res, err
			}
			s.phases[0].add(p)
			s.lat = append(s.lat, lat...)
		}
		for i, c := range cfg.Sessions {
			for k := range n {
				s := e.sides[(k+round+i+1)%n]
				p, err := s.concurrent(ctx, c, perSession(cfg.Calls, c))
				if err != nil {
					return res, err
				}
				s.phases[1+i].add(p)
			}
		}
		cfg.logf("round %d/%d in %v", round+1, cfg.Rounds, time.Since(t).Round(time.Millisecond))
	}
	res.Fsync = latencyOf(fsyncs)
	for _, s := range e.sides {
		res.Sides = append(res.Sides, Side{Name: s.name, Sequential: latencyOf(s.lat), Phases: s.phases, Gateway: s.ledger != nil})
	}
	res.Ratios = res.ratios()
	if cfg.Profile.Dir != "" {
		if res.Profiles, err = profile(ctx, cfg, e.sides); err != nil {
			return res, err
		}
	}
	return res, nil
}

// MkdirTemp makes a scratch directory for Config.Dir under parent (the
// system temp dir when empty).
func MkdirTemp(parent string) (string, error) {
	return os.MkdirTemp(parent, "leaseledger-bench-gateway-*")
}
