package bus

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A Fleet is one embedded NATS server carrying several ledgers, each in
// its host's space (busclient.HostSubject), read-only: the collector's
// fleet bus, on which every mirrored host is served exactly as the host
// serves itself, so the clients made WithHost(h) work unchanged against
// it. It is the Bus's own server, users, limits and handlers
// (server.go, space.go) with one space per ledger and no writer.
//
// Guarantees (tested in fleet_test.go):
//   - Each space answers replay and head from its own ledger, byte for
//     byte what a Start bus over the same ledger answers, with the
//     anonymous and read-only classes' limits (TestFleetServesEachSpace).
//   - Events a space's ledger commits after the start — appended, or
//     imported into a mirror — are published in order on
//     HostSubject(HostID, …); FleetEventSubjects sees every space's, and
//     PublishCheckpoint a host's checkpoint (TestFleetPublishesCommits).
//   - Read-only: no client may publish on an event, checkpoint or append
//     subject, there is no writer or control user and AccessControl
//     services are refused at start (ErrOptions) (TestFleetIsReadOnly); no
//     space serves an append subject, and its only request classes are
//     anonymous and read-only (TestFleetHasNoWriter).
//   - Fleet-level services answer in the bare space, a space's services
//     in its host's space, to anonymous clients (unless DenyAnonymous) and
//     the read-only user (TestFleetServices).
//   - No spaces, more than MaxFleetSpaces, an invalid or repeated host
//     id, a space without a ledger, invalid users or services: ErrOptions,
//     nothing started; MaxFleetSpaces spaces are served
//     (TestFleetOptionsRefused).
//
//   - A space added while the fleet runs (AddSpace, with
//     FleetOptions.AddSpaces) is served as a space given at the start:
//     replay, head, its commits published, its services; a repeated or
//     invalid host id, a service not granted at the start, more than
//     MaxFleetSpaces spaces or a closed fleet is refused (ErrOptions,
//     ErrClosed) (TestFleetAddSpace).
//
//   - A publication that fails is logged with its host and skipped, as on
//     a Bus: the next events are published, the head counts it
//     (TestFleetPublishFailureLogged). Lag is the Bus's too (space.go).
//
// A fleet bus is never clustered (FleetOptions has no cluster options):
// its hosts' spaces would collide with the hosts' own on their cluster.

// MaxFleetSpaces bounds the spaces of one fleet bus. It equals the
// collector's bound on the hosts it mirrors (collector.MaxHosts), so a
// collector can serve every host it mirrors.
const MaxFleetSpaces = 1024

// fleetServerName names a fleet bus's NATS server.
const fleetServerName = "leaseledger-fleet"

// Space is one ledger a fleet bus serves, in its host's space.
type Space struct {
	// HostID is the host whose space the ledger is served in: a valid id
	// (events.ValidID), unique among the fleet's spaces.
	HostID string
	// Ledger's events are published as they commit (ledger.Watch: imports
	// of a mirror included) and it answers replay and head.
	Ledger *ledger.Ledger
	// Services are served in HostID's space (like Options.Services with
	// Options.HostID); AccessRead only.
	Services []Service
}

// FleetOptions configures StartFleet. The fields shared with Options
// mean the same there.
type FleetOptions struct {
	// Host to listen on; 127.0.0.1 when empty.
	Host string
	// Port to listen on; DefaultPort when zero, RandomPort for any free port.
	Port int
	// WebSocketPort, when non-zero, also serves NATS over WebSocket on Host;
	// RandomPort for any free port.
	WebSocketPort int
	// ReadOnlyUser and ReadOnlyPassword, when set, add a named user that may
	// subscribe to every space's events and call every space's read API.
	ReadOnlyUser, ReadOnlyPassword string
	// DenyAnonymous refuses unauthenticated clients (admitted read-only by
	// default).
	DenyAnonymous bool
	// Spaces are the ledgers served: 1 to MaxFleetSpaces (0 to
	// MaxFleetSpaces with AddSpaces).
	Spaces []Space
	// AddSpaces lets Fleet.AddSpace add spaces while the fleet runs, up to
	// MaxFleetSpaces in all (a collector that discovers hosts).
	AddSpaces bool
	// SpaceServices are services a space added later may serve besides
	// those of Spaces: only their subjects and access matter here (every
	// client's permissions are fixed at the start), the handlers are the
	// added space's own.
	SpaceServices []Service
	// Services are fleet-level request/reply APIs, served in the bare
	// space (e.g. leaseledger.api.fleet.status); AccessRead only.
	Services []Service
	// Limits bound what clients may cost the fleet bus (limits.go).
	Limits Limits
	// ReplayChunkEvents and ReplayChunkBytes bound one replay reply, as
	// Options' (the anonymous and read-only classes' bounds apply).
	ReplayChunkEvents, ReplayChunkBytes int
	// Logger receives publication failures; slog.Default when nil.
	Logger *slog.Logger
}

