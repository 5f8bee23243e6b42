package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// grants is what differs between the server of a Bus (one host's space,
// writable) and of a Fleet (every host's space, read-only) in its users'
// permissions; the users, their classes and limits are the same code.
type grants struct {
	// q puts a protocol subject in the served space: the host's (Start) or
	// every host's, the host a wildcard (StartFleet).
	q func(subject string) string
	// services are the service request subjects a user of class c may
	// publish to (user "" for anonymous clients).
	services func(c class, user string) []string
	// api are the subjects the API responder subscribes to.
	api []string
	// deny are the subjects no route or leaf connection may publish into
	// (hostDeny; nil when never clustered).
	deny []string
	// serverName names the NATS server ("" for the default).
	serverName string
}

// newServer starts the embedded server of opts (already prepared) with the
// bus's users — its own publisher and API responder, the named users of
// opts, anonymous clients unless denied — permitted as g says, and connects
// the publisher and the responder. The caller adds the spaces.
func newServer(opts Options, g grants) (*Bus, error) {
	q := g.q
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
			Publish:   &server.SubjectPermission{Allow: append(publish, g.services(c, user)...)},
			Subscribe: &server.SubjectPermission{Allow: []string{q(busclient.EventSubjects()), q(busclient.CheckpointSubject), busclient.InboxPrefix(user) + ".>"}},
		}
	}
	// The API responder is a connection of its own that may publish only to
	// inboxes: a request naming an event subject as its reply subject cannot
	// make the ledger publish there.
	apiPublish := []string{busclient.InboxPrefix("") + ".>", peerInboxPrefix() + ".>"}
	users := []*server.User{
		{Username: internalUser, Password: internalPass, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{q(busclient.EventSubjects()), q(busclient.CheckpointSubject), q(busclient.AnnounceSubject)}},
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
		Subscribe: &server.SubjectPermission{Allow: g.api},
	}})
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
		ServerName:                 g.serverName,
	}
	if err := clusterConfig(sopts, g.deny, opts.Cluster, opts.TLS); err != nil {
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
	if !startServer(srv, 10*time.Second) {
		return nil, &Error{Op: "start", Err: fmt.Errorf("not ready to accept connections on %s:%d", opts.Host, opts.Port)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bus{srv: srv, opts: opts, ctx: ctx, cancel: cancel, appendSlots: make(chan struct{}, opts.MaxConcurrentAppends),
		auth: auth, limiter: &rateLimiter{lim: opts.Limits, conns: map[string]*connBucket{}}}
	for c := range b.callSlots {
		b.callSlots[c] = make(chan struct{}, opts.Limits.ServiceConcurrency)
	}
	if b.nc, err = busclient.Connect("", nats.InProcessServer(srv), nats.UserInfo(internalUser, internalPass), nats.Name("leaseledger-publisher")); err == nil {
		b.api, err = busclient.Connect("", nats.InProcessServer(srv), nats.UserInfo(apiUser, apiPass), nats.Name("leaseledger-api"))
	}
	if err != nil {
		b.Close()
		return nil, &Error{Op: "start", Err: err}
	}
	return b, nil
}

// startServer starts srv and reports whether it is ready for connections
// within timeout; a server that is not is shut down. Start returns once
// its listeners are open (the accept loops run on goroutines of their
// own), so ReadyForConnections finds them at its first look: started on a
// goroutine instead, the server is almost never ready then, and
// ReadyForConnections sleeps its 25 ms polling interval before it looks
// again — a quarter of serve's start-up (leaseledger bench startup).
func startServer(srv *server.Server, timeout time.Duration) bool {
	srv.Start()
	if srv.ReadyForConnections(timeout) {
		return true
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	return false
}
