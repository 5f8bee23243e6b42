// Package bus is the server side of the ledger's NATS bus: an embedded
// NATS server on which every committed event is published after its fsync
// (and the signed checkpoints its host hands to PublishCheckpoint), the users and permissions of that server, and the request/reply API it
// answers (replay, head, append).
//
// The protocol — API subjects, headers, request and reply bodies, user
// options, the append limit — belongs to package ledger/busclient, which
// also holds the clients (Client: head, replay, tail, raw append; Appender:
// the ledger's Append, remotely) and links neither this server nor the log.
// Event subjects come from package events (events.Subject).
//
// With Options.HostID every subject of the bus is in the host's space of a
// fleet (busclient.HostSubject), and Options.Cluster joins it to the
// fleet's NATS cluster or hubs (cluster.go); a Peer (peer.go) is a server
// of that cluster without a ledger.
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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/busclient"
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
}

// Bus is the embedded NATS server of a ledger: it publishes every committed
// event after its fsync and serves the replay and head APIs.
type Bus struct {
	srv     *server.Server
	nc      *nats.Conn // publishes events
	api     *nats.Conn // answers API requests
	l       *ledger.Ledger
	opts    Options
	unwatch func()
	subs    []*nats.Subscription

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
}

// DefaultMaxConcurrentAppends bounds append requests served at once. Each
// waits for its own fsync, so concurrency is what lets them share one.
const DefaultMaxConcurrentAppends = 256

