package bus

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/nats-io/nats-server/v2/server"
)

// A fleet of hosts joins one NATS cluster (routes between the hosts'
// embedded servers) or connects as leaf nodes to hubs; each host keeps its
// own log and chain and publishes in its own subject space (Options.HostID,
// busclient.HostSubject).
//
// Guarantees (tests in cluster_test.go and cluster_leak_test.go):
//   - Clustering or leaf remotes without a host id are refused (ErrOptions):
//     two hosts in the bare space would collide (TestClusterOptionsRefused).
//   - Each host's events and API stay in its space: a client made
//     WithHost(h) on any server of the cluster reads h's chain only
//     (TestHostSpacesOnCluster).
//   - Cluster peers (routes, leaf connections, a Peer) reach a host's bare
//     read-only API (replay, head, AccessRead services) with the anonymous
//     class's limits, even when the host denies anonymous clients: they
//     arrive over routes that authenticate as a whole (TestHostSpacesOnCluster,
//     TestLeafNodeHost). Replay and head are also answered in the peer class
//     (writer-size chunks, the writer's rate; limits.go), whose subjects no
//     local client may publish (TestPeerClassOverRoute,
//     TestPeerClassNotForLocalClients). Local clients' permissions stay confined to their
//     own subjects of their own host (TestHostSpacesOnCluster).
//   - Replies stay on their host: a host imports over routes none of its
//     clients' reply inboxes (the anonymous _INBOX, each named user's
//     busclient.InboxPrefix) nor a Peer's (peerInboxPrefix), and over leaf
//     connections none of its named users', so a client of another host
//     with a wildcard inbox subscription, or a user there of the same name,
//     receives none of the host's replies, while the host's replies to a
//     peer's requests still cross (TestInboxRepliesStayOnHost,
//     TestPeerLeafOfHub). Over a leaf connection the anonymous _INBOX is
//     not confined (see routeOnlyDeny): on a leaf fleet, a host allowing
//     anonymous clients lets them receive anonymous-class replies to other
//     anonymous clients crossing the hub — but never a Peer's replies (the
//     peer class's and the bare API's to a Peer's Connect), which go to the
//     peer inbox prefix that no local client may subscribe to
//     (TestPeerRepliesNotForLocalClients).
//   - No route or leaf connection reaches a named user's request subjects
//     (append, the control API, the named users' reads): over a route
//     anyone could claim to be that user (hostDeny). Appends reach a host
//     only from its own server's writer (TestHostSpacesOnCluster,
//     TestLeafNodeHost).
//   - No route may publish into a host's own event or checkpoint subjects
//     on its server (route import deny): subscribers on the host's own
//     server see only what the host's ledger published
//     (TestRoutesCannotPublishIntoHostSpace). (Leaf connections are not
//     filtered for those: denying them on a leaf remote also stops their
//     publication to the hub.)
//   - A Peer may be a leaf node of a hub, as hosts may: it reads each
//     host's events and API through the hub (TestPeerLeafOfHub).
//   - TLS on the client port and on routes uses the given files; with a CA,
//     the other side must present a certificate signed by it
//     (TestClusterTLS).

// DefaultClusterName names the cluster when ClusterOptions.Name is empty.
const DefaultClusterName = "leaseledger"

// Bounds of ClusterOptions.
const (
	// MaxClusterRoutes bounds the routes one server is configured with
	// (its peers gossip the rest of the cluster to it).
	MaxClusterRoutes = 64
	// MaxLeafRemotes bounds the hubs one server connects to as a leaf node.
	MaxLeafRemotes = 16
)

// ClusterOptions joins a server to a NATS cluster and/or to hubs as a leaf
// node. The zero value is a standalone server.
type ClusterOptions struct {
	// Name is the cluster's name; DefaultClusterName when empty. Every
	// server of a cluster must use the same.
	Name string
	// Listen is the host:port routes are accepted on; "" is not clustered,
	// port -1 (RandomPort) any free port.
	Listen string
	// Routes are the nats-route://host:port URLs of peers to connect to.
	Routes []string
	// User and Password authorize routes, both ways: every server of the
	// cluster must use the same (both or neither).
	User, Password string
	// TLS, when set, is required on routes (certificate, key, and the CA
	// both sides' certificates must be signed by) and used to connect to
	// leaf remotes whose URL is tls://.
	TLS *TLSFiles
	// LeafRemotes are hubs to connect to as a leaf node, instead of or
	// besides routes.
	LeafRemotes []LeafRemote
}

