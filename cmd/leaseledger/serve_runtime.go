package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/policy"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/leaseledger/leaseledger/runtime"
)

// Defaults of serve's runtime flags.
const (
	// defaultMCPAddr is where the MCP endpoint listens by default.
	defaultMCPAddr = "127.0.0.1:8848"
	// mcpPath is the MCP endpoint's path.
	mcpPath = "/mcp"
	// defaultReapInterval is how often the background reaper runs.
	defaultReapInterval = time.Minute
	// defaultShutdownBudget bounds ending every MCP session and every
	// lease at shutdown: four guardian cleanups (runtime defaults: 2 s stdin
	// EOF, 2 s TERM, 2 s KILL, 0.5 s pipes) with room to spare; the
	// cleanups run in parallel.
	defaultShutdownBudget = 30 * time.Second
	// httpShutdownWait bounds waiting for the MCP listener's connections
	// to finish once every session ended; what is left is closed.
	httpShutdownWait = 5 * time.Second
	// mcpReadHeaderTimeout bounds reading one request's headers.
	mcpReadHeaderTimeout = 10 * time.Second
	// mcpIdleTimeout closes a keep-alive connection of the MCP endpoint
	// with no request for this long (an open SSE stream is a response in
	// progress, not idle).
	mcpIdleTimeout = 2 * time.Minute
)

// runtimeFlags are serve's flags for the runtime and its MCP gateway.
type runtimeFlags struct {
	config              string
	mcpAddr             string
	tokens              string
	allowedOrigins      []string
	maxSessions         int
	maxSessionsPerToken int
	sessionIdle         time.Duration
	bodyReadTimeout     time.Duration
	requestBudget       time.Duration
	acquireTimeout      time.Duration
	callTimeout         time.Duration
	maxLiveLeases       int
	idleMax             time.Duration
	reapInterval        time.Duration
	shutdownBudget      time.Duration
	helperPath          string
	dashboard           bool
	policy              string
	policyEntities      string
}

func (rf *runtimeFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&rf.config, "config", "", "run the MCP servers of this mcp.json under leases and serve them on --mcp-addr (relative commands, args and cwds resolve from serve's working directory)")
	f.StringVar(&rf.mcpAddr, "mcp-addr", defaultMCPAddr, "address of the MCP endpoint (Streamable HTTP at "+mcpPath+"); a non-loopback address needs --tokens")
	f.StringVar(&rf.tokens, "tokens", "", "bearer token file (leaseledger token add NAME --file FILE); re-read on SIGHUP")
	f.StringArrayVar(&rf.allowedOrigins, "allowed-origin", nil, "an Origin header value the MCP endpoint accepts, e.g. https://app.example (repeatable; requests without Origin, and loopback origins on a loopback address, are always accepted)")
	f.IntVar(&rf.maxSessions, "max-sessions", gateway.DefaultMaxSessions, "live MCP sessions at most (beyond: 503)")
	f.IntVar(&rf.maxSessionsPerToken, "max-sessions-per-token", gateway.DefaultMaxSessionsPerToken, "live MCP sessions one token may hold (beyond: 429)")
	f.DurationVar(&rf.sessionIdle, "session-idle-timeout", gateway.DefaultSessionIdleTimeout, "an MCP session without requests for this long is ended (its leases too)")
	f.DurationVar(&rf.bodyReadTimeout, "body-read-timeout", gateway.DefaultBodyReadTimeout, "time to receive one request body; a client that stalls mid-body is answered 408 and holds no session slot")
	f.DurationVar(&rf.requestBudget, "request-budget", runtime.DefaultRequestBudget, "budget of one resource read or listing through the gateway")
	f.DurationVar(&rf.acquireTimeout, "acquire-timeout", runtime.DefaultAcquireTimeout, "bound of one server start (spawn, initialize, tool listing); beyond it the request is answered server unavailable")
	f.DurationVar(&rf.callTimeout, "call-timeout", runtime.DefaultCallTimeout, "budget of one tool call of a server whose mcp.json entry sets no \"callTimeout\"; beyond it the server is told to cancel, the client gets a timeout error and call.finished records outcome timeout")
	f.IntVar(&rf.maxLiveLeases, "max-live-leases", runtime.DefaultMaxLiveLeases, "live leases (running MCP servers) at most")
	f.DurationVar(&rf.idleMax, "idle-max", runtime.DefaultIdleMax, "a lease without calls for this long is reaped")
	f.DurationVar(&rf.reapInterval, "reap-interval", defaultReapInterval, "how often the background reaper looks for idle leases (0: only opportunistic reaping)")
	f.DurationVar(&rf.shutdownBudget, "shutdown-budget", defaultShutdownBudget, "at SIGINT/SIGTERM, time to end every MCP session and lease before the bus and the ledger close")
	f.StringVar(&rf.policy, "policy", "", "Cedar access policy file deciding what each token may do (docs/policy.md); validated at start (a file that does not validate refuses to start), re-read on SIGHUP and by `control reload`; without it every valid token may do everything")
	f.StringVar(&rf.policyEntities, "policy-entities", "", "Cedar entities file (JSON) of the access policy: the groups of the tokens' principals; needs --policy")
	f.StringVar(&rf.helperPath, "guardian-helper", "", "guardian helper binary (default: this executable acting as the helper)")
	f.BoolVar(&rf.dashboard, "dashboard", true, "serve the dashboard (docs/dashboard.md) at / on --mcp-addr; it follows the bus over --ws-port")
	_ = f.MarkHidden("guardian-helper")
}

