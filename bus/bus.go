// Package bus is the server side of the ledger's NATS bus: an embedded
// NATS server on which every committed event is published after its fsync
// (and the signed checkpoints its host hands to PublishCheckpoint), the
// users and permissions of that server, and the request/reply API it
// answers (replay, head, append).
//
// The protocol — API subjects, headers, request and reply bodies, user
// options, the append limit — belongs to package bus/busclient, which
// also holds the clients (Client: head, replay, tail, raw append; Appender:
// the ledger's Append, remotely) and links neither this server nor the log.
// Event subjects come from package events (events.Subject).
//
// With Options.HostID every subject of the bus is in the host's space of a
// fleet (busclient.HostSubject), and Options.Cluster joins it to the
// fleet's NATS cluster or hubs (cluster.go); a Peer (peer.go) is a server
// of that cluster without a ledger.
//
// One server may carry several ledgers, each a space (space.go) with its
// host's subjects, and the same users, limits and handlers (server.go):
// Start serves one, writable; StartFleet (fleet.go) serves up to
// MaxFleetSpaces read-only, never clustered — the collector's fleet bus,
// on which clients read every mirrored host as they read the host itself.
//
// Other packages add request/reply APIs of their own as Services
// (services.go), served under the same rules; the control user
// (Options.ControlUser) is the only one that may call AccessControl ones.
package bus

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Replay chunk bounds. A chunk holds at least one event, so MaxEventBytes
// must fit: NATS' default max payload is 1 MiB.
const (
	// DefaultReplayChunkEvents bounds events per replay reply.
	DefaultReplayChunkEvents = 1024
	// DefaultReplayChunkBytes bounds the body of one replay reply.
	DefaultReplayChunkBytes = 512 << 10
	// DefaultPort is the client port `serve` listens on by default.
	DefaultPort = 4248
	// RandomPort asks the bus to pick a free port (tests).
	RandomPort = -1
)

// Options configures Start.
type Options struct {
	// Host to listen on; 127.0.0.1 when empty. Loopback by default: the bus
	// is for the local host and its dashboards.
	Host string
	// Port to listen on; DefaultPort when zero, RandomPort for any free port.
	Port int
	// WebSocketPort, when non-zero, also serves NATS over WebSocket (for
	// browser dashboards) on Host; RandomPort for any free port.
	WebSocketPort int
	// ReadOnlyUser and ReadOnlyPassword, when set, add a named user that may
	// subscribe to events and call the replay/head API but publish nothing
	// else.
	ReadOnlyUser, ReadOnlyPassword string
	// WriterUser and WriterPassword, when set, add a named user that may
	// also append through busclient.AppendSubject. Nobody else may append
	// over NATS.
	WriterUser, WriterPassword string
	// ControlUser and ControlPassword, when set, add a named user that may
	// read like the read-only user and is the only one that may call
	// AccessControl services (the runtime's control API).
	ControlUser, ControlPassword string
	// Services are request/reply APIs served besides replay, head and
	// append (services.go); Start refuses invalid or colliding subjects.
	Services []Service
	// MaxConcurrentAppends bounds append requests served at once;
	// DefaultMaxConcurrentAppends when zero. More wait (NATS buffers them).
	MaxConcurrentAppends int
	// DenyAnonymous refuses unauthenticated clients. By default they are
	// admitted with the same read-only permissions: only the ledger itself
	// ever publishes on event subjects.
	DenyAnonymous bool
	// ReplayChunkEvents and ReplayChunkBytes bound one replay reply to the
	// writer user (anonymous and read-only users get smaller chunks, see
	// limits.go).
	ReplayChunkEvents, ReplayChunkBytes int
	// Limits bound connections, unread data, payloads, request rates and
	// password guessing (limits.go, auth.go); zero fields take defaults.
	Limits Limits
	// Logger receives publication failures; slog.Default when nil.
	Logger *slog.Logger
	// HostID, when set, names the host of this ledger in a fleet: every
	// subject of the bus (event and checkpoint publications, API and
	// service requests, permissions) is in the host's space
	// (busclient.HostSubject). It must be a valid id (events.ValidID);
	// "" is the bare space of a single host.
	HostID string
	// Cluster joins the bus to a NATS cluster (routes) or to hubs (leaf
	// node remotes); zero: standalone (cluster.go). Needs HostID.
	Cluster ClusterOptions
	// TLS, when set, requires TLS on the client port (cluster.go).
	TLS *TLSFiles
	// AnnounceInterval is how often a clustered bus (HostID and Cluster
	// set) announces its host on HostSubject(HostID,
	// busclient.AnnounceSubject) (announce.go): once at the start, then
	// every interval; DefaultAnnounceInterval when zero, never when
	// negative. An unclustered bus never announces.
	AnnounceInterval time.Duration
}

