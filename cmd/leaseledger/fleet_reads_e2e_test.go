package main

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
)

// fleetURL is the collector's fleet bus URL, as it printed it.
func (c *fleetCollector) fleetURL() string {
	c.t.Helper()
	for line := range strings.SplitSeq(c.out.String(), "\n") {
		if u, ok := strings.CutPrefix(line, "leaseledger: fleet bus on "); ok {
			return u
		}
	}
	c.t.Fatalf("collect printed no fleet bus URL:\n%s", c.out.String())
	return ""
}

// startCLI runs the CLI binary with args as a process of its own; stop
// interrupts it and waits for its exit.
func startCLI(t *testing.T, bin string, args ...string) (out *lockedBuffer, stop func()) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = repoRoot
	out = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(fleetWait):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(stop)
	return out, stop
}

// awaitLines waits until every want string is in out.
func awaitLines(t *testing.T, what string, out *lockedBuffer, want ...string) {
	t.Helper()
	deadline := time.Now().Add(fleetConverge)
	for {
		s, missing := out.String(), ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q not seen within %v:\n%s", what, missing, fleetConverge, s)
		}
		time.Sleep(fleetPoll)
	}
}

// projectionOf reads host's whole lease table (every page) and audit
// summary through the projection API at url, as JSON.
func projectionOf(t *testing.T, url, host string) (leases, summary string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := control.NewClient(nc, "").WithHost(host)
	ctx, cancel := context.WithTimeout(context.Background(), fleetWait)
	defer cancel()
	var all []control.LeasesReply
	for after := ""; ; {
		page, err := c.Leases(ctx, control.LeasesRequest{After: after, Limit: control.MaxLeasesPage})
		if err != nil {
			t.Fatalf("leases of %s at %s: %v", host, url, err)
		}
		all = append(all, page)
		if after = page.Next; after == "" {
			break
		}
	}
	for {
		s, err := c.Audit(ctx, control.AuditRequest{})
		if errors.Is(err, control.ErrBusy) {
			time.Sleep(fleetPoll)
			continue
		}
		if err != nil {
			t.Fatalf("audit of %s at %s: %v", host, url, err)
		}
		l, _ := json.Marshal(all)
		a, _ := json.Marshal(s)
		return string(l), string(a)
	}
}

// TestFleetReadsThroughCollector: while `collect` runs, its fleet bus
// serves every host as the host serves itself. Three `serve --host-id`
// processes take one MCP session each; then, through the collector only:
// `tail --nats URL --host-id h` (a process) prints h's new events live,
// `tail --fleet` (a process) and a subscription to FleetEventSubjects see
// all three hosts, the projection API (leases, audit summary) of each
// host equals the host's own, GET /config.json offers the dashboard the
// three hosts and the bus's WebSocket, and once the hosts are stopped each
// host's replay through the fleet bus equals its own export byte for byte.
func TestFleetReadsThroughCollector(t *testing.T) {
	requireNode(t)
	bin := cliBinary(t)
	f := newFleet(t, bin, 3, writeHTTPConfig(t, startEverythingHTTP(t)))
	f.collector.extra = []string{"--ws-port", "-1"}
	for _, h := range f.hosts {
		h.start()
	}
	f.collector.start()
	url := f.collector.fleetURL()
	ctx := context.Background()

	heads := map[string]uint64{}
	for _, h := range f.hosts {
		var err error
		if heads[h.id], err = h.head(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.awaitMirrored(heads)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	sub, err := nc.Subscribe(busclient.FleetEventSubjects(), func(m *nats.Msg) {
		if h, ok := busclient.HostOfSubject(m.Subject); ok {
			mu.Lock()
			seen[h]++
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	h1 := f.hosts[0]
	tailH1, stopTailH1 := startCLI(t, bin, "tail", "--nats", url, "--host-id", h1.id, "--from-seq", "1")
	tailAll, stopTailAll := startCLI(t, bin, "--fleet", "tail", "--nats", url, "--from-seq", "1")
	awaitLines(t, "tail --host-id h1 (replayed)", tailH1, `"seq":1,`)

	for _, h := range f.hosts {
		tr := &traffic{}
		if err := tr.session(ctx, h, httpServer, 0); err != nil {
			t.Fatalf("MCP session on %s: %v", h.id, err)
		}
	}
	for _, h := range f.hosts {
		if heads[h.id], err = h.head(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.awaitMirrored(heads)
	// Live through the collector: h1's new head, every host's events.
	awaitLines(t, "tail --host-id h1 (live)", tailH1, `"seq":`+jsonNumber(heads[h1.id])+`,`, "call.")
	var hostLines []string
	for _, h := range f.hosts {
		hostLines = append(hostLines, `{"host":"`+h.id+`","event":{`)
	}
	awaitLines(t, "tail --fleet", tailAll, hostLines...)
	stopTailH1()
	stopTailAll()
	if strings.Contains(tailAll.String(), `"host":"h1","event":{"seq":`+jsonNumber(heads[h1.id]+1)) {
		t.Fatalf("tail --fleet printed a seq past h1's head")
	}
	mu.Lock()
	for _, h := range f.hosts {
		if seen[h.id] == 0 {
			t.Errorf("the combined subscription saw no event of %s: %v", h.id, seen)
		}
	}
	mu.Unlock()

	for _, h := range f.hosts {
		hostURL, _ := h.endpoints()
		ownLeases, ownAudit := projectionOf(t, hostURL, h.id)
		leases, summary := projectionOf(t, url, h.id)
		if leases != ownLeases || !sameJSON(summary, ownAudit) {
			t.Fatalf("%s: the projection API through the collector differs from the host's:\nleases %s\nown    %s\naudit %s\nown   %s",
				h.id, leases, ownLeases, summary, ownAudit)
		}
		if !strings.Contains(ownLeases, `"leases":[{`) {
			t.Fatalf("%s has no lease to compare: %s", h.id, ownLeases)
		}
	}

	var cfg struct {
		WS    string   `json:"ws_url"`
		Hosts []string `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(get(t, "http://"+f.collector.metrics+"/config.json")), &cfg); err != nil ||
		!slices.Equal(cfg.Hosts, []string{"h1", "h2", "h3"}) || !strings.HasPrefix(cfg.WS, "ws://") {
		t.Fatalf("the collector's /config.json: %v %+v", err, cfg)
	}

	for _, h := range f.hosts {
		if code := h.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("%s exit %d:\n%s", h.id, code, h.output())
		}
	}
	for _, h := range f.hosts {
		r := runCLI(t, ctx, "", "replay", "--nats", url, "--host-id", h.id)
		if own := exportOf(t, h.dir); r.code != 0 || r.stdout != own {
			t.Fatalf("%s: replay through the collector (%+v) differs from the host's export (%d bytes)", h.id, r.code, len(own))
		}
	}
	if code := f.collector.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("collect exit %d:\n%s", code, f.collector.out.String())
	}
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// sameJSON says whether two JSON texts hold the same value.
func sameJSON(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}