// serveRuntime is serve's lease manager and MCP gateway.
type serveRuntime struct {
	a      *app
	flags  runtimeFlags
	mgr    *runtime.Manager
	gw     *gateway.Gateway
	tokens *gateway.Tokens
	// cfgPath is --config made absolute, cfgSrc the entries loaded from
	// it that the manager looks up; reloadMu serialises reloads (SIGHUP,
	// the control API) and guards servers, the names offered.
	cfgPath  string
	cfgSrc   *runtime.MapConfigSource
	reloadMu sync.Mutex
	servers  []string
	srv      *http.Server
	served   chan struct{}
	stopHUP  func()
	recovery live.RecoveryReport
	// dashboard, when set, is served at / beside the MCP endpoint.
	dashboard http.Handler
	// policy is the access policy in force with --policy (nil without:
	// everything allowed), swapped by reloads under reloadMu.
	policy *policy.Engine
}

// startRuntime builds the manager over the projection's ledger, records
// what a previous serve left behind (live.Recover, with the ownership of
// a gateway host on a ledger of its own) and builds the gateway. It does
// not listen yet (listen).
func startRuntime(ctx context.Context, a *app, proj *live.Projection, rf runtimeFlags) (*serveRuntime, error) {
	if rf.shutdownBudget <= 0 {
		return nil, errors.New("--shutdown-budget must be positive")
	}
	cfgPath, err := filepath.Abs(rf.config)
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		return nil, err
	}
	servers := cfg.names
	logConfigWarnings(a.logger, cfg.data)
	helperPath, helperArgs := rf.helperPath, []string(nil)
	if helperPath == "" {
		if helperPath, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("locate this executable (the guardian helper): %w", err)
		}
		helperArgs = []string{helperArg}
	}
	rt := &serveRuntime{a: a, flags: rf, cfgPath: cfgPath, cfgSrc: &runtime.MapConfigSource{}, servers: servers}
	if err := rt.cfgSrc.Replace(cfg.entries); err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if rf.tokens != "" {
		if rt.tokens, err = gateway.LoadTokens(rf.tokens); err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
	}
	var set *policy.Set
	switch {
	case rf.policy != "":
		if set, err = policy.Load(rf.policy, rf.policyEntities); err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		rt.policy = policy.NewEngine(set)
	case rf.policyEntities != "":
		return nil, errors.New("--policy-entities needs --policy")
	}
	if rt.recovery, err = live.Recover(ctx, proj, live.GatewayOwnership()); err != nil {
		return nil, err
	}
	opts := runtime.Options{
		Config: rt.cfgSrc, Ledger: proj.Ledger(),
		HelperPath: helperPath, HelperArgs: helperArgs,
		MaxLiveLeases: rf.maxLiveLeases, IdleMax: rf.idleMax, ReapInterval: rf.reapInterval, AcquireTimeout: rf.acquireTimeout, CallTimeout: rf.callTimeout,
	}
	if a.logger.Enabled(ctx, slog.LevelDebug) {
		// Server stderr only at debug level: the logger writes
		// synchronously, and the runtime's reader must not wait for it
		// in production.
		logger := a.logger
		opts.StderrLog = func(session, server, activation string, line []byte) {
			logger.Debug("server stderr", "session", session, "server", server, "activation", activation, "line", string(line))
		}
	}
	if rt.mgr, err = runtime.NewManager(opts); err != nil {
		return nil, err
	}
	if err := rt.mgr.RecordConfig(ctx, events.ConfigStart, cfg.data, runtime.ConfigChange{Servers: len(servers)}); err != nil {
		_ = rt.mgr.Close(context.Background())
		return nil, fmt.Errorf("recording the configuration: %w", err)
	}
	if err := rt.mgr.RecordPolicy(ctx, policyLoaded(events.ConfigStart, set)); err != nil {
		_ = rt.mgr.Close(context.Background())
		return nil, fmt.Errorf("recording the access policy: %w", err)
	}
	rt.gw, err = gateway.New(gateway.Options{
		Manager: rt.mgr, Servers: servers, Prefixes: cfg.prefixes, Tokens: rt.tokens, AllowedOrigins: rf.allowedOrigins,
		MaxSessions: rf.maxSessions, MaxSessionsPerToken: rf.maxSessionsPerToken,
		SessionIdleTimeout: rf.sessionIdle, BodyReadTimeout: rf.bodyReadTimeout, RequestBudget: rf.requestBudget, Logger: a.logger,
		Policy: rt.policy,
	})
	if err != nil {
		_ = rt.mgr.Close(context.Background())
		return nil, fmt.Errorf("MCP gateway: %w", err)
	}
	return rt, nil
}

