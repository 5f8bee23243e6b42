package bus

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A Peer is a server of the fleet's cluster without a ledger: the
// collector joins the cluster through one to read every host's space.
//
// Guarantees (tests in cluster_test.go and cluster_leak_test.go):
//   - A Peer must join something (routes, a route listener or leaf
//     remotes): otherwise ErrOptions (TestClusterOptionsRefused).
//   - Connect gives an in-process connection with every permission
//     (TestHostSpacesOnCluster, TestPeerLeafOfHub).
//   - No client port unless PeerOptions.Port asks for one: with Port 0
//     ClientURL is "" and no network client is admitted; a peer without a
//     route listener listens nowhere, one with a route listener keeps a
//     loopback client listener that refuses every client (the embedded
//     NATS server starts routing only once its client listener is up)
//     (TestPeerClientPortOff, TestPeerLeafOfHub).
//   - Connect's connections receive their replies on the peer inbox prefix
//     ("_INBOX_~peer", not under the default _INBOX), which no host's local
//     client nor the peer's client-port clients may subscribe to
//     (TestPeerRepliesNotForLocalClients).
//   - The client port admits anonymous clients that may only read:
//     subscribe to every host's events and checkpoints and call every
//     host's bare replay and head API (TestPeerClientPortReadOnly). They
//     share the default _INBOX, which the peer imports from every route:
//     one subscribed to all of it also receives the anonymous-class
//     replies of every host to the other client-port clients (replay, head
//     and AccessRead services), never a named user's nor Connect's.

// peerStartTimeout bounds how long StartPeer waits for the server to listen.
const peerStartTimeout = 10 * time.Second

// PeerOptions configures StartPeer.
type PeerOptions struct {
	// Host the client port listens on; 127.0.0.1 when empty.
	Host string
	// Port is the client port: 0 for none (the default; Connect works
	// without one), RandomPort for any free port. Its clients are
	// read-only (see the guarantees above).
	Port int
	// Cluster is how the peer joins the fleet (routes and/or leaf remotes).
	Cluster ClusterOptions
	// Logger receives the peer's start and stop; slog.Default when nil.
	Logger *slog.Logger
}

// Peer is an embedded NATS server in the fleet's cluster with no ledger.
type Peer struct {
	srv    *server.Server
	port   bool   // a client port was asked for (PeerOptions.Port != 0)
	token  string // authenticates Connect's connections
	logger *slog.Logger
}

// Reserved user names of a Peer.
const (
	peerUser          = "leaseledger-peer"           // Connect: every permission
	peerAnonymousUser = "leaseledger-peer-anonymous" // network clients: read-only
)

// StartPeer starts a Peer that joins the cluster of opts.Cluster. Close it
// when done.
func StartPeer(opts PeerOptions) (*Peer, error) {
	if !opts.Cluster.enabled() {
		return nil, &Error{Op: "start peer", Err: fmt.Errorf("%w: a peer needs a cluster listen address, routes or leaf remotes", ErrOptions)}
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	token, err := randomSecret()
	if err != nil {
		return nil, err
	}
	anyHost := func(s string) string { return busclient.HostSubject(events.Wildcard, s) }
	auth := &peerAuth{token: token, full: &server.User{Username: peerUser},
		anonymous: &server.User{Username: peerAnonymousUser, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{anyHost(busclient.ReplaySubject), anyHost(busclient.HeadSubject)}},
			Subscribe: &server.SubjectPermission{Allow: []string{busclient.FleetEventSubjects(), anyHost(busclient.CheckpointSubject), busclient.InboxPrefix("") + ".>"}},
		}}}
	sopts := &server.Options{
		Host: opts.Host, Port: opts.Port, NoSigs: true, NoLog: true,
		NoFastProducerStall: true, CustomClientAuthentication: auth,
	}
	if err := clusterConfig(sopts, nil, opts.Cluster, nil); err != nil {
		return nil, &Error{Op: "start peer", Err: err}
	}
	if opts.Port == 0 {
		// No client port: without routes the server need not listen;
		// routing waits for the client listener, so a route listener
		// keeps one on loopback that admits no network client.
		auth.anonymous = nil
		sopts.Host, sopts.Port, sopts.DontListen = "127.0.0.1", RandomPort, sopts.Cluster.Port == 0
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, &Error{Op: "start peer", Err: err}
	}
	if !startServer(srv, peerStartTimeout) {
		return nil, &Error{Op: "start peer", Err: fmt.Errorf("not ready within %v", peerStartTimeout)}
	}
	p := &Peer{srv: srv, port: opts.Port != 0, token: token, logger: opts.Logger}
	p.logger.Info("bus: peer started", "cluster", p.ClusterURL())
	return p, nil
}

// Connect opens an in-process connection to the peer with every
// permission (subscribe to any host's events, call any host's API): the
// connection the hosts' peer class is for (busclient.Client.WithPeerClass).
// Its reply inboxes use the peer inbox prefix; an inbox option in opts is
// overridden.
func (p *Peer) Connect(opts ...nats.Option) (*nats.Conn, error) {
	// A token, not a user name: busclient.NewClient takes a connection's
	// user name for its request subjects, and a peer calls the hosts' bare
	// or peer-class subjects, never a named user's.
	// Replies come to the peer inbox prefix, which no host's local client
	// may subscribe to (peerInboxPrefix); opts cannot change it.
	all := append([]nats.Option{nats.InProcessServer(p.srv), nats.Token(p.token)}, opts...)
	all = append(all, nats.CustomInboxPrefix(peerInboxPrefix()))
	// busclient.ConnectOptions: the connection stays with this peer; it
	// never follows the cluster's advertised client URLs to a host.
	nc, err := busclient.Connect("", all...)
	if err != nil {
		return nil, &Error{Op: "peer connect", Err: err}
	}
	return nc, nil
}

// ClusterURL is the nats-route:// URL the peer accepts routes on, or ""
// when it only solicits (routes without a listen address are refused, so
// "" means leaf remotes only).
func (p *Peer) ClusterURL() string { return clusterURL(p.srv) }

// ClientURL is the nats:// URL of the peer's (read-only) client port, or
// "" when it has none (PeerOptions.Port 0).
func (p *Peer) ClientURL() string {
	if !p.port {
		return ""
	}
	return p.srv.ClientURL()
}

// Server exposes the embedded server (tests, monitoring).
func (p *Peer) Server() *server.Server { return p.srv }

// Close shuts the peer's server down. It is idempotent.
func (p *Peer) Close() error {
	p.srv.Shutdown()
	p.srv.WaitForShutdown()
	return nil
}

// peerAuth admits Connect's connections (by token) with every permission
// and every other client as the read-only anonymous user, or none when
// anonymous is nil (no client port).
type peerAuth struct {
	token           string
	full, anonymous *server.User
}

// Check implements server.Authentication.
func (a *peerAuth) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	switch {
	case o.Token != "" && subtle.ConstantTimeCompare([]byte(o.Token), []byte(a.token)) == 1:
		c.RegisterUser(a.full)
	case a.anonymous != nil && o.Token == "" && o.Username == "" && o.Password == "" && o.Nkey == "" && o.JWT == "":
		c.RegisterUser(a.anonymous)
	default:
		return false
	}
	return true
}
