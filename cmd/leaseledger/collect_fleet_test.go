package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// inProcessCollect is a `collect` run in-process by startCollect.
type inProcessCollect struct {
	url, addr string // the fleet bus's URL, the --metrics-addr
	out       *lockedBuffer
	stop      func() int // cancels it and returns its exit code
}

// startCollect runs `collect` on dir in-process, joined to routes, with a
// fleet bus on a free port, --metrics-addr on a free port and the extra
// flags (--hosts among them), and waits for its fleet bus.
func startCollect(t *testing.T, dir string, routes []string, extra ...string) *inProcessCollect {
	t.Helper()
	c := &inProcessCollect{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), out: &lockedBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		args := append([]string{"--data-dir", dir, "collect", "--port", "-1", "--poll-interval", "50ms",
			"--routes", strings.Join(routes, ","), "--metrics-addr", c.addr}, extra...)
		done <- run(ctx, args, strings.NewReader(""), c.out, c.out)
	}()
	var once sync.Once
	code := 0
	c.stop = func() int {
		once.Do(func() { cancel(); code = <-done })
		return code
	}
	t.Cleanup(func() { c.stop() })
	waitOutput(t, "fleet bus", c.out, func(s string) bool {
		for line := range strings.SplitSeq(s, "\n") {
			if u, ok := strings.CutPrefix(line, "leaseledger: fleet bus on "); ok {
				c.url = u
			}
		}
		return c.url != ""
	})
	return c
}

// host is host's entry of the collector's /status (zero when it does not
// answer).
func (c *inProcessCollect) host(host string) collector.HostStatus {
	resp, err := http.Get("http://" + c.addr + "/status")
	if err != nil {
		return collector.HostStatus{}
	}
	defer resp.Body.Close()
	var st collector.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return collector.HostStatus{}
	}
	return st.Hosts[host]
}

// waitHost polls the collector's /status until ok holds for host.
func (c *inProcessCollect) waitHost(t *testing.T, host, what string, ok func(collector.HostStatus) bool) collector.HostStatus {
	t.Helper()
	var s collector.HostStatus
	waitOutput(t, what, c.out, func(string) bool {
		s = c.host(host)
		return ok(s)
	})
	return s
}

