package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/live"
)

// The collector's fleet bus (docs/fleet.md, "Reading the fleet while the
// collector runs"): a standalone, never clustered, read-only NATS server of
// the collector's own on which each mirrored host h is served in h's space
// exactly as h serves itself — its events as the mirror stores them, its
// replay and head, the projection API over a live projection of the mirror
// and the proof API over the mirror, whose checkpoints are h's own (the
// latest one h signed that the mirror matches, collector.Options.OnCheckpoint,
// republished on h's checkpoint subject and answered untouched: the
// collector signs nothing) — plus, in the bare space,
// collector.StatusSubject. Every client made WithHost(h) (tail, replay,
// head and leases with --nats URL --host-id h; control.Client.WithHost;
// witness --host-id h) reads h through it unchanged.
//
// Guarantees (each checked by the test named):
//   - Through the fleet bus, replay of host h is h's chain byte for byte
//     and leases --host-id h is what h's own bus gives (TestCollectFleetBus;
//     replay against h's export, TestFleetReadsThroughCollector).
//   - h's projection API (every page of the lease table, the audit
//     summary) through the fleet bus equals h's own
//     (TestFleetReadsThroughCollector).
//   - h's new events arrive live in h's space (tail --host-id h) and on
//     busclient.FleetEventSubjects; tail --fleet prints every host's, each
//     line naming its host, per host from --from-seq without gap
//     (TestCollectFleetBus, TestFleetReadsThroughCollector).
//   - The dashboard's /config.json lists the mirrored hosts and the fleet
//     bus's WebSocket (TestCollectFleetBus, TestFleetReadsThroughCollector).
//   - A --fleet read of the directory while the collector runs fails with
//     errCollectorRunning naming the fleet bus (FLEET_BUS_URL, removed at
//     the stop) (TestCollectFleetBus).
//   - --deny-anonymous keeps anonymous clients off the fleet bus while
//     --read-only-user reads it, and the dashboard asks for credentials
//     (TestCollectFleetBusAuth).
//   - h's signed checkpoints are republished on the fleet bus and answered
//     by its proof API byte for byte, whether or not the collector has h's
//     verifier key; witness --host-id h accepts them with h's key and an
//     inclusion proof from the fleet bus verifies against them; a
//     checkpoint the mirror contradicts is not republished
//     (TestCollectFleetCheckpoints).
//   - collect shares serve's route flags and refuses the same bad
//     combinations (TestCollectFlagsRefused).

const (
	// defaultFleetPort is the fleet bus's default client port: serve's
	// bus.DefaultPort plus one, so a collector and a host can share a
	// machine with both defaults.
	defaultFleetPort = bus.DefaultPort + 1
	// fleetBusURLFile, in the collector's directory, holds the running
	// fleet bus's client URL: a --fleet read that finds the mirrors locked
	// names it (errCollectorRunning). Removed when the collector stops.
	fleetBusURLFile = "FLEET_BUS_URL"
)

// fleetBusFlags are collect's flags of its fleet bus (serve's names).
type fleetBusFlags struct {
	host                           string
	port, wsPort                   int
	readOnlyUser, readOnlyPassword string
	denyAnonymous                  bool
}

func (f *fleetBusFlags) register(fl flagSet) {
	fl.StringVar(&f.host, "host", "127.0.0.1", "address the fleet bus (and its WebSocket) listens on")
	fl.IntVar(&f.port, "port", defaultFleetPort, "the fleet bus's NATS client port: every mirrored host, read-only, in its host space (-1: any free port)")
	fl.IntVar(&f.wsPort, "ws-port", 0, "the fleet bus's NATS WebSocket port, for the dashboard at --metrics-addr (0: off, -1: any free port)")
	fl.StringVar(&f.readOnlyUser, "read-only-user", "", "add a named read-only user to the fleet bus")
	fl.StringVar(&f.readOnlyPassword, "read-only-password", "", "password of --read-only-user (env LEASELEDGER_READONLY_PASSWORD)")
	fl.BoolVar(&f.denyAnonymous, "deny-anonymous", false, "refuse unauthenticated clients on the fleet bus (by default they read)")
}

