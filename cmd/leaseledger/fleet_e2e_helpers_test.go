package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/internal/netproxy"
)

// Helpers of the fleet end-to-end tests (fleet_e2e_test.go): a cluster of
// `serve` hosts whose every route runs through a netproxy.Proxy, and a
// `collect` process joined to it.
//
// Every route is a proxy so the test can partition a host without
// touching its process. NATS gossips the routes it learns and peers dial
// gossiped addresses directly ("implicit routes"), which would go around
// the proxies. Without an advertised address the gossiped one is the IP
// the route came from (a proxy's, 127.0.0.1) with the peer's own cluster
// port, so each process listens for routes on its own loopback address
// (127.0.0.<fleetIPBase+i>): the gossiped 127.0.0.1:<port> answers nobody,
// the implicit dial fails once and is not retried, and the explicit,
// proxied full mesh is the only path between processes.

const (
	// fleetWait bounds each wait of these tests for a process to start
	// or stop, or for a host to answer.
	fleetWait = 30 * time.Second
	// fleetConverge bounds the wait for the collector to mirror every
	// host up to its head once traffic stopped.
	fleetConverge = 60 * time.Second
	// fleetPoll is the interval of the tests' polls.
	fleetPoll = 100 * time.Millisecond
	// fleetIPBase is the last octet of the first process's route address
	// (see above); the collector's is fleetCollectorIP.
	fleetIPBase       = 11
	fleetCollectorIP  = "127.0.0.30"
	fleetClusterName  = "fleet-e2e"
	fleetClusterUser  = "route"
	fleetClusterPass  = "route-secret"
	fleetWriterUser   = "w"
	fleetWriterPass   = "w-secret"
	fleetEchoPerConn  = 5 // echo calls per MCP session of the traffic
	fleetTrafficPause = 20 * time.Millisecond
)

// freeAddrOn returns a free TCP address on ip.
func freeAddrOn(t testing.TB, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// fleetHost is one `serve --host-id` process, restartable on the same
// data directory and route address.
type fleetHost struct {
	t       testing.TB
	id      string
	bin     string
	dir     string
	config  string   // --config; "" for a host without gateway
	port    int      // NATS client port; 0: any free one, another at each start
	cluster string   // route listen address
	routes  []string // nats-route:// of the proxies to the other processes

	mu      sync.Mutex
	cmd     *exec.Cmd
	out     *lockedBuffer
	exited  chan struct{}
	natsURL string
	mcpURL  string
	starts  int
}

func (h *fleetHost) args() []string {
	port := "-1"
	if h.port != 0 {
		port = strconv.Itoa(h.port)
	}
	args := []string{"--data-dir", h.dir, "serve", "--port", port, "--host-id", h.id,
		"--cluster-name", fleetClusterName, "--cluster-listen", h.cluster,
		"--cluster-user", fleetClusterUser, "--cluster-password", fleetClusterPass,
		"--writer-user", fleetWriterUser, "--writer-password", fleetWriterPass, "--shutdown-budget", "15s"}
	if len(h.routes) > 0 {
		args = append(args, "--routes", strings.Join(h.routes, ","))
	}
	if h.config != "" {
		args = append(args, "--config", h.config, "--mcp-addr", "127.0.0.1:0")
	}
	return args
}

// start runs serve and waits for its NATS (and MCP) endpoint.
func (h *fleetHost) start() {
	h.t.Helper()
	cmd := exec.Command(h.bin, h.args()...)
	cmd.Dir = repoRoot
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	h.t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.After(fleetWait)
	var natsURL, mcpURL string
	for natsURL == "" || h.config != "" && mcpURL == "" {
		select {
		case <-exited:
			h.t.Fatalf("%s exited before it served:\n%s", h.id, out.String())
		case <-deadline:
			h.t.Fatalf("%s did not start:\n%s", h.id, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if u, ok := strings.CutPrefix(line, "leaseledger: NATS listening on "); ok {
				natsURL = u
			}
			if u, ok := strings.CutPrefix(line, "leaseledger: MCP endpoint on "); ok {
				mcpURL = u
			}
		}
	}
	h.mu.Lock()
	h.cmd, h.out, h.exited, h.natsURL, h.mcpURL = cmd, out, exited, natsURL, mcpURL
	h.starts++
	h.mu.Unlock()
}

// endpoints returns the current NATS and MCP URLs ("" while down).
func (h *fleetHost) endpoints() (natsURL, mcpURL string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.natsURL, h.mcpURL
}

// stop sends sig and waits for the exit; it returns the exit code.
func (h *fleetHost) stop(sig syscall.Signal) int {
	h.t.Helper()
	h.mu.Lock()
	cmd, exited, out := h.cmd, h.exited, h.out
	h.natsURL, h.mcpURL = "", ""
	h.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(fleetWait):
		h.t.Fatalf("%s did not exit after %v:\n%s", h.id, sig, out.String())
	}
	return cmd.ProcessState.ExitCode()
}

// output is what the current process printed.
func (h *fleetHost) output() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out.String()
}