// Fleet is a running fleet bus.
type Fleet struct {
	b      *Bus
	grow   bool              // FleetOptions.AddSpaces
	grants map[string]Access // service subjects the clients may call in any space

	mu     sync.Mutex // guards byHost, b.spaces and b.subs after the start, and closed
	byHost map[string]*space
	closed bool
}

// StartFleet starts a fleet bus serving opts.Spaces and starts publishing
// every event their ledgers commit from now on. Close it before the
// ledgers. Its errors are *Error; invalid options wrap ErrOptions.
func StartFleet(opts FleetOptions) (*Fleet, error) {
	refuse := func(format string, a ...any) (*Fleet, error) {
		return nil, &Error{Op: "start fleet", Err: fmt.Errorf("%w: "+format, append([]any{ErrOptions}, a...)...)}
	}
	if len(opts.Spaces) == 0 && !opts.AddSpaces {
		return refuse("a fleet bus needs at least one space")
	}
	if len(opts.Spaces) > MaxFleetSpaces {
		return refuse("%d spaces, at most MaxFleetSpaces=%d", len(opts.Spaces), MaxFleetSpaces)
	}
	o := Options{Host: opts.Host, Port: opts.Port, WebSocketPort: opts.WebSocketPort,
		ReadOnlyUser: opts.ReadOnlyUser, ReadOnlyPassword: opts.ReadOnlyPassword, DenyAnonymous: opts.DenyAnonymous,
		Limits: opts.Limits, ReplayChunkEvents: opts.ReplayChunkEvents, ReplayChunkBytes: opts.ReplayChunkBytes, Logger: opts.Logger}
	if err := prepare(&o); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(opts.Spaces))
	var union []Service // every space's service subjects, once
	unionSeen := map[string]bool{}
	for i, s := range opts.Spaces {
		switch {
		case !events.ValidID(s.HostID):
			return refuse("space %d: the host id must match %s", i, events.IDRule)
		case seen[s.HostID]:
			return refuse("space %d: host %s has two spaces", i, s.HostID)
		case s.Ledger == nil:
			return refuse("space %d (host %s) has no ledger", i, s.HostID)
		}
		seen[s.HostID] = true
		if err := validateServices(s.Services, "", o.Limits.MaxPayload); err != nil {
			return nil, &Error{Op: "start fleet", Subject: busclient.HostSubject(s.HostID, busclient.APISubjects), Err: err}
		}
		for _, svc := range s.Services {
			if !unionSeen[svc.Subject] {
				unionSeen[svc.Subject] = true
				union = append(union, svc)
			}
		}
	}
	if err := validateServices(opts.SpaceServices, "", o.Limits.MaxPayload); err != nil {
		return nil, &Error{Op: "start fleet", Err: err}
	}
	for _, svc := range opts.SpaceServices {
		if !unionSeen[svc.Subject] {
			unionSeen[svc.Subject] = true
			union = append(union, svc)
		}
	}
	if err := validateServices(opts.Services, "", o.Limits.MaxPayload); err != nil {
		return nil, &Error{Op: "start fleet", Err: err}
	}
	anyHost := func(subject string) string { return busclient.HostSubject(events.Wildcard, subject) }
	g := grants{
		q: anyHost,
		services: func(c class, user string) []string {
			return append(servicePublish(union, events.Wildcard, c, user), servicePublish(opts.Services, "", c, user)...)
		},
		api:        []string{anyHost(busclient.APISubjects), busclient.APISubjects},
		serverName: fleetServerName,
	}
	b, err := newServer(o, g)
	if err != nil {
		return nil, err
	}
	f := &Fleet{b: b, grow: opts.AddSpaces, grants: map[string]Access{}, byHost: make(map[string]*space, len(opts.Spaces))}
	for _, svc := range union {
		f.grants[svc.Subject] = svc.Access
	}
	for _, s := range opts.Spaces {
		sp := &space{b: b, host: s.HostID, l: s.Ledger, services: s.Services, logHost: true}
		b.spaces = append(b.spaces, sp)
		f.byHost[s.HostID] = sp
	}
	if len(opts.Services) > 0 {
		b.spaces = append(b.spaces, &space{b: b, services: opts.Services})
	}
	// One subscription per space (its API subjects), dispatching to the
	// handlers Start subscribes one by one: a fleet's thousands of request
	// subjects cost one subscription, and one goroutine, per space. A
	// request on a subject of the space that it does not serve (a service
	// only other spaces have) is not answered.
	for _, sp := range b.spaces {
		if err := b.subscribe(sp.subject(busclient.APISubjects), spaceDispatch(b, sp)); err != nil {
			return nil, err
		}
	}
	if err := b.watch(); err != nil {
		return nil, err
	}
	return f, nil
}