// mirrorProjections opens each mirror with its live projection
// (collector.Options.OpenMirror) and keeps the projections by host, for
// the projection API of the host's space.
type mirrorProjections struct {
	logger *slog.Logger
	mu     sync.Mutex
	byHost map[string]*live.Projection
}

func (m *mirrorProjections) open(ctx context.Context, host string, lo ledger.Options) (*ledger.Ledger, io.Closer, error) {
	p, err := live.Open(ctx, live.Options{Ledger: lo, Logger: m.logger})
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byHost == nil {
		m.byHost = map[string]*live.Projection{}
	}
	m.byHost[host] = p
	return p.Ledger(), p, nil
}

func (m *mirrorProjections) get(host string) *live.Projection {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byHost[host]
}

// checkpointRelays hold, per mirrored host, the latest checkpoint the host
// signed that its mirror matches (collector.Options.OnCheckpoint): the
// checkpoints of the host's proof API on the fleet bus, republished there.
type checkpointRelays struct {
	logger *slog.Logger
	byHost map[string]*control.Checkpointer
}

func newCheckpointRelays(hosts []string, logger *slog.Logger) *checkpointRelays {
	r := &checkpointRelays{logger: logger, byHost: make(map[string]*control.Checkpointer, len(hosts))}
	for _, h := range hosts {
		r.byHost[h] = control.NewCheckpointRelay()
	}
	return r
}

// relay is the collector's OnCheckpoint: it keeps signed for host's proof
// API and publishes it on the fleet bus once there is one.
func (r *checkpointRelays) relay(host string, signed []byte) {
	if err := r.byHost[host].Relay(context.Background(), signed); err != nil {
		r.logger.Warn("collect: checkpoint not republished", "host", host, "err", err)
	}
}

// startFleetBus starts the fleet bus over c's mirrors and records its URL
// in the collector's directory; stop closes it (before the mirrors).
func startFleetBus(c *collector.Collector, projs *mirrorProjections, relays *checkpointRelays, f fleetBusFlags, logger *slog.Logger) (fb *bus.Fleet, stop func(), err error) {
	if f.readOnlyPassword == "" {
		f.readOnlyPassword = os.Getenv("LEASELEDGER_READONLY_PASSWORD")
	}
	var spaces []bus.Space
	for _, h := range c.Hosts() {
		m := c.Mirror(h)
		spaces = append(spaces, bus.Space{HostID: h, Ledger: m,
			Services: append(control.ProjectionServices(projs.get(h)), control.ProofServices(m, relays.byHost[h])...)})
	}
	fb, err = bus.StartFleet(bus.FleetOptions{Host: f.host, Port: f.port, WebSocketPort: f.wsPort,
		ReadOnlyUser: f.readOnlyUser, ReadOnlyPassword: f.readOnlyPassword, DenyAnonymous: f.denyAnonymous,
		Spaces: spaces, Services: []bus.Service{fleetStatusService(c)}, Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("fleet bus: %w", err)
	}
	for _, h := range c.Hosts() {
		relays.byHost[h].SetPublish(func(signed []byte) error { return fb.PublishCheckpoint(h, signed) })
	}
	unpublish := func() {
		for _, r := range relays.byHost {
			r.SetPublish(nil) // kept, not published, once the fleet bus closes
		}
	}
	urlFile := filepath.Join(c.Dir(), fleetBusURLFile)
	if err := os.WriteFile(urlFile, []byte(fb.ClientURL()+"\n"), 0o644); err != nil {
		unpublish()
		fb.Close()
		return nil, nil, fmt.Errorf("fleet bus: %w", err)
	}
	return fb, func() {
		unpublish()
		_ = fb.Close()
		_ = os.Remove(urlFile)
	}, nil
}

// fleetStatusService answers collector.StatusSubject with c's Status, the
// JSON of /status.
func fleetStatusService(c *collector.Collector) bus.Service {
	return bus.Service{Subject: collector.StatusSubject, Access: bus.AccessRead,
		Handle: bus.JSON(func(context.Context, string, *struct{}) (*collector.Status, error) {
			s := c.Status()
			return &s, nil
		})}
}

// runningFleetBus is the fleet bus URL a running collector recorded in
// dir ("" when none).
func runningFleetBus(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, fleetBusURLFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
