package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"
)

func init() { extraCommands = append(extraCommands, newCollectCmd) }

// collectFlags are the flags of `collect`.
type collectFlags struct {
	hosts []string
	routeFlags
	fleetBus     fleetBusFlags
	metricsAddr  string
	natsPort     int
	vkeys        []string
	pollInterval time.Duration
	bufferLen    int
}

func newCollectCmd(a *app) *cobra.Command {
	var cf collectFlags
	cmd := &cobra.Command{
		Use:   "collect",
		Short: "Mirror every fleet host's chain from the NATS cluster into --data-dir/hosts/<host>/, verified",
		Long: `collect joins the fleet's NATS cluster as a peer without a ledger and mirrors
each host named by --hosts into --data-dir/hosts/<host>/, a mirror ledger every
read command works on (use --fleet with audit, leases, export and verify).
Every event is verified against its host's chain before it is stored; a host
whose chain forks, breaks or names another host is refused: its finding is
written to hosts/<host>/REFUSED.json and it stays refused until that file is
removed. --hosts auto (or a pattern such as 'h*') also mirrors, without a
restart, every matching host that announces itself on the cluster (hosts
announce on leaseledger.hosts.<host>.announce), and the host directories
already under --data-dir/hosts that match. --metrics-addr serves /metrics (per-host lag), /status (JSON) and
the dashboard (every mirrored host, through the fleet bus's --ws-port).

While it runs it serves the mirrors on its fleet bus (--port, default 4249):
a NATS server of its own, read-only, never clustered, on which each host h is
served in h's space as h serves itself — tail, replay, head and leases with
--nats URL --host-id h, the projection and proof APIs (with h's own signed
checkpoints: the latest one h published that its mirror matches, republished
untouched; witness --bus URL --host-id h follows them); 'tail --fleet --nats
URL' follows every host. It holds the mirrors open, as serve holds its data
directory: --fleet reads of the directory need it stopped (it resumes from
each mirror's head).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runCollect(cmd.Context(), cf)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&cf.hosts, "hosts", nil, "host ids to mirror (comma-separated or repeated); 'auto' or a pattern such as 'h*' (path.Match) also mirrors every matching host that announces itself on the cluster, without a restart")
	cf.routeFlags.register(f, "127.0.0.1:-1", "host:port the collector's route listens on (port -1: any free port)")
	f.StringArrayVar(&cf.vkeys, "checkpoint-vkey", nil, "host=KEY: check the signed checkpoints host publishes (serve --checkpoint-key) with this verifier key (from 'checkpoint keygen') against its mirror (repeatable)")
	f.IntVar(&cf.natsPort, "nats-port", 0, "also offer a read-only NATS client port on the cluster peer, 127.0.0.1 (the hosts themselves, not the mirrors; -1: any free port; 0: none)")
	f.StringVar(&cf.metricsAddr, "metrics-addr", "", "serve /metrics, /status and the dashboard on this address, e.g. 127.0.0.1:9249 (empty: off)")
	cf.fleetBus.register(f)
	f.DurationVar(&cf.pollInterval, "poll-interval", collector.DefaultPollInterval, "idle time after which a host's head is asked again")
	f.IntVar(&cf.bufferLen, "buffer", collector.DefaultBufferLen, "live events buffered per host (overflow is dropped and filled by replay)")
	return cmd
}

func (a *app) runCollect(ctx context.Context, cf collectFlags) error {
	if len(cf.hosts) == 0 {
		return errors.New("collect: --hosts is required")
	}
	ids, patterns := splitHosts(cf.hosts)
	cluster, err := cf.routeFlags.options()
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	// The connection's slow-consumer drops are the collector's bounded
	// buffers at work (counted per host, filled by replay), not errors.
	peer, err := bus.StartPeer(bus.PeerOptions{Host: "127.0.0.1", Port: cf.natsPort, Logger: a.logger, Cluster: cluster})
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	defer peer.Close()
	nc, err := peer.Connect(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrSlowConsumer) {
			a.logger.Warn("collect: NATS", "err", err)
		}
	}))
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	defer nc.Close()
	verifiers := map[string]note.Verifier{}
	for _, hk := range cf.vkeys {
		h, key, ok := strings.Cut(hk, "=")
		if !ok {
			return fmt.Errorf("collect: --checkpoint-vkey %q: want host=KEY", hk)
		}
		v, err := note.NewVerifier(strings.TrimSpace(key))
		if err != nil {
			return fmt.Errorf("collect: --checkpoint-vkey for %s: %w", h, err)
		}
		verifiers[h] = v
	}
	// Each mirror is opened with its live projection (the projection API
	// of its space on the fleet bus); the collector imports into it.
	// Each host's latest checkpoint that its mirror matches is kept for
	// its proof API on the fleet bus and republished there.
	// With discovery (--hosts auto or a pattern), each host found later
	// gets its space on the running fleet bus (spaces.added).
	projs := &mirrorProjections{logger: a.logger}
	relays := newCheckpointRelays(ids, a.logger)
	spaces := &fleetSpaces{projs: projs, relays: relays, logger: a.logger}
	c, err := collector.Start(collector.Options{Dir: a.dataDir, Hosts: ids, Discover: patterns, Conn: nc, Logger: a.logger,
		PollInterval: cf.pollInterval, BufferLen: cf.bufferLen, Verifiers: verifiers, OpenMirror: projs.open,
		OnCheckpoint: relays.relay, OnHostAdded: spaces.added})
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	defer c.Close()
	fb, stopFleet, err := startFleetBus(c, spaces, len(patterns) > 0, cf.fleetBus, a.logger)
	if err != nil {
		return fmt.Errorf("collect: %w", err)
	}
	defer stopFleet() // before the mirrors close
	mirrored := strings.Join(c.Hosts(), ",")
	if mirrored == "" {
		mirrored = "no host yet"
	}
	fmt.Fprintf(a.stdout, "leaseledger: collector mirroring %s into %s\n", mirrored, a.dataDir)
	if len(patterns) > 0 {
		fmt.Fprintf(a.stdout, "leaseledger: discovering hosts matching %s (announced on %s)\n", strings.Join(patterns, ","), busclient.FleetAnnounceSubjects())
	}
	fmt.Fprintf(a.stdout, "leaseledger: cluster route on %s\n", peer.ClusterURL())
	if u := peer.ClientURL(); u != "" {
		fmt.Fprintf(a.stdout, "leaseledger: read-only NATS on %s\n", u)
	}
	fmt.Fprintf(a.stdout, "leaseledger: fleet bus on %s\n", fb.ClientURL())
	if ws := fb.WebSocketURL(); ws != "" {
		fmt.Fprintf(a.stdout, "leaseledger: fleet bus WebSocket on %s\n", ws)
	}
	for _, h := range c.Hosts() {
		if s := c.Status().Hosts[h]; s.State == collector.StateRefused {
			fmt.Fprintf(a.stdout, "leaseledger: host %s REFUSED (%s at seq %d; remove %s to retry)\n",
				h, s.Finding.Reason, s.Finding.Seq, collector.HostDir(a.dataDir, h)+"/"+collector.RefusedFile)
		}
	}
	if cf.metricsAddr != "" {
		dash, err := dashboardFor(cf.fleetBus.host, fb.WebSocketURL(), cf.fleetBus.denyAnonymous, c.Hosts())
		if err != nil {
			return fmt.Errorf("collect: %w", err)
		}
		stop, addr, err := serveCollectorHTTP(c, dash, cf.metricsAddr)
		if err != nil {
			return err
		}
		defer stop()
		fmt.Fprintf(a.stdout, "leaseledger: metrics on http://%s/metrics, status on http://%s/status\n", addr, addr)
		fmt.Fprintf(a.stdout, "leaseledger: dashboard on http://%s/\n", addr)
	}
	<-ctx.Done()
	return nil
}

// splitHosts splits --hosts into host ids and discovery patterns: "auto"
// (every host, "*") and any entry with a glob character (path.Match
// syntax, e.g. "h*") are patterns.
func splitHosts(hosts []string) (ids, patterns []string) {
	for _, h := range hosts {
		switch {
		case h == "auto":
			patterns = append(patterns, "*")
		case strings.ContainsAny(h, `*?[\`):
			patterns = append(patterns, h)
		default:
			ids = append(ids, h)
		}
	}
	return ids, patterns
}

// serveCollectorHTTP serves the collector's /metrics (with the Go
// runtime's), /status and, at every other path, the dashboard on addr
// until stop is called.
func serveCollectorHTTP(c *collector.Collector, dash http.Handler, addr string) (stop func(), bound string, err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(c.Metrics()))
	mux.Handle("GET /status", c.Handler())
	mux.Handle("/", dash)
	return serveHTTP("metrics", addr, mux)
}
