package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Fleet end-to-end tests: real `serve --host-id` processes in
// one NATS cluster, every route through a netproxy.Proxy the test cuts and
// heals, and a real `leaseledger collect` mirroring them.

const (
	// fleetKillAfter, fleetCutAfter, fleetCutFor, fleetCollectorAfter and
	// fleetTrafficFor place the faults of TestFleetEndToEnd in its traffic.
	fleetKillAfter      = 3 * time.Second
	fleetDownFor        = time.Second
	fleetCutAfter       = 2 * time.Second
	fleetCutFor         = 5 * time.Second
	fleetCollectorAfter = 2 * time.Second
	fleetTrafficAfter   = 3 * time.Second
)

// TestFleetEndToEnd: three hosts under concurrent MCP traffic; one host is
// killed (SIGKILL) mid-traffic and restarted on its data directory, one
// is partitioned from the cluster (all its routes cut) and healed, and the
// collector is killed and restarted mid-stream. Afterwards the collector
// mirrors every host up to its head (/status: lag 0), each mirror equals
// its host's own export byte for byte (every (host, seq) once), every
// mirror verifies, and the fleet audit equals the per-host audits.
func TestFleetEndToEnd(t *testing.T) {
	requireNode(t)
	bin := cliBinary(t)
	f := newFleet(t, bin, 3, writeHTTPConfig(t, startEverythingHTTP(t)))
	for _, h := range f.hosts {
		h.start()
	}
	f.collector.start()
	h2, h3 := f.hosts[1], f.hosts[2]

	ctx, stopTraffic := context.WithCancel(context.Background())
	defer stopTraffic()
	var tr []*traffic
	for _, h := range f.hosts {
		tr = append(tr, startTraffic(ctx, h, httpServer))
	}

	// kill -9 h2 mid-traffic; restart it on the same directory and route
	// address (its peers' proxies still point there).
	time.Sleep(fleetKillAfter)
	h2.stop(syscall.SIGKILL)
	time.Sleep(fleetDownFor)
	h2.start()

	// Partition h3: while every route to and from it is cut, the
	// collector's mirror of h3 does not move although h3 keeps appending.
	time.Sleep(fleetCutAfter)
	f.partition(h3.id, true)
	time.Sleep(fleetCutFor / 5)
	before, err := f.collector.status()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(fleetCutFor - fleetCutFor/5)
	during, err := f.collector.status()
	if err != nil {
		t.Fatal(err)
	}
	h3Head, err := h3.head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f.partition(h3.id, false)
	var refused, cut int
	for _, m := range f.proxies {
		for to, p := range m {
			if to == h3.id {
				refused += p.Stats().Refused
				cut += p.Stats().Cuts
			}
		}
	}
	t.Logf("routes to h3: %d connections cut, %d refused while partitioned", cut, refused)
	if during[h3.id].Head != before[h3.id].Head || during[h3.id].Head >= h3Head {
		t.Fatalf("partition of h3 not effective: mirrored %d then %d, h3 at %d", before[h3.id].Head, during[h3.id].Head, h3Head)
	}
	t.Logf("h3 partitioned: mirror at %d, h3 at %d, state %q", during[h3.id].Head, h3Head, during[h3.id].State)

	// kill -9 the collector mid-stream and restart it on its directory.
	time.Sleep(fleetCollectorAfter)
	f.collector.stop(syscall.SIGKILL)
	f.collector.start()
	time.Sleep(fleetTrafficAfter)
	stopTraffic()
	for i, x := range tr {
		<-x.done
		if x.calls.Load() == 0 {
			t.Fatalf("no call succeeded on %s", f.hosts[i].id)
		}
		t.Logf("%s: %d calls, %d failed sessions", f.hosts[i].id, x.calls.Load(), x.failures.Load())
	}

	heads := map[string]uint64{}
	for _, h := range f.hosts {
		if heads[h.id], err = h.head(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	st := f.awaitMirrored(heads)
	t.Logf("mirrored: %+v", st)
	if code := f.collector.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("collect exit %d:\n%s", code, f.collector.out.String())
	}
	for _, h := range f.hosts {
		if code := h.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("%s exit %d:\n%s", h.id, code, h.output())
		}
	}

	perHost := map[string]json.RawMessage{}
	for _, h := range f.hosts {
		own, mirror := exportOf(t, h.dir), exportOf(t, f.collector.mirrorDir(h.id))
		n := seqsOnce(t, h.id+" mirror", mirror)
		if own != mirror {
			ownN := seqsOnce(t, h.id, own)
			t.Fatalf("%s: mirror (%d events) differs from the host's export (%d events, head at quiescence %d)", h.id, n, ownN, heads[h.id])
		}
		if n != heads[h.id] {
			t.Fatalf("%s: mirror holds %d events, host head was %d", h.id, n, heads[h.id])
		}
		if r := runCLI(t, context.Background(), "", "--data-dir", f.collector.mirrorDir(h.id), "verify", "--quiet"); r.code != 0 {
			t.Fatalf("verify of the mirror of %s: %+v", h.id, r)
		}
		r := runCLI(t, context.Background(), "", "--data-dir", h.dir, "audit", "--all", "--json")
		if r.code != 0 && r.code != exitUnconfirmed {
			t.Fatalf("audit of %s: %+v", h.id, r)
		}
		var sum struct {
			Activations int `json:"activations"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || sum.Activations == 0 {
			t.Fatalf("audit of %s audits no activation: %v\n%s", h.id, err, r.stdout)
		}
		perHost[h.id] = json.RawMessage(r.stdout)
	}
	checkFleetAudit(t, f.collector.dir, perHost)
	checkFleetExport(t, f)
}

// checkFleetExport checks that `--fleet export` is every host's own export,
// line for line, each line tagged with its host.
func checkFleetExport(t *testing.T, f *fleet) {
	t.Helper()
	r := runCLI(t, context.Background(), "", "--fleet", "--data-dir", f.collector.dir, "export")
	if r.code != 0 {
		t.Fatalf("fleet export: %+v", r)
	}
	got := map[string]*strings.Builder{}
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var l struct {
			Host  string          `json:"host"`
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("fleet export line %q: %v", line, err)
		}
		if got[l.Host] == nil {
			got[l.Host] = &strings.Builder{}
		}
		got[l.Host].Write(l.Event)
		got[l.Host].WriteByte('\n')
	}
	for _, h := range f.hosts {
		if got[h.id] == nil || got[h.id].String() != exportOf(t, h.dir) {
			t.Fatalf("fleet export of %s differs from the host's own export", h.id)
		}
	}
}

// checkFleetAudit runs the fleet audit on the collector's directory and
// checks that each host's section equals that host's own audit.
func checkFleetAudit(t *testing.T, dir string, perHost map[string]json.RawMessage) {
	t.Helper()
	r := runCLI(t, context.Background(), "", "--fleet", "--data-dir", dir, "audit", "--all", "--json")
	if r.code != 0 && r.code != exitUnconfirmed {
		t.Fatalf("fleet audit: %+v", r)
	}
	var fleetAudit struct {
		Hosts map[string]json.RawMessage `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &fleetAudit); err != nil {
		t.Fatalf("fleet audit output: %v\n%s", err, r.stdout)
	}
	if len(fleetAudit.Hosts) != len(perHost) {
		t.Fatalf("fleet audit has %d hosts, want %d", len(fleetAudit.Hosts), len(perHost))
	}
	for h, want := range perHost {
		var a, b any
		if err := json.Unmarshal(fleetAudit.Hosts[h], &a); err != nil {
			t.Fatalf("fleet audit of %s: %v", h, err)
		}
		_ = json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("fleet audit of %s differs from its own audit:\nfleet: %s\nown:   %s", h, fleetAudit.Hosts[h], want)
		}
	}
}