// head asks the host itself (its client port, anonymous) for its head.
func (h *fleetHost) head(ctx context.Context) (uint64, error) {
	url, _ := h.endpoints()
	if url == "" {
		return 0, errors.New(h.id + " is down")
	}
	nc, err := nats.Connect(url, nats.NoReconnect())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := busclient.NewClient(nc).WithHost(h.id).Head(ctx)
	if err != nil {
		return 0, err
	}
	return uint64(r.Seq), nil
}

// appendLines appends n lease.terminated events to the running host as
// its writer user, with activation ids act-<tag>-<i>.
func (h *fleetHost) appendLines(ctx context.Context, tag string, n int) error {
	url, _ := h.endpoints()
	nc, err := busclient.Connect(url, busclient.UserOptions(fleetWriterUser, fleetWriterPass)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"kind":"lease.terminated","activation":"act-%s-%d","data":{"reason":"revoked"}}`+"\n", tag, i)
	}
	ctx, cancel := context.WithTimeout(ctx, fleetWait)
	defer cancel()
	_, err = busclient.NewClient(nc).WithHost(h.id).Append(ctx, b.Bytes())
	return err
}

// fleetCollector is a `collect` process, restartable on the same
// directory, route address and metrics address.
type fleetCollector struct {
	t       testing.TB
	bin     string
	dir     string
	hosts   []string
	cluster string
	routes  []string
	metrics string   // host:port of --metrics-addr
	extra   []string // more flags of collect

	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
}

func (c *fleetCollector) start() {
	c.t.Helper()
	args := []string{"collect", "--port", "-1", "--data-dir", c.dir, "--hosts", strings.Join(c.hosts, ","),
		"--cluster-name", fleetClusterName, "--cluster-listen", c.cluster, "--routes", strings.Join(c.routes, ","),
		"--cluster-user", fleetClusterUser, "--cluster-password", fleetClusterPass, "--metrics-addr", c.metrics}
	args = append(args, c.extra...)
	c.cmd = exec.Command(c.bin, args...)
	c.cmd.Dir = repoRoot
	c.out = &lockedBuffer{}
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	cmd, exited := c.cmd, make(chan struct{})
	c.exited = exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c.t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(fleetWait)
	for {
		if _, err := c.status(); err == nil {
			return
		}
		select {
		case <-exited:
			c.t.Fatalf("collect exited:\n%s", c.out.String())
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("collect serves no /status:\n%s", c.out.String())
		}
		time.Sleep(fleetPoll)
	}
}

func (c *fleetCollector) stop(sig syscall.Signal) int {
	c.t.Helper()
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(fleetWait):
		c.t.Fatalf("collect did not exit after %v:\n%s", sig, c.out.String())
	}
	return c.cmd.ProcessState.ExitCode()
}

// hostStatus is one host of the collector's GET /status.
type hostStatus struct {
	Head     uint64          `json:"head"`
	HostHead uint64          `json:"host_head"`
	Lag      int64           `json:"lag"`
	State    string          `json:"state"`
	Finding  json.RawMessage `json:"finding"`
}

func (c *fleetCollector) status() (map[string]hostStatus, error) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + c.metrics + "/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /status: %s", resp.Status)
	}
	var s struct {
		Hosts map[string]hostStatus `json:"hosts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("GET /status: %w", err)
	}
	return s.Hosts, nil
}

// mirrorDir is the collector's mirror of host.
func (c *fleetCollector) mirrorDir(host string) string { return filepath.Join(c.dir, "hosts", host) }

// fleet is the processes of one test and the proxies between them.
type fleet struct {
	t         testing.TB
	hosts     []*fleetHost
	collector *fleetCollector
	// proxies[a][b] carries the routes a solicits to b (a, b host ids
	// or "collector").
	proxies map[string]map[string]*netproxy.Proxy
}