// listen starts the MCP endpoint. Without tokens it refuses a listening
// address that is not loopback.
func (rt *serveRuntime) listen() (string, error) {
	ln, err := net.Listen("tcp", rt.flags.mcpAddr)
	if err != nil {
		return "", fmt.Errorf("--mcp-addr: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); rt.tokens == nil && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return "", fmt.Errorf("--mcp-addr %s is not a loopback address: give --tokens FILE (leaseledger token add NAME --file FILE) so that only token holders connect", rt.flags.mcpAddr)
	}
	mux := http.NewServeMux()
	mux.Handle(mcpPath, rt.gw.Handler())
	if rt.dashboard != nil {
		mux.Handle("/", rt.dashboard)
	}
	rt.srv = mcpServer(mux, rt.a.logger)
	rt.served = make(chan struct{})
	go func() {
		defer close(rt.served)
		_ = rt.srv.Serve(ln)
	}()
	rt.watchHUP()
	return "http://" + ln.Addr().String() + mcpPath, nil
}

// mcpServer is the MCP endpoint's HTTP server: every wait on a client is
// bounded (headers, idle keep-alive connections); request bodies are
// bounded by the gateway, and responses may stream for a session's life.
func mcpServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: mcpReadHeaderTimeout, IdleTimeout: mcpIdleTimeout,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
}

// watchHUP reloads on SIGHUP until shutdown: the token file (with
// --tokens) and the server configuration (reload). A file that fails to
// load is reported and the previous one stays in force.
//
// Windows never delivers SIGHUP (the constant exists, so this builds, and
// the notification stays silent): there the configuration is reloaded
// through the control API (`leaseledger control reload`), and the token
// file only by restarting serve.
func (rt *serveRuntime) watchHUP() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-hup:
				if rt.tokens != nil {
					if err := rt.tokens.Reload(); err != nil {
						fmt.Fprintf(rt.a.stderr, "leaseledger: tokens not reloaded (the previous ones stay in force): %v\n", err)
					} else {
						fmt.Fprintf(rt.a.stdout, "leaseledger: tokens reloaded: %d in force\n", rt.tokens.Len())
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
				change, err := rt.reload(ctx)
				cancel()
				if err != nil {
					fmt.Fprintf(rt.a.stderr, "leaseledger: %v\n", err)
					continue
				}
				fmt.Fprintf(rt.a.stdout, "leaseledger: %s\n", change)
			}
		}
	}()
	rt.stopHUP = func() {
		signal.Stop(hup)
		close(done)
		<-stopped
	}
}

// shutdown stops accepting MCP requests, ends every MCP session, closes
// the manager (every lease ended, its cleanup recorded) — both within
// budget — and stops the endpoint. Past the budget it reports what was
// not done and returns: the bus and the ledger close next, and guardians
// still running kill their servers when serve exits. Idempotent enough
// for a deferred call after an explicit one.
func (rt *serveRuntime) shutdown(budget time.Duration) error {
	if rt.stopHUP != nil {
		rt.stopHUP()
		rt.stopHUP = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	var errs []error
	httpDone := make(chan struct{})
	if rt.srv != nil {
		// Shutdown closes the listener at once, then waits for the
		// connections, whose session streams end with Close below.
		go func() {
			defer close(httpDone)
			hctx, hcancel := context.WithTimeout(context.Background(), budget+httpShutdownWait)
			defer hcancel()
			if err := rt.srv.Shutdown(hctx); err != nil {
				_ = rt.srv.Close()
			}
			<-rt.served
		}()
	} else {
		close(httpDone)
	}
	if err := rt.gw.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("ending MCP sessions: %w", err))
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.mgr.Close(context.WithoutCancel(ctx)) }()
	select {
	case err := <-closed:
		if err != nil {
			errs = append(errs, fmt.Errorf("ending leases: %w", err))
		}
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("leases not all ended within --shutdown-budget %v (their guardians end the servers when serve exits; the audit reports them unconfirmed)", budget))
	}
	<-httpDone
	rt.srv = nil
	return errors.Join(errs...)
}

// announce starts the MCP endpoint and prints what serve runs.
func (rt *serveRuntime) announce() error {
	if rt.recovery.Any() {
		fmt.Fprintf(rt.a.stdout, "leaseledger: %s\n", recoveryText(rt.recovery))
	}
	url, err := rt.listen()
	if err != nil {
		return err
	}
	fmt.Fprintf(rt.a.stdout, "leaseledger: MCP servers %s from %s\n", strings.Join(rt.offered(), ", "), rt.flags.config)
	fmt.Fprintf(rt.a.stdout, "leaseledger: MCP endpoint on %s\n", url)
	if rt.dashboard != nil {
		fmt.Fprintf(rt.a.stdout, "leaseledger: dashboard on %s/\n", strings.TrimSuffix(url, mcpPath))
	}
	return nil
}
