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
//   - With --hosts auto, a host that joins the cluster after the start is
//     mirrored and served on the running fleet bus (its replay is its
//     chain); two collectors over the same fleet, one discovering and one
//     with a list, hold identical mirrors (--fleet export)
//     (TestCollectDiscoversHostRedundantCollectorsAgree).
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
	mu     sync.Mutex
	byHost map[string]*control.Checkpointer
}

func newCheckpointRelays(hosts []string, logger *slog.Logger) *checkpointRelays {
	r := &checkpointRelays{logger: logger, byHost: make(map[string]*control.Checkpointer, len(hosts))}
	for _, h := range hosts {
		r.get(h)
	}
	return r
}

// get is host's relay, made on first use (a host found by discovery).
func (r *checkpointRelays) get(host string) *control.Checkpointer {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := r.byHost[host]
	if cp == nil {
		cp = control.NewCheckpointRelay()
		r.byHost[host] = cp
	}
	return cp
}

// relay is the collector's OnCheckpoint: it keeps signed for host's proof
// API and publishes it on the fleet bus once there is one.
func (r *checkpointRelays) relay(host string, signed []byte) {
	if err := r.get(host).Relay(context.Background(), signed); err != nil {
		r.logger.Warn("collect: checkpoint not republished", "host", host, "err", err)
	}
}

// unpublish stops every relay's publication (the fleet bus closes).
func (r *checkpointRelays) unpublish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cp := range r.byHost {
		cp.SetPublish(nil) // kept, not published, once the fleet bus closes
	}
}

// fleetSpaces serves on the fleet bus the hosts the collector adds while
// it runs (discovery: collector.Options.OnHostAdded); one added before
// the fleet bus started is among the hosts it starts with.
type fleetSpaces struct {
	projs  *mirrorProjections
	relays *checkpointRelays
	logger *slog.Logger
	mu     sync.Mutex
	fb     *bus.Fleet      // nil until started, and once stopped
	served map[string]bool // hosts with a space
}

// space is host's space on the fleet bus: its mirror, the projection API
// over its live projection and the proof API with its relayed checkpoints.
func (s *fleetSpaces) space(host string, m *ledger.Ledger) bus.Space {
	return bus.Space{HostID: host, Ledger: m,
		Services: append(control.ProjectionServices(s.projs.get(host)), control.ProofServices(m, s.relays.get(host))...)}
}

// added is the collector's OnHostAdded: host gets a space on the running
// fleet bus (a failure is logged: the host is still mirrored into the
// directory).
func (s *fleetSpaces) added(host string, m *ledger.Ledger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fb == nil || s.served[host] {
		return
	}
	if err := s.fb.AddSpace(s.space(host, m)); err != nil {
		s.logger.Warn("collect: discovered host not served on the fleet bus (it is mirrored)", "host", host, "err", err)
		return
	}
	s.served[host] = true
	fb := s.fb
	s.relays.get(host).SetPublish(func(signed []byte) error { return fb.PublishCheckpoint(host, signed) })
	s.logger.Info("collect: discovered host served on the fleet bus", "host", host)
}

// startFleetBus starts the fleet bus over c's mirrors and records its URL
// in the collector's directory; stop closes it (before the mirrors). With
// discovery, hosts added later get their spaces through spaces.added.
func startFleetBus(c *collector.Collector, spaces *fleetSpaces, discover bool, f fleetBusFlags, logger *slog.Logger) (fb *bus.Fleet, stop func(), err error) {
	if f.readOnlyPassword == "" {
		f.readOnlyPassword = os.Getenv("LEASELEDGER_READONLY_PASSWORD")
	}
	spaces.mu.Lock()
	defer spaces.mu.Unlock()
	var ss []bus.Space
	hosts := c.Hosts()
	for _, h := range hosts {
		ss = append(ss, spaces.space(h, c.Mirror(h)))
	}
	var grants []bus.Service
	if discover {
		// The services every discovered host's space serves: only their
		// subjects and access count (the fleet bus's permissions).
		grants = append(control.ProjectionServices(nil), control.ProofServices(nil, nil)...)
	}
	fb, err = bus.StartFleet(bus.FleetOptions{Host: f.host, Port: f.port, WebSocketPort: f.wsPort,
		ReadOnlyUser: f.readOnlyUser, ReadOnlyPassword: f.readOnlyPassword, DenyAnonymous: f.denyAnonymous,
		Spaces: ss, AddSpaces: discover, SpaceServices: grants,
		Services: []bus.Service{fleetStatusService(c)}, Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("fleet bus: %w", err)
	}
	spaces.fb, spaces.served = fb, map[string]bool{}
	for _, h := range hosts {
		spaces.served[h] = true
		spaces.relays.get(h).SetPublish(func(signed []byte) error { return fb.PublishCheckpoint(h, signed) })
	}
	closeFleet := func() {
		spaces.fb = nil // under spaces.mu
		spaces.relays.unpublish()
		fb.Close()
	}
	urlFile := filepath.Join(c.Dir(), fleetBusURLFile)
	if err := os.WriteFile(urlFile, []byte(fb.ClientURL()+"\n"), 0o644); err != nil {
		closeFleet()
		return nil, nil, fmt.Errorf("fleet bus: %w", err)
	}
	return fb, func() {
		spaces.mu.Lock()
		closeFleet()
		spaces.mu.Unlock()
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