// Bus is the embedded NATS server of a ledger: it publishes every committed
// event after its fsync and serves the replay and head APIs.
type Bus struct {
	srv    *server.Server
	nc     *nats.Conn     // publishes events
	api    *nats.Conn     // answers API requests
	l      *ledger.Ledger // Start's ledger (appends); nil on a fleet
	opts   Options
	spaces []*space // the ledgers it serves, each in its host's space (space.go)
	subs   []*nats.Subscription

	ctx         context.Context // ends when the bus closes
	cancel      context.CancelFunc
	appendSlots chan struct{} // semaphore: appends being served
	appendsMu   sync.Mutex    // guards closing against appends.Add
	closing     bool
	appends     sync.WaitGroup

	auth    *authenticator // client authentication (auth.go)
	limiter *rateLimiter   // API request rates (limits.go)

	callSlots [numClasses]chan struct{} // per class: service calls being served (services.go)
	calls     sync.WaitGroup            // service calls taken in (added under appendsMu)
	announcer sync.WaitGroup            // the announcing goroutine (announce.go)
}

// DefaultMaxConcurrentAppends bounds append requests served at once. Each
// waits for its own fsync, so concurrency is what lets them share one.
const DefaultMaxConcurrentAppends = 256

// Start starts an embedded NATS server, connects the ledger to it and
// starts publishing every event committed from now on. Close it before the
// ledger.
func Start(l *ledger.Ledger, opts Options) (*Bus, error) {
	if err := prepare(&opts); err != nil {
		return nil, err
	}
	q := func(subject string) string { return busclient.HostSubject(opts.HostID, subject) }
	g := grants{
		q:        q,
		services: func(c class, user string) []string { return servicePublish(opts.Services, opts.HostID, c, user) },
		api:      []string{q(busclient.APISubjects)},
		deny:     hostDeny(&opts),
	}
	if opts.HostID != "" {
		g.serverName = "leaseledger-host-" + opts.HostID
	}
	b, err := newServer(opts, g)
	if err != nil {
		return nil, err
	}
	b.l = l
	sp := &space{b: b, host: opts.HostID, l: l, services: opts.Services}
	b.spaces = []*space{sp}
	// Each class of requester has request subjects of its own, which the
	// permissions (newServer) let only that class publish to (the anonymous
	// subjects are the bare ones): the subject, not the reply inbox (which
	// NATS does not check), decides a request's class.
	handlers := map[string]nats.MsgHandler{}
	b.spaceHandlers(sp, handlers)
	for subj, h := range handlers {
		if err := b.subscribe(subj, h); err != nil {
			return nil, err
		}
	}
	if err := b.watch(); err != nil {
		return nil, err
	}
	b.startAnnouncing()
	return b, nil
}

// prepare applies Options' defaults and checks what every server of the
// package (Start's, StartFleet's) needs: host id, users, limits, services.
func prepare(opts *Options) error {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	if opts.ReplayChunkEvents <= 0 {
		opts.ReplayChunkEvents = DefaultReplayChunkEvents
	}
	if opts.ReplayChunkBytes <= 0 {
		opts.ReplayChunkBytes = DefaultReplayChunkBytes
	}
	if opts.ReplayChunkBytes < events.MaxEventBytes {
		opts.ReplayChunkBytes = events.MaxEventBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HostID != "" && !events.ValidID(opts.HostID) {
		return &Error{Op: "start", Err: fmt.Errorf("%w: the host id must match %s", ErrOptions, events.IDRule)}
	}
	if opts.HostID == "" && opts.Cluster.enabled() {
		return &Error{Op: "start", Err: fmt.Errorf("%w: a clustered bus (routes or leaf remotes) needs a host id: hosts in the bare space would collide", ErrOptions)}
	}
	for _, u := range []struct{ name, pass, flag string }{
		{opts.ReadOnlyUser, opts.ReadOnlyPassword, "read-only"}, {opts.WriterUser, opts.WriterPassword, "writer"}, {opts.ControlUser, opts.ControlPassword, "control"}} {
		if u.name == "" {
			continue
		}
		if !events.ValidID(u.name) || u.name == internalUser || u.name == apiUser || u.name == anonymousUser {
			return &Error{Op: "start", Err: fmt.Errorf("%w: the %s user name must match %s and not be reserved", ErrOptions, u.flag, events.IDRule)}
		}
		if u.pass == "" {
			return &Error{Op: "start", Err: fmt.Errorf("%w: the %s user needs a password", ErrOptions, u.flag)}
		}
	}
	if opts.WriterUser != "" && opts.WriterUser == opts.ReadOnlyUser ||
		opts.ControlUser != "" && (opts.ControlUser == opts.ReadOnlyUser || opts.ControlUser == opts.WriterUser) {
		return &Error{Op: "start", Err: fmt.Errorf("%w: the writer, read-only and control users must differ", ErrOptions)}
	}
	if opts.MaxConcurrentAppends <= 0 {
		opts.MaxConcurrentAppends = DefaultMaxConcurrentAppends
	}
	opts.Limits = opts.Limits.withDefaults(opts.ReplayChunkBytes)
	if err := validateServices(opts.Services, opts.ControlUser, opts.Limits.MaxPayload); err != nil {
		return &Error{Op: "start", Err: err}
	}
	if opts.Limits.ReservedNamedConnections >= opts.Limits.MaxConnections-2 {
		return &Error{Op: "start", Err: fmt.Errorf("%w: the connections reserved for named users (%d) must leave room below the maximum (%d)", ErrOptions, opts.Limits.ReservedNamedConnections, opts.Limits.MaxConnections)}
	}
	return nil
}

// subscribe makes the API responder answer subj with h (a step of a
// start: on failure the bus is closed).
func (b *Bus) subscribe(subj string, h nats.MsgHandler) error {
	sub, err := b.api.Subscribe(subj, h)
	if err != nil {
		b.Close()
		return &Error{Op: "start", Subject: subj, Err: err}
	}
	b.subs = append(b.subs, sub)
	return nil
}

// watch starts publishing the commits of every space with a ledger (the
// last step of a start: on failure the bus is closed).
func (b *Bus) watch() error {
	if err := b.api.Flush(); err != nil {
		b.Close()
		return &Error{Op: "start", Err: err}
	}
	for _, sp := range b.spaces {
		if sp.l != nil {
			sp.unwatch = sp.l.Watch(&spaceWatch{sp: sp, msg: newPubMsg()})
		}
	}
	return nil
}

// Reserved user names of the bus.
const (
	internalUser  = "leaseledger"           // publishes events
	apiUser       = "leaseledger-api"       // answers API requests
	anonymousUser = "leaseledger-anonymous" // unauthenticated clients
)

// isInbox reports whether a reply subject is an inbox (busclient.InboxPrefix
// of some user, or the anonymous one): the API answers nothing else (the
// server would refuse it anyway).
func isInbox(subject string) bool { return strings.HasPrefix(subject, busclient.InboxPrefix("")) }

func randomSecret() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", &Error{Op: "start", Err: err}
	}
	return hex.EncodeToString(b[:]), nil
}

