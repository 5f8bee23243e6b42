package collector_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
)

// bareHost serves host's chain (h's ledger) over the bare head and replay
// subjects only, as a host from before the peer class does in a rolling
// upgrade: the peer-class requests find no responders. While hung (nil:
// never) it takes head requests in and answers none, as a host that hangs
// or whose answers are lost.
func bareHost(t *testing.T, nc *nats.Conn, h *testHost, hung *atomic.Bool) {
	t.Helper()
	hs, err := nc.Subscribe(busclient.HostSubject(h.id, busclient.HeadSubject), func(m *nats.Msg) {
		if hung != nil && hung.Load() {
			return
		}
		head := h.l.Head()
		b, _ := json.Marshal(busclient.HeadReply{Seq: head.Seq, Hash: head.Hash.String()})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := nc.Subscribe(busclient.HostSubject(h.id, busclient.ReplaySubject), func(m *nats.Msg) {
		var req busclient.ReplayRequest
		_ = json.Unmarshal(m.Data, &req)
		reply := nats.NewMsg(m.Reply)
		head := h.l.Head().Seq
		for seq := max(req.From, 1); seq <= head; seq++ {
			raw, err := h.l.GetRaw(seq)
			if err != nil {
				t.Error(err)
				return
			}
			reply.Data = append(append(reply.Data, raw...), '\n')
		}
		reply.Header.Set(busclient.HeaderNext, strconv.FormatUint(uint64(head)+1, 10))
		reply.Header.Set(busclient.HeaderEnd, "true")
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Unsubscribe(); rs.Unsubscribe() })
}

// A host serving no peer-class subjects (an older host in a rolling
// upgrade: no responders there) is mirrored through the bare anonymous
// class instead of being shown unreachable forever.
func TestHostWithoutPeerClassMirrored(t *testing.T) {
	f := newFleet(t)
	l := ledgerOpen(t, t.TempDir()) // h7's ledger; its bus is bareHost
	defer l.Close()
	if _, err := l.BindHost(context.Background(), "h7"); err != nil {
		t.Fatal(err)
	}
	h := &testHost{id: "h7", l: l}
	h.appendN(t, 12, 5)
	bareHost(t, f.nc, h, nil)
	c := f.collector(t.TempDir(), []string{"h7"}, nil)
	defer c.Close()
	head := l.Head().Seq
	waitStatus(t, c, "h7", "mirrored through the bare class", func(s collector.HostStatus) bool {
		return s.Head == head && s.State == collector.StateLive
	})
	assertSameRaws(t, "h7", l, c.Mirror("h7"))
}

// Junk published on a stopped host's event subjects (every PollInterval/2)
// does not hold the host live: the head is still polled every
// PollInterval, and the host becomes unreachable and stays so.
func TestJunkLiveDoesNotHoldStoppedHostLive(t *testing.T) {
	const poll = 100 * time.Millisecond
	f := newFleet(t, "h1")
	f.hosts["h1"].appendN(t, 5, 5)
	c := f.collector(t.TempDir(), []string{"h1"}, func(o *collector.Options) { o.PollInterval = poll })
	defer c.Close()
	f.waitMirrored(c, "h1")
	waitStatus(t, c, "h1", "live", func(s collector.HostStatus) bool { return s.State == collector.StateLive })
	head := f.hosts["h1"].l.Head().Seq
	f.hosts["h1"].stop()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(poll / 2)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				m := nats.NewMsg(busclient.HostSubject("h1", events.Subject((&events.CallAdmitted{}).Kind(), "x")))
				m.Header.Set(busclient.HeaderSeq, strconv.FormatUint(uint64(head+1), 10))
				m.Data = []byte("junk")
				_ = f.nc.PublishMsg(m)
			}
		}
	}()
	defer func() { cancel(); <-done }()
	waitStatusFor(t, c, "h1", "unreachable", 10*poll, func(s collector.HostStatus) bool { return s.State == collector.StateUnreachable })
	// And it stays so while the junk goes on.
	for end := time.Now().Add(5 * poll); time.Now().Before(end); time.Sleep(poll / 10) {
		if s := c.Status().Hosts["h1"]; s.State != collector.StateUnreachable {
			t.Fatalf("host h1 stopped, junk on its subjects: %+v, want it to stay unreachable", s)
		}
	}
}

// A host whose head stops answering (it hangs, or died where no "no
// responders" tells) is unreachable after a poll that was not answered
// within the poll timeout (PollInterval by default), not after the
// client's request timeout; while it is, /metrics carries the time since
// it was last heard; once it answers again it is mirrored up to its head
// and live. Waits on the status, never on a time.
func TestHungHostUnreachableAfterUnansweredPoll(t *testing.T) {
	f := newFleet(t)
	l := ledgerOpen(t, t.TempDir())
	defer l.Close()
	if _, err := l.BindHost(context.Background(), "h7"); err != nil {
		t.Fatal(err)
	}
	h := &testHost{id: "h7", l: l}
	h.appendN(t, 6, 3)
	var hung atomic.Bool
	bareHost(t, f.nc, h, &hung)
	c := f.collector(t.TempDir(), []string{"h7"}, nil)
	defer c.Close()
	head := l.Head()
	live := waitStatus(t, c, "h7", "live at the host's head", func(s collector.HostStatus) bool {
		return s.Head == head.Seq && s.State == collector.StateLive
	})
	env, err := l.Get(head.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if live.LastHeard.IsZero() || !live.HeadTime.Equal(env.Time) {
		t.Fatalf("live status: last heard %v, head time %v (the head event's: %v)", live.LastHeard, live.HeadTime, env.Time)
	}
	metrics := func() string {
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	for _, series := range []string{`leaseledger_collector_last_heard_age_seconds{host="h7"}`, `leaseledger_collector_mirrored_head_age_seconds{host="h7"}`} {
		if m := metrics(); !strings.Contains(m, series) {
			t.Fatalf("/metrics has no %s:\n%s", series, m)
		}
	}

	hung.Store(true)
	down := waitStatus(t, c, "h7", "unreachable", func(s collector.HostStatus) bool { return s.State == collector.StateUnreachable })
	if down.LastError == "" || down.LastHeard.IsZero() {
		t.Errorf("unreachable status: %+v, want the poll's error and the last time heard", down)
	}
	if m := metrics(); !strings.Contains(m, `leaseledger_collector_last_heard_age_seconds{host="h7"}`) {
		t.Fatalf("/metrics of an unreachable host has no last-heard age:\n%s", m)
	}

	h.appendN(t, 4, 2) // written while the host was not heard
	hung.Store(false)
	back := l.Head().Seq
	waitStatus(t, c, "h7", "live again at the host's head", func(s collector.HostStatus) bool {
		return s.Head == back && s.State == collector.StateLive
	})
	assertSameRaws(t, "h7", l, c.Mirror("h7"))
}