// TestFleetRefusesResealedHost: a host whose chain is replaced by another
// one under the same host id (stopped, then restarted on a fresh ledger
// with more events: its tail re-sealed) is refused by the collector — a
// finding in /status and REFUSED.json naming the seq and both hashes,
// its mirror left as it was, a restarted collector still refusing it —
// while the other host keeps being mirrored.
func TestFleetRefusesResealedHost(t *testing.T) {
	bin := cliBinary(t)
	f := newFleet(t, bin, 2, "")
	for _, h := range f.hosts {
		h.start()
	}
	f.collector.start()
	h1, h2 := f.hosts[0], f.hosts[1]
	ctx := context.Background()
	for _, h := range f.hosts {
		if err := h.appendLines(ctx, h.id+"-a", 20); err != nil {
			t.Fatal(err)
		}
	}
	heads := map[string]uint64{}
	for _, h := range f.hosts {
		var err error
		if heads[h.id], err = h.head(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.awaitMirrored(heads)
	if code := h2.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("h2 exit %d:\n%s", code, h2.output())
	}
	oldDir := h2.dir

	// The re-sealed chain: a fresh ledger, more events than the mirror
	// holds, so the collector's next seq exists there with another prev.
	h2.dir = t.TempDir()
	var lines strings.Builder
	for i := range int(heads[h2.id]) + 5 {
		lines.WriteString(`{"kind":"lease.terminated","activation":"act-forged-` + strconv.Itoa(i) + `","data":{"reason":"revoked"}}` + "\n")
	}
	if r := runCLI(t, ctx, lines.String(), "--data-dir", h2.dir, "append"); r.code != 0 {
		t.Fatalf("append to the re-sealed chain: %+v", r)
	}
	h2.start()
	if err := h2.appendLines(ctx, "h2-b", 5); err != nil {
		t.Fatal(err)
	}

	refused := func() hostStatus {
		t.Helper()
		deadline := time.Now().Add(fleetConverge)
		for {
			st, err := f.collector.status()
			if err == nil && st[h2.id].State == "refused" {
				return st[h2.id]
			}
			if time.Now().After(deadline) {
				t.Fatalf("h2 not refused: %v %+v\ncollector:\n%s", err, st, f.collector.out.String())
			}
			time.Sleep(fleetPoll)
		}
	}
	s := refused()
	if len(s.Finding) == 0 || string(s.Finding) == "null" {
		t.Fatalf("refused without a finding: %+v", s)
	}
	var finding struct {
		Host    string `json:"host"`
		Seq     uint64 `json:"seq"`
		Stored  string `json:"stored_hash"`
		Offered string `json:"offered_hash"`
		Reason  string `json:"reason"`
		Time    string `json:"time"`
	}
	b, err := os.ReadFile(filepath.Join(f.collector.mirrorDir(h2.id), "REFUSED.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &finding); err != nil || finding.Host != h2.id || finding.Seq == 0 || finding.Seq > heads[h2.id]+1 ||
		finding.Stored == "" || finding.Offered == "" || finding.Stored == finding.Offered || finding.Reason == "" || finding.Time == "" {
		t.Fatalf("REFUSED.json: %v %s", err, b)
	}
	t.Logf("finding: %s", b)

	// h1 keeps being mirrored after h2's refusal, and across a restart
	// of the collector, which keeps refusing h2.
	if err := h1.appendLines(ctx, "h1-b", 10); err != nil {
		t.Fatal(err)
	}
	if heads[h1.id], err = h1.head(ctx); err != nil {
		t.Fatal(err)
	}
	f.awaitMirrored(map[string]uint64{h1.id: heads[h1.id]})
	if code := f.collector.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("collect exit %d:\n%s", code, f.collector.out.String())
	}
	f.collector.start()
	refused()
	if err := h1.appendLines(ctx, "h1-c", 10); err != nil {
		t.Fatal(err)
	}
	if heads[h1.id], err = h1.head(ctx); err != nil {
		t.Fatal(err)
	}
	f.awaitMirrored(map[string]uint64{h1.id: heads[h1.id]})
	if code := f.collector.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("collect exit %d:\n%s", code, f.collector.out.String())
	}
	// The refused host's mirror is its chain before the re-seal, nothing
	// of the forged one.
	if got, own := exportOf(t, f.collector.mirrorDir(h2.id)), exportOf(t, oldDir); got != own {
		t.Fatalf("the refused host's mirror (%d events) is not its chain before the re-seal (%d events)",
			seqsOnce(t, "h2 mirror", got), seqsOnce(t, "h2 before", own))
	}
	for _, h := range f.hosts {
		h.stop(syscall.SIGTERM)
	}
	if own, mirror := exportOf(t, h1.dir), exportOf(t, f.collector.mirrorDir(h1.id)); own != mirror {
		t.Fatal("h1's mirror differs from its export")
	}
}