// TLSFiles names PEM files: a certificate, its key and an optional CA.
type TLSFiles struct{ Cert, Key, CA string }

// LeafRemote is a hub a server connects to as a leaf node.
type LeafRemote struct {
	// URL is the hub's leaf node URL (nats-leaf://, nats:// or tls://
	// host:port).
	URL string
	// Credentials is a NATS .creds file (JWT and seed), "" for none.
	Credentials string
	// User and Password authorize the connection when the hub uses them.
	User, Password string
}

// enabled reports whether c joins anything.
func (c ClusterOptions) enabled() bool {
	return c.Listen != "" || len(c.Routes) > 0 || len(c.LeafRemotes) > 0
}

// clusterConfig applies cluster, leaf and TLS options to sopts. deny are
// the subjects no route or leaf connection may publish into on this server
// (hostDeny; nil for a Peer, which owns no subjects).
func clusterConfig(sopts *server.Options, deny []string, c ClusterOptions, clientTLS *TLSFiles) error {
	if clientTLS != nil {
		tc, err := tlsConfig(*clientTLS, false)
		if err != nil {
			return fmt.Errorf("client TLS: %w", err)
		}
		sopts.TLSConfig, sopts.TLS, sopts.TLSVerify = tc, true, clientTLS.CA != ""
	}
	if !c.enabled() {
		return nil
	}
	if len(c.Routes) > MaxClusterRoutes {
		return fmt.Errorf("%w: %d routes, at most MaxClusterRoutes=%d", ErrOptions, len(c.Routes), MaxClusterRoutes)
	}
	if len(c.LeafRemotes) > MaxLeafRemotes {
		return fmt.Errorf("%w: %d leaf remotes, at most MaxLeafRemotes=%d", ErrOptions, len(c.LeafRemotes), MaxLeafRemotes)
	}
	if (c.User == "") != (c.Password == "") {
		return fmt.Errorf("%w: the cluster user and password go together", ErrOptions)
	}
	var routeTLS *tls.Config
	if c.TLS != nil {
		var err error
		if routeTLS, err = tlsConfig(*c.TLS, true); err != nil {
			return fmt.Errorf("cluster TLS: %w", err)
		}
	}
	if c.Listen != "" || len(c.Routes) > 0 {
		if c.Listen == "" {
			return fmt.Errorf("%w: routes need a cluster listen address", ErrOptions)
		}
		h, p, err := net.SplitHostPort(c.Listen)
		port, perr := strconv.Atoi(p)
		if err != nil || perr != nil || port < RandomPort || port == 0 || port > 65535 {
			return fmt.Errorf("%w: cluster listen address %q: want host:port (port 1-65535, or -1 for any free one)", ErrOptions, c.Listen)
		}
		name := c.Name
		if name == "" {
			name = DefaultClusterName
		}
		sopts.Cluster = server.ClusterOpts{Name: name, Host: h, Port: port, Username: c.User, Password: c.Password, TLSConfig: routeTLS}
		if len(deny) > 0 {
			sopts.Cluster.Permissions = &server.RoutePermissions{Import: &server.SubjectPermission{Allow: []string{">"}, Deny: deny}}
		}
		for i, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Scheme != "nats-route" && u.Scheme != "nats" || u.Host == "" || u.Port() == "" {
				return fmt.Errorf("%w: route %d %q: want nats-route://host:port", ErrOptions, i, r)
			}
			if u.User == nil && c.User != "" {
				u.User = url.UserPassword(c.User, c.Password)
			}
			sopts.Routes = append(sopts.Routes, u)
		}
	}
	for i, lr := range c.LeafRemotes {
		u, err := url.Parse(lr.URL)
		if err != nil || u.Scheme != "nats-leaf" && u.Scheme != "nats" && u.Scheme != "tls" || u.Host == "" || u.Port() == "" {
			return fmt.Errorf("%w: leaf remote %d %q: want nats-leaf://host:port (or nats:// or tls://)", ErrOptions, i, lr.URL)
		}
		if (lr.User == "") != (lr.Password == "") {
			return fmt.Errorf("%w: leaf remote %d: its user and password go together", ErrOptions, i)
		}
		if lr.User != "" {
			u.User = url.UserPassword(lr.User, lr.Password)
		}
		remote := &server.RemoteLeafOpts{URLs: []*url.URL{u}, Credentials: lr.Credentials, DenyImports: leafDenyImports(deny)}
		if u.Scheme == "tls" {
			remote.TLS = true
			if routeTLS != nil {
				remote.TLSConfig = routeTLS.Clone()
			}
		}
		sopts.LeafNode.Remotes = append(sopts.LeafNode.Remotes, remote)
	}
	return nil
}