// newFleet lays out n hosts (h1…hn) and a collector: route addresses,
// and a proxy for every route one process solicits to another (hosts to
// each other both ways, the collector to every host). config is each
// host's --config ("" for none). Nothing is started.
func newFleet(t testing.TB, bin string, n int, config string) *fleet {
	t.Helper()
	f := &fleet{t: t, proxies: map[string]map[string]*netproxy.Proxy{}}
	for i := range n {
		f.hosts = append(f.hosts, &fleetHost{t: t, id: "h" + strconv.Itoa(i+1), bin: bin, dir: t.TempDir(), config: config,
			cluster: freeAddrOn(t, "127.0.0."+strconv.Itoa(fleetIPBase+i))})
	}
	proxy := func(from, to, target string) string {
		p, err := netproxy.Listen(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		if f.proxies[from] == nil {
			f.proxies[from] = map[string]*netproxy.Proxy{}
		}
		f.proxies[from][to] = p
		return "nats-route://" + p.Addr()
	}
	for _, a := range f.hosts {
		for _, b := range f.hosts {
			if a != b {
				a.routes = append(a.routes, proxy(a.id, b.id, b.cluster))
			}
		}
	}
	c := &fleetCollector{t: t, bin: bin, dir: t.TempDir(), cluster: freeAddrOn(t, fleetCollectorIP), metrics: freeAddrOn(t, "127.0.0.1")}
	for _, h := range f.hosts {
		c.hosts = append(c.hosts, h.id)
		c.routes = append(c.routes, proxy("collector", h.id, h.cluster))
	}
	f.collector = c
	return f
}

// partition cuts (or heals) every proxy to and from host.
func (f *fleet) partition(host string, cut bool) {
	for from, m := range f.proxies {
		for to, p := range m {
			if from != host && to != host {
				continue
			}
			if cut {
				p.Cut()
			} else {
				p.Heal()
			}
		}
	}
}

// awaitMirrored waits until the collector's /status reports every host's
// mirrored head equal to heads[host] (asked of the host itself) with lag 0.
func (f *fleet) awaitMirrored(heads map[string]uint64) map[string]hostStatus {
	f.t.Helper()
	deadline := time.Now().Add(fleetConverge)
	for {
		st, err := f.collector.status()
		done := err == nil
		for h, want := range heads {
			if s := st[h]; s.Head != want || s.Lag != 0 {
				done = false
			}
		}
		if done {
			return st
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("collector did not mirror the hosts' heads %v within %v: %v %+v\ncollector:\n%s",
				heads, fleetConverge, err, st, f.collector.out.String())
		}
		time.Sleep(fleetPoll)
	}
}

// traffic drives MCP sessions against one host until stop: each session
// calls echo on server fleetEchoPerConn times and closes (DELETE →
// session.ended). A host that is down or restarting fails calls; the loop
// reconnects to its current endpoint.
type traffic struct {
	calls, failures atomic.Int64
	done            chan struct{}
}

func startTraffic(ctx context.Context, h *fleetHost, server string) *traffic {
	tr := &traffic{done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for i := 0; ctx.Err() == nil; i++ {
			if err := tr.session(ctx, h, server, i); err != nil && ctx.Err() == nil {
				tr.failures.Add(1)
				select {
				case <-ctx.Done():
				case <-time.After(10 * fleetTrafficPause):
				}
			}
		}
	}()
	return tr
}

func (tr *traffic) session(ctx context.Context, h *fleetHost, server string, i int) error {
	_, url := h.endpoints()
	if url == "" {
		return errors.New("down")
	}
	// A private transport, closed with the session: no keep-alive
	// goroutine outlives the test (testproc).
	ht := &http.Transport{}
	defer ht.CloseIdleConnections()
	c := mcp.NewClient(&mcp.Implementation{Name: "fleet-e2e", Version: "1.0.0"}, nil)
	// The session's requests end with ctx, but a session open when
	// traffic stops is still closed, so each host ends quiescent.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleetWait)
	defer cancel()
	cs, err := c.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: ht}, MaxRetries: -1}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	for j := range fleetEchoPerConn {
		if ctx.Err() != nil {
			return nil
		}
		msg := fmt.Sprintf("%s-%d-%d", h.id, i, j)
		res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: server + "__echo", Arguments: map[string]any{"message": msg}})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("echo: tool error")
		}
		tr.calls.Add(1)
		time.Sleep(fleetTrafficPause)
	}
	return nil
}

// writeHTTPConfig writes an mcp.json naming only server-everything over
// Streamable HTTP at url: all hosts share that one server process, so the
// fleet's traffic spawns no process per session.
func writeHTTPConfig(t *testing.T, url string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{httpServer: map[string]any{"type": "http", "url": url}}})
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// exportOf runs export (with extra flags) on dir and returns its output.
func exportOf(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	r := runCLI(t, context.Background(), "", append([]string{"--data-dir", dir, "export"}, extra...)...)
	if r.code != 0 {
		t.Fatalf("export of %s: %+v", dir, r)
	}
	return r.stdout
}

// seqsOnce checks that the export holds seqs 1…n, each once, in order,
// and returns n.
func seqsOnce(t *testing.T, what, export string) uint64 {
	t.Helper()
	var n uint64
	for _, e := range parseEvents(t, export) {
		if e.Seq != n+1 {
			t.Fatalf("%s: seq %d after %d (missing or duplicated)", what, e.Seq, n)
		}
		n = e.Seq
	}
	return n
}
