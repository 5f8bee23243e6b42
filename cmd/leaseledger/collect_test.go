package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// collectHost is an in-process fleet host: a ledger bound to id and its
// bus in a cluster of its own listening on a free port (routed to routes,
// when given).
func collectHost(t *testing.T, id string, routes ...string) (*ledger.Ledger, *bus.Bus, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), id)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.BindHost(ctx, id); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := l.Append(ctx, events.Draft{Activation: fmt.Sprintf("a%d", i%3), Session: "s1", Server: "srv",
			Payload: &events.CallAdmitted{CallID: fmt.Sprintf("c%d", i), Tool: "echo", Digest: strings.Repeat("ab", 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(ctx, events.Draft{Activation: "only-" + id, Session: "s1", Server: "srv",
		Payload: &events.CallAdmitted{CallID: "c-only", Tool: "echo", Digest: strings.Repeat("ab", 32)}}); err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, HostID: id, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: routes}})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return l, b, dir
}

// `collect` mirrors two hosts, serves /status and /metrics, and stops on
// its context; `--fleet` export, verify, audit and leases then read the
// collector directory per host: export equals each host's own, a refused
// host's section names its finding, and a refused host fails --fleet
// verify (exitRefused) unless --allow-refused.
func TestCollectAndFleetReads(t *testing.T) {
	type host struct {
		id, dir string
		l       *ledger.Ledger
		b       *bus.Bus
	}
	var hosts []*host
	for _, id := range []string{"h1", "h2"} {
		l, b, dir := collectHost(t, id)
		hosts = append(hosts, &host{id, dir, l, b})
	}
	cdir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	natsPort := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		var out, errb strings.Builder
		code := run(ctx, []string{"--data-dir", cdir, "collect", "--port", "-1", "--hosts", "h1,h2", "--poll-interval", "50ms",
			"--routes", hosts[0].b.ClusterURL() + "," + hosts[1].b.ClusterURL(), "--metrics-addr", addr, "--nats-port", fmt.Sprint(natsPort)},
			strings.NewReader(""), &out, &errb)
		done <- result{code, out.String(), errb.String()}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st collector.Status
		resp, err := http.Get("http://" + addr + "/status")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		ok := err == nil
		for _, h := range hosts {
			s := st.Hosts[h.id]
			ok = ok && s.Head == h.l.Head().Seq && s.State == collector.StateLive
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("collect did not mirror both hosts: %+v %v\n%+v", st, err, <-done)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m := get(t, "http://"+addr+"/metrics"); !strings.Contains(m, `leaseledger_collector_lag_events{host="h2"} 0`) {
		t.Errorf("/metrics:\n%s", m)
	}
	// The collector's read-only client port reaches every host's read API.
	if r := runCLI(t, context.Background(), "", "replay", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "--host-id", "h2"); r.code != 0 ||
		strings.Count(r.stdout, "\n") != int(hosts[1].l.Head().Seq) {
		t.Errorf("replay of h2 through the collector's NATS port: %+v", r)
	}
	cancel()
	r := <-done
	if r.code != 0 || !strings.Contains(r.stdout, "collector mirroring h1,h2") {
		t.Fatalf("collect: %+v", r)
	}
	for _, h := range hosts {
		h.b.Close()
		h.l.Close()
	}

	fleet := runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "export")
	if fleet.code != 0 {
		t.Fatalf("--fleet export: %+v", fleet)
	}
	got := map[string]string{}
	for _, line := range strings.SplitAfter(fleet.stdout, "\n") {
		if line == "" {
			continue
		}
		var l struct {
			Host  string          `json:"host"`
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("--fleet export line %q: %v", line, err)
		}
		got[l.Host] += string(l.Event) + "\n"
	}
	for _, h := range hosts {
		if own := exportOf(t, h.dir); got[h.id] != own {
			t.Errorf("--fleet export of %s differs from its own export", h.id)
		}
	}

	if r := runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "verify", "--quiet"); r.code != 0 ||
		strings.Count(r.stdout, "ok: 22 events verified") != 2 || !strings.Contains(r.stdout, "== host h2 ==") ||
		!strings.Contains(r.stdout, "fleet: 2 hosts, 0 failed, 0 refused") {
		t.Errorf("--fleet verify: %+v", r)
	}
	var audit struct {
		Hosts map[string]json.RawMessage `json:"hosts"`
	}
	r = runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "audit", "--all", "--json")
	// Every activation of these hosts is unconfirmed: audit's verdict status, per host and for the fleet.
	if err := json.Unmarshal([]byte(r.stdout), &audit); r.code != exitUnconfirmed || err != nil || len(audit.Hosts) != 2 {
		t.Fatalf("--fleet audit --all --json: %v %+v", err, r)
	}
	for _, h := range hosts {
		own := runCLI(t, context.Background(), "", "--data-dir", collector.HostDir(cdir, h.id), "audit", "--all", "--json")
		var a, b any
		if json.Unmarshal(audit.Hosts[h.id], &a) != nil || json.Unmarshal([]byte(own.stdout), &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("fleet audit of %s differs from its own:\n%s\n%s", h.id, audit.Hosts[h.id], own.stdout)
		}
	}

	// An activation lives on one host: only that host's audit is printed.
	r = runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "audit", "only-h2", "--json")
	audit.Hosts = nil
	if err := json.Unmarshal([]byte(r.stdout), &audit); r.code != exitUnconfirmed || err != nil || len(audit.Hosts) != 1 || audit.Hosts["h2"] == nil {
		t.Errorf("--fleet audit only-h2: %v %+v", err, r)
	}
	if r := runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "audit", "nowhere"); r.code != 1 || !strings.Contains(r.stderr, "on any of 2 hosts") {
		t.Errorf("--fleet audit of an activation no host holds: %+v", r)
	}

	// A refused host: its section says so; the command still reads it.
	f := collector.Finding{Host: "h2", Seq: 7, Stored: "aa", Offered: "bb", Reason: collector.ReasonForked, Time: time.Now()}
	b, _ := json.Marshal(f)
	if err := os.WriteFile(filepath.Join(collector.HostDir(cdir, "h2"), collector.RefusedFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "leases")
	if r.code != 0 || !strings.Contains(r.stdout, "== host h1 ==") ||
		!strings.Contains(r.stdout, "REFUSED by the collector: forked at seq 7") || !strings.Contains(r.stdout, "1 refused") {
		t.Errorf("--fleet leases: %+v", r)
	}
	// verify gates on it: every mirror verifies, yet a refused host fails
	// the run, unless the caller says refused hosts are expected.
	if r := runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "verify", "--quiet"); r.code != exitRefused ||
		strings.Count(r.stdout, "ok: 22 events verified") != 2 || !strings.Contains(r.stdout, "1 refused") ||
		!strings.Contains(r.stderr, "hosts refused by the collector") || !strings.Contains(r.stderr, "[h2]") {
		t.Errorf("--fleet verify with a refused host: %+v", r)
	}
	if r := runCLI(t, context.Background(), "", "--fleet", "--data-dir", cdir, "verify", "--quiet", "--allow-refused"); r.code != 0 ||
		!strings.Contains(r.stdout, "REFUSED by the collector: forked at seq 7") {
		t.Errorf("--fleet verify --allow-refused: %+v", r)
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", collector.HostDir(cdir, "h1"), "verify", "--quiet", "--allow-refused"); r.code == 0 ||
		!strings.Contains(r.stderr, "--fleet verify only") {
		t.Errorf("--allow-refused without --fleet: %+v", r)
	}
	if r := runCLI(t, context.Background(), "", "--fleet", "--data-dir", t.TempDir(), "verify"); r.code == 0 {
		t.Errorf("--fleet on a directory that is no collector's: %+v", r)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