// HostID is the host whose space the bus serves ("" for the bare space).
func (b *Bus) HostID() string { return b.opts.HostID }

// ClientURL is the nats:// URL clients connect to.
func (b *Bus) ClientURL() string { return b.srv.ClientURL() }

// WebSocketURL is the ws:// URL, or "" when WebSocket is off.
func (b *Bus) WebSocketURL() string {
	if b.opts.WebSocketPort == 0 {
		return ""
	}
	return b.srv.WebsocketURL()
}

// Server exposes the embedded server (for in-process clients in tests and
// embedding hosts: busclient.Connect("", nats.InProcessServer(b.Server()))).
func (b *Bus) Server() *server.Server { return b.srv }

// Committed implements ledger.Observer: it publishes each event on its
// subject. The bus publishes its ledger's commits itself (on its own Watch
// goroutine, never delaying an ack); a caller's Committed publishes with a
// message of its own, so it may run from any goroutine concurrently with
// that (TestCommittedConcurrentWithWatch). A failure is logged, and
// subscribers recover through replay.
func (b *Bus) Committed(batch []ledger.Record) { b.spaces[0].Committed(batch) }

// PublishCheckpoint publishes a signed checkpoint on
// busclient.CheckpointSubject (the bus's own connection is the only one
// allowed to). Its error is an *Error (the bus closed, NATS failed).
func (b *Bus) PublishCheckpoint(signed []byte) error { return b.spaces[0].publishCheckpoint(signed) }

// Lagged implements ledger.Lagger: publication fell ledger.ObserverQueueLen
// batches behind and events from..to are not published; subscribers fill the
// hole by replay (busclient.Client.Tail).
func (b *Bus) Lagged(from, to ledger.Seq) { b.spaces[0].Lagged(from, to) }

// Close stops the API, waits for the appends it is serving (they finish:
// the ledger is still open) and for the service calls it is serving (their
// ctx is cancelled), stops publication and shuts the server down.
// Close the bus before the ledger. It is idempotent.
func (b *Bus) Close() error {
	b.appendsMu.Lock()
	already := b.closing
	b.closing = true
	b.appendsMu.Unlock()
	if already {
		return nil
	}
	for _, sub := range b.subs {
		_ = sub.Unsubscribe()
	}
	b.cancel()       // releases handlers waiting for an append or service slot
	b.appends.Wait() // every append taken in has been answered
	b.calls.Wait()   // every service call taken in has returned (its ctx ended)
	b.announcer.Wait()
	for _, sp := range b.spaces {
		if sp.unwatch != nil {
			sp.unwatch() // waits for a publication in progress
		}
	}
	for _, c := range []*nats.Conn{b.api, b.nc} {
		if c != nil {
			_ = c.FlushTimeout(time.Second)
			c.Close()
		}
	}
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
	return nil
}
