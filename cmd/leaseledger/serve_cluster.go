package main

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/spf13/cobra"
)

// routeFlags join an embedded NATS server to the fleet's cluster (routes)
// or to hubs (leaf remotes), with TLS: the flags serve and collect share.
type routeFlags struct {
	name, listen                 string
	routes                       []string
	user, password               string
	routeCert, routeKey, routeCA string
	leafRemotes                  []string
	leafCreds                    string
	leafUser, leafPassword       string
}

// register adds the flags; listen is --cluster-listen's default and
// listenHelp its help.
func (f *routeFlags) register(fl flagSet, listen, listenHelp string) {
	fl.StringVar(&f.name, "cluster-name", bus.DefaultClusterName, "NATS cluster name (the same on every server of the fleet)")
	fl.StringVar(&f.listen, "cluster-listen", listen, listenHelp)
	fl.StringSliceVar(&f.routes, "routes", nil, "nats-route://host:port of cluster peers (comma-separated or repeated)")
	fl.StringVar(&f.user, "cluster-user", "", "user authorizing routes (the same on every server)")
	fl.StringVar(&f.password, "cluster-password", "", "password of --cluster-user (env LEASELEDGER_CLUSTER_PASSWORD)")
	fl.StringVar(&f.routeCert, "cluster-tls-cert", "", "PEM certificate for routes (and tls:// leaf remotes)")
	fl.StringVar(&f.routeKey, "cluster-tls-key", "", "PEM key of --cluster-tls-cert")
	fl.StringVar(&f.routeCA, "cluster-tls-ca", "", "PEM CA the peers' route certificates must chain to")
	fl.StringSliceVar(&f.leafRemotes, "leaf-remote", nil, "connect as a leaf node to this hub URL (nats-leaf://, nats:// or tls://host:port; repeatable), instead of or besides routes")
	fl.StringVar(&f.leafCreds, "leaf-credentials", "", "NATS .creds file for --leaf-remote")
	fl.StringVar(&f.leafUser, "leaf-user", "", "user for --leaf-remote")
	fl.StringVar(&f.leafPassword, "leaf-password", "", "password of --leaf-user (env LEASELEDGER_LEAF_PASSWORD)")
}

// clustered says whether the flags join the server to anything.
func (f *routeFlags) clustered() bool {
	return f.listen != "" || len(f.routes) > 0 || len(f.leafRemotes) > 0
}

// options checks the flags (passwords from the environment when not
// given) and returns them as bus.ClusterOptions.
func (f *routeFlags) options() (bus.ClusterOptions, error) {
	if f.password == "" {
		f.password = os.Getenv("LEASELEDGER_CLUSTER_PASSWORD")
	}
	if f.leafPassword == "" {
		f.leafPassword = os.Getenv("LEASELEDGER_LEAF_PASSWORD")
	}
	if len(f.routes) > 0 && f.listen == "" {
		return bus.ClusterOptions{}, fmt.Errorf("--routes needs --cluster-listen")
	}
	if (f.user == "") != (f.password == "") {
		return bus.ClusterOptions{}, fmt.Errorf("--cluster-user and --cluster-password (or LEASELEDGER_CLUSTER_PASSWORD) go together")
	}
	if (f.leafUser == "") != (f.leafPassword == "") {
		return bus.ClusterOptions{}, fmt.Errorf("--leaf-user and --leaf-password (or LEASELEDGER_LEAF_PASSWORD) go together")
	}
	if (f.leafCreds != "" || f.leafUser != "") && len(f.leafRemotes) == 0 {
		return bus.ClusterOptions{}, fmt.Errorf("--leaf-credentials and --leaf-user need --leaf-remote")
	}
	if !f.clustered() && (f.user != "" || f.routeCert != "" || f.routeKey != "" || f.routeCA != "") {
		return bus.ClusterOptions{}, fmt.Errorf("--cluster-user and --cluster-tls-* need --cluster-listen or --leaf-remote")
	}
	routeTLS, err := tlsFiles("--cluster-tls", f.routeCert, f.routeKey, f.routeCA)
	if err != nil {
		return bus.ClusterOptions{}, err
	}
	c := bus.ClusterOptions{Name: f.name, Listen: f.listen, Routes: f.routes, User: f.user, Password: f.password, TLS: routeTLS}
	for _, u := range f.leafRemotes {
		c.LeafRemotes = append(c.LeafRemotes, bus.LeafRemote{URL: u, Credentials: f.leafCreds, User: f.leafUser, Password: f.leafPassword})
	}
	return c, nil
}

// clusterFlags are serve's fleet flags: the host id, how its embedded
// NATS server joins a cluster (routeFlags), and TLS on its client port.
type clusterFlags struct {
	hostID string
	routeFlags
	cert, key, ca string
}

func (f *clusterFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.hostID, "host-id", "", "this host's id in a fleet ("+events.IDRule+"): recorded in the chain (host.bound) and qualifying every NATS subject (leaseledger.hosts.<id>.…); needed by every cluster flag")
	f.routeFlags.register(fl, "", "host:port routes are accepted on (port -1: any free port; empty: not clustered)")
	fl.StringVar(&f.cert, "tls-cert", "", "PEM certificate: require TLS on the NATS client port")
	fl.StringVar(&f.key, "tls-key", "", "PEM key of --tls-cert")
	fl.StringVar(&f.ca, "tls-ca", "", "PEM CA: require client certificates signed by it on the client port")
}

// apply checks the flags and sets them on opts.
func (f *clusterFlags) apply(opts *bus.Options) error {
	if f.hostID != "" && !events.ValidID(f.hostID) {
		return fmt.Errorf("--host-id %q: want %s", f.hostID, events.IDRule)
	}
	if f.clustered() && f.hostID == "" {
		return fmt.Errorf("--cluster-listen, --routes and --leaf-remote need --host-id: hosts of a fleet must not share the bare subject space")
	}
	cluster, err := f.routeFlags.options()
	if err != nil {
		return err
	}
	if opts.TLS, err = tlsFiles("--tls", f.cert, f.key, f.ca); err != nil {
		return err
	}
	opts.HostID = f.hostID
	opts.Cluster = cluster
	return nil
}

// tlsFiles checks one set of TLS flags: certificate and key together, a CA
// only with them; nil when none is set.
func tlsFiles(prefix, cert, key, ca string) (*bus.TLSFiles, error) {
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, fmt.Errorf("%s-cert and %s-key go together (and %s-ca needs them)", prefix, prefix, prefix)
	}
	return &bus.TLSFiles{Cert: cert, Key: key, CA: ca}, nil
}

// bindHost records the host id in the chain before anything is served
// (ledger.BindHost: the genesis of an empty ledger; nothing when already
// bound to it; refused when bound to another host).
func (f *clusterFlags) bindHost(ctx context.Context, l *ledger.Ledger) (events.Seq, error) {
	if f.hostID == "" {
		return 0, nil
	}
	seq, err := l.BindHost(ctx, f.hostID)
	if err != nil {
		return 0, fmt.Errorf("refusing to start as host %s: %w", f.hostID, err)
	}
	return seq, nil
}