// spaceDispatch is the handler of sp's one subscription: it dispatches
// to the handlers Start subscribes one by one.
func spaceDispatch(b *Bus, sp *space) nats.MsgHandler {
	handlers := map[string]nats.MsgHandler{}
	b.spaceHandlers(sp, handlers)
	return func(m *nats.Msg) {
		if h := handlers[m.Subject]; h != nil {
			h(m)
		}
	}
}

// AddSpace serves s while the fleet runs (FleetOptions.AddSpaces), as a
// space given at the start: its API is answered once AddSpace returns
// and every event its ledger commits from then on is published. Its
// services must be among those granted at the start (the subjects and
// access of FleetOptions.Spaces' or SpaceServices'). Its error is an
// *Error wrapping ErrOptions (invalid, repeated, not granted, beyond
// MaxFleetSpaces, or spaces are not added on this fleet) or ErrClosed.
func (f *Fleet) AddSpace(s Space) error {
	refuse := func(err error) error {
		return &Error{Op: "add space", Subject: busclient.HostSubject(s.HostID, busclient.APISubjects), Err: err}
	}
	switch {
	case !f.grow:
		return refuse(fmt.Errorf("%w: the fleet bus was started without AddSpaces", ErrOptions))
	case !events.ValidID(s.HostID):
		return refuse(fmt.Errorf("%w: the host id must match %s", ErrOptions, events.IDRule))
	case s.Ledger == nil:
		return refuse(fmt.Errorf("%w: host %s has no ledger", ErrOptions, s.HostID))
	}
	if err := validateServices(s.Services, "", f.b.opts.Limits.MaxPayload); err != nil {
		return refuse(err)
	}
	for _, svc := range s.Services {
		if a, ok := f.grants[svc.Subject]; !ok || a != svc.Access {
			return refuse(fmt.Errorf("%w: service %s was not granted at the start (FleetOptions.SpaceServices)", ErrOptions, svc.Subject))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return refuse(ErrClosed)
	case f.byHost[s.HostID] != nil:
		return refuse(fmt.Errorf("%w: host %s has a space", ErrOptions, s.HostID))
	case len(f.byHost) >= MaxFleetSpaces:
		return refuse(fmt.Errorf("%w: %d spaces, at most MaxFleetSpaces=%d", ErrOptions, len(f.byHost), MaxFleetSpaces))
	}
	b := f.b
	sp := &space{b: b, host: s.HostID, l: s.Ledger, services: s.Services, logHost: true}
	sub, err := b.api.Subscribe(sp.subject(busclient.APISubjects), spaceDispatch(b, sp))
	if err == nil {
		err = b.api.Flush()
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return refuse(err)
	}
	b.subs = append(b.subs, sub)
	sp.unwatch = sp.l.Watch(&spaceWatch{sp: sp, msg: newPubMsg()})
	b.spaces = append(b.spaces, sp)
	f.byHost[s.HostID] = sp
	return nil
}

// ClientURL is the nats:// URL clients connect to.
func (f *Fleet) ClientURL() string { return f.b.ClientURL() }

// WebSocketURL is the ws:// URL, or "" when WebSocket is off.
func (f *Fleet) WebSocketURL() string { return f.b.WebSocketURL() }

// Server exposes the embedded server (in-process clients, monitoring).
func (f *Fleet) Server() *server.Server { return f.b.Server() }

// AuthStats returns the fleet bus's authentication counters.
func (f *Fleet) AuthStats() AuthStats { return f.b.AuthStats() }

// PublishCheckpoint publishes a host's signed checkpoint on
// HostSubject(host, busclient.CheckpointSubject) (the fleet bus's own
// connection is the only one allowed to). host must be one of the
// fleet's spaces (else ErrOptions). Its error is an *Error.
func (f *Fleet) PublishCheckpoint(host string, signed []byte) error {
	f.mu.Lock()
	sp := f.byHost[host]
	f.mu.Unlock()
	if sp == nil {
		return &Error{Op: "publish checkpoint", Err: fmt.Errorf("%w: the fleet bus has no space for host %q", ErrOptions, host)}
	}
	return sp.publishCheckpoint(signed)
}

// Close stops the API, waits for the service calls it is serving (their
// ctx is cancelled), stops publication and shuts the server down. Close
// the fleet bus before the ledgers. It is idempotent.
func (f *Fleet) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return f.b.Close()
}
