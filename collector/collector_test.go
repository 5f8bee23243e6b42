package collector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"
)

var three = []string{"h1", "h2", "h3"}

// Every mirrored event was verified and stored once: after concurrent
// appends on three hosts (some before the collector started, the rest
// live), each mirror equals its host byte for byte, the mirrors' own
// commits hold each seq exactly once, and Imported counts those commits.
func TestMirrorEqualsSource(t *testing.T) {
	f := newFleet(t, three...)
	f.appendConcurrently(300, three...) // caught up by replay
	w := newWrites()
	c := f.collector(t.TempDir(), three, w.watch)
	defer c.Close()
	f.appendConcurrently(700, three...) // mostly live
	f.waitMirrored(c, three...)
	st := c.Status()
	for _, id := range three {
		assertSameRaws(t, id, f.hosts[id].l, c.Mirror(id))
		if s := st.Hosts[id]; s.State != collector.StateLive || s.Lag != 0 {
			t.Errorf("host %s: %+v, want live, no lag", id, s)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range three {
		w.assertOnce(t, id, f.hosts[id].l)
		if s := c.Status().Hosts[id]; s.Imported != w.count(id) {
			t.Errorf("host %s: Imported %d, the mirror stored %d events", id, s.Imported, w.count(id))
		}
	}
}

// Twin: the live path (subscription, drained batches) stores exactly what
// the replay path (a collector started after every append) stores.
func TestLiveEqualsReplay(t *testing.T) {
	f := newFleet(t, "h1", "h2")
	live := f.collector(t.TempDir(), []string{"h1", "h2"}, func(o *collector.Options) { o.PollInterval = time.Hour })
	defer live.Close()
	f.waitMirrored(live, "h1", "h2")
	f.appendConcurrently(2000, "h1", "h2")
	f.waitMirrored(live, "h1", "h2")
	replayed := f.collector(t.TempDir(), []string{"h1", "h2"}, nil)
	defer replayed.Close()
	f.waitMirrored(replayed, "h1", "h2")
	for _, id := range []string{"h1", "h2"} {
		assertSameRaws(t, id, replayed.Mirror(id), live.Mirror(id))
		assertSameRaws(t, id, f.hosts[id].l, live.Mirror(id))
	}
}

// Exactly once across restarts: a collector closed mid-stream and
// started again on its directory resumes from each mirror's head; the
// mirrors' commits of both runs hold each seq exactly once, and the two
// runs' Imported add up to them.
func TestCollectorRestartMidStream(t *testing.T) {
	f := newFleet(t, three...)
	dir := t.TempDir()
	var wg sync.WaitGroup
	wg.Go(func() { f.appendConcurrently(1500, three...) })
	w := newWrites() // watches the mirrors of both runs
	c1 := f.collector(dir, three, w.watch)
	waitStatus(t, c1, "h1", "started", func(s collector.HostStatus) bool { return s.Head > 50 })
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := f.collector(dir, three, w.watch)
	wg.Wait()
	f.waitMirrored(c2, three...)
	for _, id := range three {
		assertSameRaws(t, id, f.hosts[id].l, c2.Mirror(id))
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range three {
		w.assertOnce(t, id, f.hosts[id].l)
		a, b := c1.Status().Hosts[id].Imported, c2.Status().Hosts[id].Imported
		if a+b != w.count(id) {
			t.Errorf("host %s: Imported %d+%d over two runs, the mirror stored %d events", id, a, b, w.count(id))
		}
	}
}

// A host that goes away is reported unreachable without delaying the
// others; events it wrote while its bus was down (never published) are
// filled by replay when it returns.
func TestHostRestartHolesFilled(t *testing.T) {
	f := newFleet(t, three...)
	c := f.collector(t.TempDir(), three, nil)
	defer c.Close()
	f.appendConcurrently(100, three...)
	f.waitMirrored(c, three...)

	h2 := f.hosts["h2"]
	h2.stop()
	waitStatus(t, c, "h2", "unreachable", func(s collector.HostStatus) bool { return s.State == collector.StateUnreachable })
	f.appendConcurrently(200, "h1", "h3")
	f.waitMirrored(c, "h1", "h3") // h2 down does not hold them up

	// Events committed with no bus publishing them: only replay can bring them.
	l := ledgerOpen(t, h2.dir)
	(&testHost{id: "h2", l: l}).appendN(t, 250, 10)
	l.Close()
	h2 = f.start("h2")
	h2.appendN(t, 50, 3)
	f.waitMirrored(c, three...)
	for _, id := range three {
		assertSameRaws(t, id, f.hosts[id].l, c.Mirror(id))
	}
}

func ledgerOpen(t *testing.T, dir string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A host that re-seals its tail (history rewritten after the mirror took
// it) is refused with a persisted finding naming the seq and both hashes;
// the mirror keeps the history it verified, and a restarted collector
// keeps refusing the host until the finding is removed.
func TestForkedHostRefused(t *testing.T) {
	f := newFleet(t, "h1", "h2")
	dir := t.TempDir()
	c := f.collector(dir, []string{"h1", "h2"}, nil)
	f.appendConcurrently(40, "h1", "h2")
	f.waitMirrored(c, "h1", "h2")
	h1 := f.hosts["h1"]
	before := h1.l.Head()
	h1.stop()
	ledgertest.Fork(t, h1.dir, before.Seq-5)
	h1 = f.start("h1")
	h1.appendN(t, 20, 4) // a different tail past the mirrored head
	s := waitStatus(t, c, "h1", "refused", func(s collector.HostStatus) bool { return s.State == collector.StateRefused })
	fd := s.Finding
	if fd == nil || fd.Reason != collector.ReasonForked || fd.Host != "h1" || fd.Seq <= before.Seq-5 || fd.Seq > before.Seq+1 ||
		fd.Stored == "" || fd.Offered == "" || fd.Stored == fd.Offered || fd.Time.IsZero() {
		t.Fatalf("finding %+v, want a fork after seq %d with both hashes", fd, before.Seq-5)
	}
	if got := c.Mirror("h1").Head(); got != before {
		t.Errorf("mirror head %v after the refusal, want the verified %v", got, before)
	}
	h2 := f.hosts["h2"]
	h2.appendN(t, 30, 5)
	f.waitMirrored(c, "h2") // the refusal is h1's alone
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	var onDisk collector.Finding
	b, err := os.ReadFile(filepath.Join(collector.HostDir(dir, "h1"), collector.RefusedFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &onDisk); err != nil || onDisk.Seq != fd.Seq || onDisk.Stored != fd.Stored || onDisk.Offered != fd.Offered || onDisk.Reason != fd.Reason {
		t.Fatalf("persisted finding %s (%v), want %+v", b, err, fd)
	}

	c = f.collector(dir, []string{"h1", "h2"}, nil)
	if s := c.Status().Hosts["h1"]; s.State != collector.StateRefused || s.Finding == nil || s.Finding.Seq != fd.Seq {
		t.Errorf("after restart h1 is %+v, want still refused", s)
	}
	h1.appendN(t, 5, 1)
	h2.appendN(t, 5, 1)
	f.waitMirrored(c, "h2")
	if got := c.Mirror("h1").Head(); got != before {
		t.Errorf("refused host mirrored on: head %v, want %v", got, before)
	}
	c.Close()

	// The operator removes the finding: the fork is met again and refused again.
	if err := os.Remove(filepath.Join(collector.HostDir(dir, "h1"), collector.RefusedFile)); err != nil {
		t.Fatal(err)
	}
	c = f.collector(dir, []string{"h1"}, nil)
	defer c.Close()
	waitStatus(t, c, "h1", "refused again", func(s collector.HostStatus) bool { return s.State == collector.StateRefused })
}

// A host whose chain's host.bound names another host is refused before
// anything past it is stored.
func TestWrongHostBoundRefused(t *testing.T) {
	f := newFleet(t, "h1")
	f.startDir("h2", filepath.Join(f.root, "impostor"), "someone-else")
	f.hosts["h2"].appendN(t, 10, 10)
	c := f.collector(t.TempDir(), []string{"h1", "h2"}, nil)
	defer c.Close()
	s := waitStatus(t, c, "h2", "refused", func(s collector.HostStatus) bool { return s.State == collector.StateRefused })
	if s.Finding == nil || s.Finding.Reason != collector.ReasonHostMismatch || s.Finding.Seq != 1 || !strings.Contains(s.Finding.Detail, "someone-else") {
		t.Fatalf("finding %+v, want host-mismatch at seq 1 naming someone-else", s.Finding)
	}
	if s.Head != 0 {
		t.Errorf("mirror of the impostor holds %d events, want none", s.Head)
	}
	f.hosts["h1"].appendN(t, 10, 2)
	f.waitMirrored(c, "h1")
}

// peerSubject is host's request subject s as the collector calls it: in
// the peer class (busclient.PeerClass).
func peerSubject(host, s string) string {
	return busclient.UserSubject(busclient.HostSubject(host, s), busclient.PeerClass)
}

// fakeHost serves raws as host's chain over its head and replay API: a
// host whose bus hands out whatever bytes it likes.
func fakeHost(t *testing.T, nc *nats.Conn, host string, raws [][]byte) {
	t.Helper()
	last, err := events.Decode(raws[len(raws)-1])
	if err != nil {
		t.Fatal(err)
	}
	hs, err := nc.Subscribe(peerSubject(host, busclient.HeadSubject), func(m *nats.Msg) {
		b, _ := json.Marshal(busclient.HeadReply{Seq: events.Seq(len(raws)), Hash: last.Hash.String()})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := nc.Subscribe(peerSubject(host, busclient.ReplaySubject), func(m *nats.Msg) {
		var req busclient.ReplayRequest
		_ = json.Unmarshal(m.Data, &req)
		reply := nats.NewMsg(m.Reply)
		for seq := max(req.From, 1); seq <= events.Seq(len(raws)); seq++ {
			reply.Data = append(append(reply.Data, raws[seq-1]...), '\n')
		}
		reply.Header.Set(busclient.HeaderNext, strconv.Itoa(len(raws)+1))
		reply.Header.Set(busclient.HeaderEnd, "true")
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Unsubscribe(); rs.Unsubscribe() })
}

// A host whose chain breaks (an event whose hash does not recompute) is
// refused with a chain-broken finding; nothing from the bad event on is
// stored.
func TestBrokenChainRefused(t *testing.T) {
	f := newFleet(t)
	l := ledgerOpen(t, t.TempDir()) // h5's ledger; its bus is fakeHost
	defer l.Close()
	if _, err := l.BindHost(context.Background(), "h5"); err != nil {
		t.Fatal(err)
	}
	h := &testHost{id: "h5", l: l}
	h.appendN(t, 9, 3)
	var raws [][]byte
	for seq := events.Seq(1); seq <= h.l.Head().Seq; seq++ {
		raw, err := h.l.GetRaw(seq)
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, raw)
	}
	raws[6] = bytes.Replace(raws[6], []byte(`"echo"`), []byte(`"ECHO"`), 1) // seq 7 altered after sealing
	fakeHost(t, f.nc, "h5", raws)
	c := f.collector(t.TempDir(), []string{"h5"}, nil)
	defer c.Close()
	s := waitStatus(t, c, "h5", "refused", func(s collector.HostStatus) bool { return s.State == collector.StateRefused })
	if s.Finding == nil || s.Finding.Reason != collector.ReasonChainBroken || s.Finding.Seq != 7 {
		t.Fatalf("finding %+v, want chain-broken at seq 7", s.Finding)
	}
	if s.Head >= 7 {
		t.Errorf("mirror head %d: the broken event (or a later one) was stored", s.Head)
	}
	if _, err := os.Stat(filepath.Join(collector.HostDir(c.Dir(), "h5"), collector.RefusedFile)); err != nil {
		t.Error(err)
	}
}

// stalledHost answers host's head API with head (so the collector wants
// to catch up) and swallows every replay request: a host that is reachable
// but never delivers, until the returned stop is called.
func stalledHost(t *testing.T, nc *nats.Conn, host string, head events.Seq) (requests *atomic.Int64) {
	t.Helper()
	requests = new(atomic.Int64)
	hs, err := nc.Subscribe(peerSubject(host, busclient.HeadSubject), func(m *nats.Msg) {
		b, _ := json.Marshal(busclient.HeadReply{Seq: head, Hash: strings.Repeat("ab", 32)})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := nc.Subscribe(peerSubject(host, busclient.ReplaySubject), func(*nats.Msg) { requests.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Unsubscribe(); rs.Unsubscribe() })
	return requests
}

// A slow host never delays another: while h9's replay hangs, h1's events
// are mirrored, and h9's lag is visible.
func TestSlowHostDoesNotBlockOthers(t *testing.T) {
	f := newFleet(t, "h1")
	stalled := stalledHost(t, f.nc, "h9", 1000)
	c := f.collector(t.TempDir(), []string{"h9", "h1"}, nil)
	defer c.Close()
	waitStatus(t, c, "h9", "catching up", func(s collector.HostStatus) bool {
		return s.State == collector.StateCatchingUp && stalled.Load() > 0
	})
	f.hosts["h1"].appendN(t, 500, 7)
	f.waitMirrored(c, "h1")
	assertSameRaws(t, "h1", f.hosts["h1"].l, c.Mirror("h1"))
	if s := c.Status().Hosts["h9"]; s.Lag != 1000 || s.Head != 0 {
		t.Errorf("stalled host %+v, want lag 1000", s)
	}
}

// A full per-host buffer is a recorded drop, never a block: a burst far
// larger than the buffer is mirrored completely (holes filled by replay)
// and the drops are counted.
func TestBufferOverflowFilledByReplay(t *testing.T) {
	f := newFleet(t, "h1")
	w := newWrites()
	c := f.collector(t.TempDir(), []string{"h1"}, func(o *collector.Options) { o.BufferLen = 2; o.ImportBatchEvents = 16; w.watch(o) })
	defer c.Close()
	f.waitMirrored(c, "h1")
	for range 3 {
		f.hosts["h1"].appendN(t, ledger.MaxAppendEvents, ledger.MaxAppendEvents) // one publication burst each
	}
	f.waitMirrored(c, "h1")
	assertSameRaws(t, "h1", f.hosts["h1"].l, c.Mirror("h1"))
	if s := c.Status().Hosts["h1"]; s.Dropped == 0 {
		t.Errorf("%+v: want drops recorded", s)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	w.assertOnce(t, "h1", f.hosts["h1"].l)
}

// Per-host lag and rejected live messages are exposed on /status and
// /metrics.
func TestStatusAndMetrics(t *testing.T) {
	f := newFleet(t, "h1")
	stalledHost(t, f.nc, "h9", 1000)
	f.hosts["h1"].appendN(t, 20, 20)
	c := f.collector(t.TempDir(), []string{"h1", "h9"}, nil)
	defer c.Close()
	f.waitMirrored(c, "h1")
	waitStatus(t, c, "h9", "lagging", func(s collector.HostStatus) bool { return s.Lag == 1000 })
	f.publishLive("h1", events.Subject((&events.CallAdmitted{}).Kind(), "x"), 1, []byte(`{"seq":1,"junk":true}`))
	waitRejected(t, c, "h1", 1, f.hosts["h1"].l.Head().Seq)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()

	var st struct {
		Hosts map[string]struct {
			Head, HostHead, Lag uint64
			State               string
		} `json:"hosts"`
	}
	body := get(t, srv.URL+"/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status %s: %v", body, err)
	}
	head := uint64(f.hosts["h1"].l.Head().Seq)
	if h := st.Hosts["h1"]; h.Head != head || h.State != collector.StateLive || h.Lag != 0 {
		t.Errorf("/status h1 %+v, want head %d live", h, head)
	}
	if !strings.Contains(body, `"host_head":1000`) || !strings.Contains(body, `"lag":1000`) {
		t.Errorf("/status %s: want h9 host_head and lag 1000", body)
	}
	m := get(t, srv.URL+"/metrics")
	for _, want := range []string{
		`leaseledger_collector_lag_events{host="h9"} 1000`,
		`leaseledger_collector_host_head_seq{host="h9"} 1000`,
		`leaseledger_collector_lag_events{host="h1"} 0`,
		`leaseledger_collector_refused{host="h1"} 0`,
		`leaseledger_collector_mirrored_head_seq{host="h1"} ` + itoa(head),
		`leaseledger_collector_imported_events_total{host="h1"} ` + itoa(head),
		`leaseledger_collector_live_rejected_total{host="h1"} 1`,
		`leaseledger_collector_live_rejected_total{host="h9"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, m)
		}
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func TestOptionsRefused(t *testing.T) {
	nc := &nats.Conn{}
	for _, o := range []collector.Options{
		{Hosts: []string{"h1"}, Conn: nc},
		{Dir: t.TempDir(), Hosts: []string{"h1"}},
		{Dir: t.TempDir(), Conn: nc},
		{Dir: t.TempDir(), Hosts: []string{"h1", "h1"}, Conn: nc},
		{Dir: t.TempDir(), Hosts: []string{"h.1"}, Conn: nc},
		{Dir: t.TempDir(), Hosts: []string{"h1"}, Conn: nc, Verifiers: map[string]note.Verifier{"h2": nil}},
	} {
		if _, err := collector.Start(o); !errors.Is(err, collector.ErrOptions) {
			t.Errorf("Start(%+v) = %v, want ErrOptions", o, err)
		}
	}
}

var _ = context.Background
