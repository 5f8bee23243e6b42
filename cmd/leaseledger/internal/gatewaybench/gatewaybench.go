// Package gatewaybench measures what a tool call costs through the
// leaseledger gateway against the floor any gateway is held against — a
// plain MCP proxy — in one run, with the goals stated as ratios
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
// gateway-stdio. Each round runs two raw fsync samples in Config.Dir, the
// ledger's disk (4 KiB write + fdatasync on a growing file, and the same
// over blocks written before), then the sequential phase (Config.Calls calls, each timed) on every side, then a
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

// The goals, as ratios.
const (
	// LatencyGoal bounds gateway p50 / (proxy p50 + fsync p50).
	LatencyGoal = 1.10
	// ThroughputGoal is the least gateway / proxy calls per second.
	ThroughputGoal = 0.90
)

// Defaults of the command's flags: a run of about a minute.
const (
	DefaultCalls     = 300
	DefaultRounds    = 3
	DefaultPhaseTime = time.Second
)

// DefaultSessions are the throughput levels of the issue.
var DefaultSessions = []int{16, 64}

// minCallsPerSession is the least a session makes in one throughput
// phase, however short the phase, so that it is not all ramp-up and
// ramp-down.
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
	// Calls is the number of timed sequential calls per side per round.
	Calls int `json:"calls"`
	// PhaseTime is how long each session of a throughput phase keeps
	// calling (after at least minCallsPerSession calls): every side gets
	// the same time at every level, whatever its speed, so a phase is long
	// enough to average over the machine's noise. A call started before
	// the end completes and counts, as does its time.
	PhaseTime time.Duration `json:"phase_time_ns"`
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

// perSession is the calls each of c sessions makes in a phase of calls
// calls (the profiled pass's).
func perSession(calls, c int) int { return max((calls+c-1)/c, minCallsPerSession) }

// concurrent calls on each of the side's first c sessions at once,
// released together: each makes at least per calls and goes on until d
// has passed since the release. The phase ends when the last session's
// last call returned.
func (s *side) concurrent(ctx context.Context, c, per int, d time.Duration) (Phase, error) {
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, c)
	made := make([]int, c)
	release := make(chan struct{})
	var start time.Time
	for i, cs := range s.sessions[:c] {
		wg.Go(func() {
			<-release
			for made[i] < per || time.Since(start) < d {
				if err := s.call(ctx, cs); err != nil {
					errs[i] = err
					return
				}
				made[i]++
			}
		})
	}
	a := s.snap()
	start = time.Now() // written before the release: read after it
	close(release)
	wg.Wait()
	elapsed := time.Since(start)
	b := s.snap()
	if err := errors.Join(errs...); err != nil {
		return Phase{}, err
	}
	calls := 0
	for _, n := range made {
		calls += n
	}
	return s.phase(c, calls, elapsed, a, b), nil
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
	case cfg.Calls <= 0, cfg.Rounds <= 0, cfg.PhaseTime <= 0:
		return errors.New("gatewaybench: Calls, Rounds and PhaseTime must be positive")
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

	var fsyncs, written, pebbles []time.Duration
	for round := range cfg.Rounds {
		t := time.Now()
		fs, err := fsyncFloor(filepath.Join(cfg.Dir, fmt.Sprintf("fsync-%d", round)), cfg.Calls)
		if err != nil {
			return res, err
		}
		fsyncs = append(fsyncs, fs...)
		ws, err := writtenFsyncFloor(filepath.Join(cfg.Dir, fmt.Sprintf("fsync-written-%d", round)), cfg.Calls)
		if err != nil {
			return res, err
		}
		written = append(written, ws...)
		pc, err := pebbleFloor(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("pebble-%d", round)), cfg.Calls)
		if err != nil {
			return res, err
		}
		pebbles = append(pebbles, pc...)
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
				p, err := s.concurrent(ctx, c, minCallsPerSession, cfg.PhaseTime)
				if err != nil {
					return res, err
				}
				s.phases[1+i].add(p)
			}
		}
		cfg.logf("round %d/%d in %v", round+1, cfg.Rounds, time.Since(t).Round(time.Millisecond))
	}
	res.Fsync = latencyOf(fsyncs)
	res.FsyncWritten = latencyOf(written)
	res.PebbleCommit = latencyOf(pebbles)
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
