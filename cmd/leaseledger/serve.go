package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/dashboard"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgermetrics"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/spf13/cobra"
)

func newServeCmd(a *app) *cobra.Command {
	var (
		opts        bus.Options
		metricsAddr string
		rf          runtimeFlags
		cf          checkpointFlags
		fleet       clusterFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Open the ledger, serve it on an embedded NATS bus and, with --config, run MCP servers behind an MCP endpoint",
		Long: `serve opens (creating if needed) the ledger in --data-dir, starts an embedded
NATS server on loopback, publishes every committed event on
leaseledger.events.<family>.<action>.<activation or _>, answers replay, head
and append requests, and shuts down cleanly on SIGINT or SIGTERM. It serves
inclusion and consistency proofs (leaseledger.api.proof.…); with
--checkpoint-key it also signs a checkpoint of its head and publishes it on
leaseledger.checkpoints every --checkpoint-interval in which the head moved
(followed by 'leaseledger witness'). With --host-id it is one host of a fleet:
the ledger is bound to the host (host.bound) and every subject moves under
leaseledger.hosts.<id>.…; --cluster-listen/--routes or --leaf-remote join the
fleet's NATS cluster (docs/operations.md, "Fleet: clusters and leaf nodes").

With --config mcp.json it also runs the lease manager: every MCP client
session on --mcp-addr (Streamable HTTP at /mcp) is a runtime session, and
the tools and resources of every configured server are offered under
namespaced names (<server>__<tool>, leaseledger://<server>/<uri>). Stdio
servers run under the guardian: this executable started again as the helper.
Idle leases are reaped in the background. At SIGINT or SIGTERM it stops
accepting MCP requests, ends every session and lease within
--shutdown-budget, then closes the bus and the ledger.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.ReadOnlyPassword == "" {
				opts.ReadOnlyPassword = os.Getenv("LEASELEDGER_READONLY_PASSWORD")
			}
			if opts.WriterPassword == "" {
				opts.WriterPassword = os.Getenv("LEASELEDGER_WRITER_PASSWORD")
			}
			if opts.ControlPassword == "" {
				opts.ControlPassword = os.Getenv("LEASELEDGER_CONTROL_PASSWORD")
			}
			opts.Logger = a.logger
			if err := fleet.apply(&opts); err != nil {
				return err
			}
			// The ledger is opened with its live projection: the newest
			// snapshot plus the tail is restored before anything can be
			// appended, and snapshots are saved periodically and on close.
			// Stopped last: the grace timer of a failure's shutdown
			// (below) bounds the deferred closes too.
			stopGrace := func() {}
			defer func() { stopGrace() }()
			proj, err := live.Open(cmd.Context(), live.Options{Ledger: ledger.Options{Dir: a.dataDir, Logger: a.logger}, Logger: a.logger})
			if errors.Is(err, ledger.ErrCorrupt) {
				// Refuse rather than serve a projection that skipped events.
				return fmt.Errorf("refusing to start: the ledger in %s is damaged (run 'leaseledger verify'): %w", a.dataDir, err)
			}
			if err != nil {
				return err
			}
			defer proj.Close()
			l := proj.Ledger()
			// The host is bound before anything else appends, so that on an
			// empty ledger host.bound is the chain's genesis.
			bound, err := fleet.bindHost(cmd.Context(), l)
			if err != nil {
				return err
			}
			h, st := l.Head(), proj.Stats() // as opened, before the runtime appends
			var rt *serveRuntime
			if rf.config != "" {
				if rt, err = startRuntime(cmd.Context(), a, proj, rf); err != nil {
					return err
				}
				// On an early return; the normal path shuts it down below.
				defer func() { _ = rt.shutdown(rf.shutdownBudget) }()
				a.setShutdownExtra(rf.shutdownBudget)
			}
			cp, err := cf.checkpointer(cmd.Context(), l)
			if err != nil {
				return err
			}
			opts.Services = append(busServices(proj, rt, opts.ControlUser), control.ProofServices(l, cp)...)
			b, err := bus.Start(l, opts)
			if err != nil {
				return err
			}
			defer b.Close()
			stopCheckpoints := cf.publishCheckpoints(cp, b, a.logger)
			defer stopCheckpoints() // on an early return; before the bus closes
			if metricsAddr != "" {
				stop, addr, err := serveMetrics(l, metricsAddr)
				if err != nil {
					return err
				}
				defer stop()
				fmt.Fprintf(a.stdout, "leaseledger: metrics on http://%s/metrics\n", addr)
			}
			fmt.Fprintf(a.stdout, "leaseledger: ledger %s at seq %d\n", a.dataDir, h.Seq)
			fmt.Fprintf(a.stdout, "leaseledger: projection from snapshot at seq %d plus %d replayed event(s)%s\n",
				st.SnapshotSeq, st.Replayed, ignoredNote(st.SnapshotIgnored))
			fmt.Fprintf(a.stdout, "leaseledger: NATS listening on %s\n", b.ClientURL())
			if fleet.hostID != "" {
				fmt.Fprintf(a.stdout, "leaseledger: host %s (host.bound at seq %d), subjects under leaseledger.hosts.%s.\n", fleet.hostID, bound, fleet.hostID)
			}
			if u := b.ClusterURL(); u != "" {
				fmt.Fprintf(a.stdout, "leaseledger: NATS cluster listening on %s\n", u)
			}
			if ws := b.WebSocketURL(); ws != "" {
				fmt.Fprintf(a.stdout, "leaseledger: NATS WebSocket on %s\n", ws)
			}
			if rt != nil {
				if rf.dashboard {
					if rt.dashboard, err = newDashboard(opts, b.WebSocketURL()); err != nil {
						return err
					}
				}
				if err := rt.announce(); err != nil {
					return err
				}
			}
			var failure error
			select {
			case <-cmd.Context().Done():
			case <-l.Failed():
				// The write path failed for good (full disk, storage
				// error): stop, so that a supervisor can restart it once
				// the cause is fixed; nothing acknowledged is lost.
				failure = l.Stats().Failure
				fmt.Fprintf(a.stderr, "leaseledger: the ledger failed, shutting down: %v\n", failure)
				// Closing waits for appends in flight and the storage:
				// bound it as a signal's shutdown is bounded (main).
				stopGrace = startGraceTimer(a.stderr, "the ledger's failure", shutdownGrace+time.Duration(a.shutdownExtra.Load()), exitProcess)
			}
			fmt.Fprintln(a.stdout, "leaseledger: shutting down")
			if rt != nil {
				if err := rt.shutdown(rf.shutdownBudget); err != nil {
					fmt.Fprintf(a.stderr, "leaseledger: %v\n", err)
				}
			}
			stopCheckpoints()
			if err := b.Close(); err != nil {
				return err
			}
			head := l.Head().Seq
			if err := proj.Close(); err != nil { // final snapshot, then the ledger
				return err
			}
			fmt.Fprintf(a.stdout, "leaseledger: stopped at seq %d\n", head)
			return failure
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Host, "host", "127.0.0.1", "address the NATS server listens on")
	f.IntVar(&opts.Port, "port", bus.DefaultPort, "NATS client port (-1: any free port)")
	f.IntVar(&opts.WebSocketPort, "ws-port", 0, "NATS WebSocket port for browser dashboards (0: off, -1: any free port)")
	f.StringVar(&opts.ReadOnlyUser, "read-only-user", "", "add a read-only NATS user (subscribe to events, call replay/head)")
	f.StringVar(&opts.ReadOnlyPassword, "read-only-password", "", "password of --read-only-user (env LEASELEDGER_READONLY_PASSWORD)")
	f.StringVar(&opts.WriterUser, "writer-user", "", "add a NATS user that may also append (on its own subject, leaseledger.api.append.<user>)")
	f.StringVar(&opts.WriterPassword, "writer-password", "", "password of --writer-user (env LEASELEDGER_WRITER_PASSWORD)")
	f.StringVar(&opts.ControlUser, "control-user", "", "add the NATS control user: the only one that may call the runtime control API (leaseledger.api.runtime.…: leases, revoke, end_session, reap)")
	f.StringVar(&opts.ControlPassword, "control-password", "", "password of --control-user (env LEASELEDGER_CONTROL_PASSWORD)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9248 (empty: off)")
	f.BoolVar(&opts.DenyAnonymous, "deny-anonymous", false, "refuse unauthenticated clients (by default they are read-only)")
	f.IntVar(&opts.Limits.MaxConnections, "max-connections", bus.DefaultMaxConnections, "NATS client connections at most")
	f.IntVar(&opts.Limits.ReservedNamedConnections, "reserved-named-connections", bus.DefaultReservedNamedConnections, "connections of --max-connections that only named users may take (anonymous clients are refused beyond the rest)")
	f.Int64Var(&opts.Limits.MaxPendingBytes, "max-pending-bytes", bus.DefaultMaxPendingBytes, "unread bytes held per connection before it is cut off as a slow consumer")
	f.DurationVar(&opts.Limits.WriteDeadline, "write-deadline", bus.DefaultWriteDeadline, "a connection whose socket takes longer to accept a write is cut off as a slow consumer")
	f.Float64Var(&opts.Limits.RequestRate, "request-rate", bus.DefaultRequestRate, "API requests per second per anonymous or read-only connection (burst --request-burst)")
	f.Float64Var(&opts.Limits.RequestBurst, "request-burst", bus.DefaultRequestBurst, "API request burst per anonymous or read-only connection")
	f.Float64Var(&opts.Limits.AnonymousRate, "anonymous-rate", bus.DefaultAnonymousRate, "API requests per second of all anonymous connections together")
	f.DurationVar(&opts.Limits.Auth.FailureDelay, "auth-failure-delay", bus.DefaultAuthFailureDelay, "a failed authentication is answered after this delay")
	f.IntVar(&opts.Limits.Auth.FailureBurst, "auth-failure-burst", bus.DefaultAuthFailureBurst, "failed authentications per source address and user before that pair is throttled")
	f.DurationVar(&opts.Limits.Auth.FailureInterval, "auth-failure-interval", bus.DefaultAuthFailureInterval, "a throttled address and user pair regains one attempt per interval")
	rf.register(cmd)
	cf.register(cmd)
	fleet.register(cmd)
	return cmd
}

// newDashboard is the dashboard for the bus serve started: its WebSocket
// port (from wsURL, "" when off) on the bus's host, credentials asked for
// when anonymous clients are refused, the host's space with --host-id.
func newDashboard(opts bus.Options, wsURL string) (http.Handler, error) {
	var hosts []string
	if opts.HostID != "" {
		hosts = []string{opts.HostID}
	}
	return dashboardFor(opts.Host, wsURL, opts.DenyAnonymous, hosts)
}

// dashboardFor is the dashboard of a bus listening on host whose
// WebSocket is wsURL ("" when off), serving the host spaces hosts (none:
// the bare space): serve's and the collector's.
func dashboardFor(host, wsURL string, credentialsRequired bool, hosts []string) (http.Handler, error) {
	port := 0
	if u, err := url.Parse(wsURL); err == nil && wsURL != "" {
		port, _ = strconv.Atoi(u.Port())
	}
	return dashboard.New(dashboard.Options{WebSocketHost: host, WebSocketPort: port, CredentialsRequired: credentialsRequired, Hosts: hosts})
}

func ignoredNote(why string) string {
	if why == "" {
		return ""
	}
	return " (stored snapshot ignored: " + why + ")"
}

// serveMetrics serves the ledger's Prometheus metrics (and the Go runtime's)
// on addr until stop is called.
func serveMetrics(l *ledger.Ledger, addr string) (stop func(), bound string, err error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler(ledgermetrics.NewCollector(l)))
	return serveHTTP("metrics", addr, mux)
}