// Start starts an embedded NATS server, connects the ledger to it and
// starts publishing every event committed from now on. Close it before the
// ledger.
func Start(l *ledger.Ledger, opts Options) (*Bus, error) {
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
		return nil, &Error{Op: "start", Err: fmt.Errorf("%w: the host id must match %s", ErrOptions, events.IDRule)}
	}
	if opts.HostID == "" && opts.Cluster.enabled() {
		return nil, &Error{Op: "start", Err: fmt.Errorf("%w: a clustered bus (routes or leaf remotes) needs a host id: hosts in the bare space would collide", ErrOptions)}
	}
	q := func(subject string) string { return busclient.HostSubject(opts.HostID, subject) }
	for _, u := range []struct{ name, pass, flag string }{
		{opts.ReadOnlyUser, opts.ReadOnlyPassword, "read-only"}, {opts.WriterUser, opts.WriterPassword, "writer"}, {opts.ControlUser, opts.ControlPassword, "control"}} {
		if u.name == "" {
			continue
		}
		if !events.ValidID(u.name) || u.name == internalUser || u.name == apiUser || u.name == anonymousUser {
			return nil, &Error{Op: "start", Err: fmt.Errorf("%w: the %s user name must match %s and not be reserved", ErrOptions, u.flag, events.IDRule)}
		}
		if u.pass == "" {
			return nil, &Error{Op: "start", Err: fmt.Errorf("%w: the %s user needs a password", ErrOptions, u.flag)}
		}
	}
	if opts.WriterUser != "" && opts.WriterUser == opts.ReadOnlyUser ||
		opts.ControlUser != "" && (opts.ControlUser == opts.ReadOnlyUser || opts.ControlUser == opts.WriterUser) {
		return nil, &Error{Op: "start", Err: fmt.Errorf("%w: the writer, read-only and control users must differ", ErrOptions)}
	}
	if opts.MaxConcurrentAppends <= 0 {
		opts.MaxConcurrentAppends = DefaultMaxConcurrentAppends
	}
	internalPass, err := randomSecret()
	if err != nil {
		return nil, err
	}
	apiPass, err := randomSecret()
	if err != nil {
		return nil, err
	}
	// Every named user receives replies on its own inbox prefix (see
	// busclient.InboxPrefix), so no user can read another's replies; anonymous
	// clients share the default _INBOX prefix among themselves.
	client := func(c class, user string, publish ...string) *server.Permissions {
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: append(publish, servicePublish(opts.Services, opts.HostID, c, user)...)},
			Subscribe: &server.SubjectPermission{Allow: []string{q(busclient.EventSubjects()), q(busclient.CheckpointSubject), busclient.InboxPrefix(user) + ".>"}},
		}
	}
	// The API responder is a connection of its own that may publish only to
	// inboxes: a request naming an event subject as its reply subject cannot
	// make the ledger publish there.
	apiPublish := []string{busclient.InboxPrefix("") + ".>"}
	users := []*server.User{
		{Username: internalUser, Password: internalPass, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{q(busclient.EventSubjects()), q(busclient.CheckpointSubject)}},
			Subscribe: &server.SubjectPermission{Deny: []string{">"}},
		}},
	}
	if opts.ReadOnlyUser != "" {
		users = append(users, &server.User{Username: opts.ReadOnlyUser, Password: opts.ReadOnlyPassword,
			Permissions: client(classReadOnly, opts.ReadOnlyUser, busclient.UserSubject(q(busclient.ReplaySubject), opts.ReadOnlyUser), busclient.UserSubject(q(busclient.HeadSubject), opts.ReadOnlyUser))})
		apiPublish = append(apiPublish, busclient.InboxPrefix(opts.ReadOnlyUser)+".>")
	}
	if opts.WriterUser != "" {
		users = append(users, &server.User{Username: opts.WriterUser, Password: opts.WriterPassword,
			Permissions: client(classWriter, opts.WriterUser, busclient.UserSubject(q(busclient.ReplaySubject), opts.WriterUser), busclient.UserSubject(q(busclient.HeadSubject), opts.WriterUser), busclient.UserSubject(q(busclient.AppendSubject), opts.WriterUser))})
		apiPublish = append(apiPublish, busclient.InboxPrefix(opts.WriterUser)+".>")
	}
	if opts.ControlUser != "" {
		users = append(users, &server.User{Username: opts.ControlUser, Password: opts.ControlPassword,
			Permissions: client(classControl, opts.ControlUser, busclient.UserSubject(q(busclient.ReplaySubject), opts.ControlUser), busclient.UserSubject(q(busclient.HeadSubject), opts.ControlUser))})
		apiPublish = append(apiPublish, busclient.InboxPrefix(opts.ControlUser)+".>")
	}
	users = append(users, &server.User{Username: apiUser, Password: apiPass, Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: apiPublish},
		Subscribe: &server.SubjectPermission{Allow: []string{q(busclient.APISubjects)}},
	}})
	opts.Limits = opts.Limits.withDefaults(opts.ReplayChunkBytes)
	if err := validateServices(&opts); err != nil {
		return nil, &Error{Op: "start", Err: err}
	}
	if opts.Limits.ReservedNamedConnections >= opts.Limits.MaxConnections-2 {
		return nil, &Error{Op: "start", Err: fmt.Errorf("%w: the connections reserved for named users (%d) must leave room below the maximum (%d)", ErrOptions, opts.Limits.ReservedNamedConnections, opts.Limits.MaxConnections)}
	}
	auth := &authenticator{lim: opts.Limits.Auth, users: map[string]*server.User{}, failures: map[string]*bucket{},
		anonymousMax: opts.Limits.MaxConnections - opts.Limits.ReservedNamedConnections}
	for _, u := range users {
		auth.users[u.Username] = u
	}
	if !opts.DenyAnonymous {
		auth.anonymous = &server.User{Username: anonymousUser, Permissions: client(classAnonymous, "", q(busclient.ReplaySubject), q(busclient.HeadSubject))}
	}
	sopts := &server.Options{
		Host: opts.Host, Port: opts.Port, NoSigs: true, NoLog: true,
		MaxConn: opts.Limits.MaxConnections, MaxPending: opts.Limits.MaxPendingBytes,
		WriteDeadline: opts.Limits.WriteDeadline, MaxPayload: opts.Limits.MaxPayload,
		NoFastProducerStall:        true, // drop a slow reader's replies, never stall the responder
		CustomClientAuthentication: auth,
	}
	if opts.HostID != "" {
		sopts.ServerName = "leaseledger-host-" + opts.HostID
	}
	if err := clusterConfig(sopts, hostDeny(&opts), opts.Cluster, opts.TLS); err != nil {
		return nil, &Error{Op: "start", Err: err}
	}
	if opts.WebSocketPort != 0 {
		sopts.Websocket = server.WebsocketOpts{Host: opts.Host, Port: opts.WebSocketPort, NoTLS: true}
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, &Error{Op: "start", Err: err}
	}
	auth.clients = srv.NumClients
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, &Error{Op: "start", Err: fmt.Errorf("not ready to accept connections on %s:%d", opts.Host, opts.Port)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bus{srv: srv, l: l, opts: opts, ctx: ctx, cancel: cancel, appendSlots: make(chan struct{}, opts.MaxConcurrentAppends),
		auth: auth, limiter: &rateLimiter{lim: opts.Limits, conns: map[string]*connBucket{}}}
	for c := range b.callSlots {
		b.callSlots[c] = make(chan struct{}, opts.Limits.ServiceConcurrency)
	}
	if b.nc, err = nats.Connect("", nats.InProcessServer(srv), nats.UserInfo(internalUser, internalPass), nats.Name("leaseledger-publisher")); err == nil {
		b.api, err = nats.Connect("", nats.InProcessServer(srv), nats.UserInfo(apiUser, apiPass), nats.Name("leaseledger-api"))
	}
	if err != nil {
		b.Close()
		return nil, &Error{Op: "start", Err: err}
	}
	// Each class of requester has request subjects of its own, which the
	// permissions above let only that class publish to (the anonymous
	// subjects are the bare ones): the subject, not the reply inbox (which
	// NATS does not check), decides a request's class.
	handlers := map[string]nats.MsgHandler{}
	for _, r := range b.routes() {
		handlers[busclient.UserSubject(q(busclient.ReplaySubject), r.user)] = func(m *nats.Msg) { b.serveReplay(m, r) }
		handlers[busclient.UserSubject(q(busclient.HeadSubject), r.user)] = func(m *nats.Msg) { b.serveHead(m, r) }
		if r.class == classWriter {
			handlers[busclient.UserSubject(q(busclient.AppendSubject), r.user)] = func(m *nats.Msg) { b.serveAppend(m, r) }
		}
	}
	b.serviceHandlers(handlers)
	for subj, h := range handlers {
		sub, err := b.api.Subscribe(subj, h)
		if err != nil {
			b.Close()
			return nil, &Error{Op: "start", Subject: subj, Err: err}
		}
		b.subs = append(b.subs, sub)
	}
	if err := b.api.Flush(); err != nil {
		b.Close()
		return nil, &Error{Op: "start", Err: err}
	}
	b.unwatch = l.Watch(b)
	return b, nil
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

// subject is subject in the bus's host space (busclient.HostSubject).
func (b *Bus) subject(subject string) string { return busclient.HostSubject(b.opts.HostID, subject) }

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
// embedding hosts: nats.Connect("", nats.InProcessServer(b.Server()))).
func (b *Bus) Server() *server.Server { return b.srv }

// Committed implements ledger.Observer: it publishes each event on its subject,
// on the bus's own Watch goroutine (it never delays an ack); a failure is
// logged, and subscribers recover through replay.
func (b *Bus) Committed(batch []ledger.Record) {
	for i := range batch {
		r := &batch[i]
		msg := &nats.Msg{Subject: b.subject(r.Env.Subject()), Data: r.Raw, Header: nats.Header{
			busclient.HeaderMsgID: []string{r.Env.ID.String()},
			busclient.HeaderSeq:   []string{strconv.FormatUint(uint64(r.Env.Seq), 10)},
		}}
		if err := b.nc.PublishMsg(msg); err != nil {
			b.opts.Logger.Warn("bus: publish failed", "seq", r.Env.Seq, "err", err)
		}
	}
}

// PublishCheckpoint publishes a signed checkpoint on
// busclient.CheckpointSubject (the bus's own connection is the only one
// allowed to). Its error is an *Error (the bus closed, NATS failed).
func (b *Bus) PublishCheckpoint(signed []byte) error {
	if err := b.nc.Publish(b.subject(busclient.CheckpointSubject), signed); err != nil {
		return &Error{Op: "publish checkpoint", Subject: b.subject(busclient.CheckpointSubject), Err: err}
	}
	return nil
}

// Lagged implements ledger.Lagger: publication fell ledger.ObserverQueueLen
// batches behind and events from..to are not published; subscribers fill the
// hole by replay (busclient.Client.Tail).
func (b *Bus) Lagged(from, to ledger.Seq) {
	b.opts.Logger.Warn("bus: publication fell behind; events left to replay", "from", from, "to", to)
}

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
	if b.unwatch != nil {
		b.unwatch() // waits for a publication in progress
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