// hostDeny lists the subjects of host's space that only the host's own
// server may publish: its events and checkpoints (only its ledger
// publishes them) and every named user's request subjects (only that
// local user may send them: over a route, anyone could claim to be it).
// What is left to peers is the bare, anonymous-class read API and the
// peer class's replay and head (limits.go). It also
// lists the reply inboxes of the host's clients (the anonymous _INBOX and
// each named user's busclient.InboxPrefix) and a Peer's (peerInboxPrefix):
// over routes the host imports no reply to its clients nor a peer's, over
// leaf connections none to its named users (routeOnlyDeny). The deny is on imports only: the host's replies to a
// peer's inbox (its export) still cross.
func hostDeny(opts *Options) []string {
	q := func(s string) string { return busclient.HostSubject(opts.HostID, s) }
	deny := []string{q(busclient.EventSubjects()), q(busclient.CheckpointSubject)}
	subjects := []string{busclient.ReplaySubject, busclient.HeadSubject, busclient.AppendSubject}
	for _, s := range opts.Services {
		subjects = append(subjects, s.Subject)
	}
	// A host's clients request only their own server, so no reply to them
	// ever needs to cross a route or leaf connection: importing their
	// inboxes would deliver other hosts' replies (to a peer, or to a user
	// of the same name there) to this host's clients. The anonymous inbox
	// and the peer's inboxes are denied on routes only (see routeOnlyDeny).
	deny = append(deny, busclient.InboxPrefix("")+".>", peerInboxPrefix()+".>")
	for _, user := range []string{opts.ReadOnlyUser, opts.WriterUser, opts.ControlUser} {
		if user == "" {
			continue
		}
		for _, s := range subjects {
			deny = append(deny, busclient.UserSubject(q(s), user))
		}
		deny = append(deny, busclient.InboxPrefix(user)+".>")
	}
	return deny
}

// leafDenyImports is what a leaf remote denies of deny (hostDeny, or nil
// for a Peer): all but its first routeOnlyDeny subjects.
func leafDenyImports(deny []string) []string {
	if len(deny) < routeOnlyDeny {
		return nil
	}
	return deny[routeOnlyDeny:]
}

// routeOnlyDeny is how many of hostDeny's subjects come first and are
// denied on routes only: the host's events and checkpoints, the anonymous
// clients' _INBOX and a Peer's inbox prefix. On a leaf connection NATS
// applies a denied import to what the leaf sends as well (to a hub's
// subscriptions that overlap it): denying the host's events there would
// stop their publication to the hub, denying _INBOX would stop the host's
// replies to the hub's anonymous-class requesters, and denying the peer
// inbox would stop its replies to a Peer that is a leaf of the hub (checked:
// TestPeerLeafOfHub and TestPeerClassOverLeaf then time out). No local
// client may subscribe to the peer inbox, so none receives its replies. Named
// users' inboxes are denied on both: a hub's requester never uses them.
const routeOnlyDeny = 4

// tlsConfig loads files. peer: both ends verify each other (routes, leaf
// remotes), the CA is also the root the other end's certificate must chain
// to; else a client port, where a CA means client certificates are required.
func tlsConfig(f TLSFiles, peer bool) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("%w: TLS needs a certificate and its key", ErrOptions)
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: f.Cert, KeyFile: f.Key, CaFile: f.CA, Verify: f.CA != ""})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if peer {
		// As the nats-server configuration does for routes: each server
		// is client and server of the other, so the CA is both pools.
		tc.RootCAs = tc.ClientCAs
		if f.CA != "" {
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return tc, nil
}

// ClusterURL is the nats-route:// URL other servers route to, or "" when
// the bus is not clustered.
func (b *Bus) ClusterURL() string { return clusterURL(b.srv) }

func clusterURL(srv *server.Server) string {
	a := srv.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + a.String()
}