// rawLines is every stored event of l as export prints it.
func rawLines(t *testing.T, l *ledger.Ledger) string {
	t.Helper()
	var b strings.Builder
	if err := l.Scan(context.Background(), ledger.Query{}, func(_ ledger.Seq, raw []byte) error {
		b.Write(raw)
		b.WriteByte('\n')
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// waitOutput polls out until ok holds or the wait ends.
func waitOutput(t *testing.T, what string, out *lockedBuffer, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if s := out.String(); ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen after 60s:\n%s", what, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While `collect` runs, its fleet bus serves every mirror in its host's
// space: replay --host-id h is h's chain byte for byte, leases --host-id
// h is what the host's own bus gives, tail --fleet
// follows both hosts (each line naming its host), /config.json offers the
// dashboard both hosts and the bus's WebSocket, and a --fleet read of the
// locked directory fails with errCollectorRunning naming the fleet bus
// (recorded in FLEET_BUS_URL, removed at the stop).
func TestCollectFleetBus(t *testing.T) {
	ids := []string{"h1", "h2"}
	ls, hostURLs, routes := startClusterHosts(t, ids...)
	cdir := t.TempDir()
	c := startCollect(t, cdir, routes, "--ws-port", "-1", "--hosts", "h1,h2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, addr, out := c.url, c.addr, c.out
	for _, id := range ids {
		want := ls[id].Head().Seq
		c.waitHost(t, id, id+" mirrored", func(s collector.HostStatus) bool { return s.Head == want })
	}
	if got := runningFleetBus(cdir); got != url {
		t.Fatalf("%s holds %q, want %q", fleetBusURLFile, got, url)
	}

	for _, id := range ids {
		r := runCLI(t, ctx, "", "replay", "--nats", url, "--host-id", id)
		if r.code != 0 || r.stdout != rawLines(t, ls[id]) {
			t.Fatalf("replay of %s through the fleet bus differs from its chain: %+v", id, r)
		}
		own := runCLI(t, ctx, "", "leases", "--json", "--nats", hostURLs[id], "--host-id", id)
		r = runCLI(t, ctx, "", "leases", "--json", "--nats", url, "--host-id", id)
		if r.code != 0 || own.code != 0 || r.stdout != own.stdout {
			t.Fatalf("leases of %s through the fleet bus %+v, through the host %+v", id, r, own)
		}
	}

	var cfg struct {
		WS    string   `json:"ws_url"`
		Hosts []string `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(get(t, "http://"+addr+"/config.json")), &cfg); err != nil || !slices.Equal(cfg.Hosts, ids) ||
		!strings.HasPrefix(cfg.WS, "ws://") {
		t.Fatalf("/config.json: %v %+v", err, cfg)
	}

	r := runCLI(t, ctx, "", "--fleet", "--data-dir", cdir, "export")
	if r.code == 0 || !strings.Contains(r.stderr, errCollectorRunning.Error()) || !strings.Contains(r.stderr, "--nats "+url) {
		t.Fatalf("--fleet export while the collector runs: %+v", r)
	}
	if r := runCLI(t, ctx, "", "--fleet", "tail", "--nats", url, "--host-id", "h1"); r.code == 0 {
		t.Fatalf("tail --fleet --host-id: %+v", r)
	}

	// tail --fleet: the last stored event of each host, then live ones.
	from := min(ls["h1"].Head().Seq, ls["h2"].Head().Seq)
	tctx, stopTail := context.WithCancel(ctx)
	tout := &lockedBuffer{}
	tailDone := make(chan int, 1)
	go func() {
		var errb strings.Builder
		tailDone <- run(tctx, []string{"--fleet", "tail", "--nats", url, "--from-seq", fmt.Sprint(from)}, strings.NewReader(""), tout, &errb)
	}()
	for _, id := range ids {
		if _, err := ls[id].Append(ctx, events.Draft{Activation: "live-" + id, Session: "s1", Server: "srv",
			Payload: &events.CallAdmitted{CallID: "c-live", Tool: "echo", Digest: strings.Repeat("ab", 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{}
	for _, id := range ids {
		for seq := from; seq <= ls[id].Head().Seq; seq++ {
			raw, err := ls[id].GetRaw(seq)
			if err != nil {
				t.Fatal(err)
			}
			want[id] += fmt.Sprintf(`{"host":%q,"event":%s}`+"\n", id, raw)
		}
	}
	waitOutput(t, "tail --fleet", tout, func(s string) bool {
		got := linesByHost(s)
		return got["h1"] == want["h1"] && got["h2"] == want["h2"]
	})
	stopTail()
	if code := <-tailDone; code != 0 {
		t.Fatalf("tail --fleet exit %d", code)
	}

	if code := c.stop(); code != 0 {
		t.Fatalf("collect exit %d:\n%s", code, out.String())
	}
	if _, err := os.Stat(filepath.Join(cdir, fleetBusURLFile)); !os.IsNotExist(err) {
		t.Fatalf("%s left after the stop: %v", fleetBusURLFile, err)
	}
}

// collect checks its route flags as serve does (routeFlags), before it
// starts anything.
func TestCollectFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-user", "u"}, "--cluster-user and --cluster-password"},
		{[]string{"--leaf-user", "u", "--leaf-password", "p"}, "need --leaf-remote"},
		{[]string{"--cluster-listen", "", "--routes", "nats-route://127.0.0.1:1"}, "--routes needs --cluster-listen"},
		{[]string{"--cluster-tls-cert", "c.pem"}, "--cluster-tls-cert and --cluster-tls-key go together"},
	} {
		args := append([]string{"--data-dir", t.TempDir(), "collect", "--port", "-1", "--hosts", "h1"}, c.args...)
		if r := runCLI(t, context.Background(), "", args...); r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("collect %v: %+v, want an error naming %q", c.args, r, c.want)
		}
	}
}

// The fleet bus's access flags are serve's: with --deny-anonymous an
// anonymous client cannot read it and --read-only-user can, and the
// dashboard's configuration asks the page for credentials.
func TestCollectFleetBusAuth(t *testing.T) {
	l, b, _ := collectHost(t, "h1")
	defer l.Close()
	defer b.Close()
	c := startCollect(t, t.TempDir(), []string{b.ClusterURL()}, "--hosts", "h1", "--deny-anonymous",
		"--read-only-user", "reader", "--read-only-password", "reader-secret")
	ctx := context.Background()
	if r := runCLI(t, ctx, "", "head", "--nats", c.url, "--host-id", "h1"); r.code == 0 {
		t.Fatalf("anonymous head through a --deny-anonymous fleet bus: %+v", r)
	}
	want := fmt.Sprintf("%d %s\n", l.Head().Seq, l.Head().Hash)
	waitOutput(t, "h1 mirrored, read as reader", c.out, func(string) bool {
		r := runCLI(t, ctx, "", "head", "--nats", c.url, "--host-id", "h1", "--user", "reader", "--password", "reader-secret")
		return r.code == 0 && r.stdout == want
	})
	var cfg struct {
		Credentials bool `json:"credentials_required"`
	}
	if err := json.Unmarshal([]byte(get(t, "http://"+c.addr+"/config.json")), &cfg); err != nil || !cfg.Credentials {
		t.Fatalf("/config.json of a --deny-anonymous collector: %v %+v", err, cfg)
	}
	if code := c.stop(); code != 0 {
		t.Fatalf("collect exit %d:\n%s", code, c.out.String())
	}
}

// startClusterHosts starts a clustered host (collectHost) for each id and returns
// their ledgers, their buses' client URLs and their route URLs, by id; the
// buses and then the ledgers are closed when the test ends.
func startClusterHosts(t *testing.T, ids ...string) (ls map[string]*ledger.Ledger, clientURLs map[string]string, routes []string) {
	t.Helper()
	ls, clientURLs = map[string]*ledger.Ledger{}, map[string]string{}
	for _, id := range ids {
		l, b, _ := collectHost(t, id)
		t.Cleanup(func() { l.Close() })
		t.Cleanup(func() { b.Close() })
		ls[id], clientURLs[id] = l, b.ClientURL()
		routes = append(routes, b.ClusterURL())
	}
	return ls, clientURLs, routes
}

// linesByHost groups `--fleet tail` or `--fleet export` output lines
// ({"host":h,"event":…}) by host, each host's lines in their order.
func linesByHost(s string) map[string]string {
	got := map[string]string{}
	for line := range strings.SplitAfterSeq(s, "\n") {
		var l struct {
			Host string `json:"host"`
		}
		if json.Unmarshal([]byte(line), &l) == nil {
			got[l.Host] += line
		}
	}
	return got
}
