package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// openLedger opens a ledger in a temporary directory, closed when the test
// ends (after the buses started later, whose cleanups run first).
func openLedger(t *testing.T, opts ledger.Options) *ledger.Ledger {
	t.Helper()
	opts.Dir = t.TempDir()
	l, err := ledger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// startFleet starts a fleet bus on a random port, closed when the test ends.
func startFleet(t *testing.T, opts bus.FleetOptions) *bus.Fleet {
	t.Helper()
	opts.Port = bus.RandomPort
	f, err := bus.StartFleet(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// raws returns the stored bytes of seqs from..to of l.
func raws(t *testing.T, l *ledger.Ledger, from, to ledger.Seq) [][]byte {
	t.Helper()
	var out [][]byte
	for seq := from; seq <= to; seq++ {
		raw, err := l.GetRaw(seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(raw))
	}
	return out
}

// The fleet answers each space from that space's ledger exactly as a bus
// started on the same ledger (its twin) does: same bodies, same headers,
// same chunks for each class.
func TestFleetServesEachSpace(t *testing.T) {
	hosts, counts := []string{"h1", "h2", "h3"}, []int{0, 7, 300}
	var spaces []bus.Space
	twins := map[string]*bus.Bus{}
	for i, h := range hosts {
		l := openLedger(t, ledger.Options{})
		if counts[i] > 0 {
			appendActivation(t, l, counts[i], h+"-a")
		}
		spaces = append(spaces, bus.Space{HostID: h, Ledger: l})
		twin, err := bus.Start(l, bus.Options{Port: bus.RandomPort, HostID: h, ReadOnlyUser: "dash", ReadOnlyPassword: "pw"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { twin.Close() })
		twins[h] = twin
	}
	f := startFleet(t, bus.FleetOptions{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", Spaces: spaces})
	requests := []struct{ subject, body string }{
		{busclient.HeadSubject, ""},
		{busclient.ReplaySubject, `{"from":1}`},
		{busclient.ReplaySubject, `{"from":2,"to":3}`},
		{busclient.ReplaySubject, `{"from":130}`},
		{busclient.ReplaySubject, `{"from":1,"activation":"h3-a","max_events":5}`},
		{busclient.ReplaySubject, `{"from":1,"kind":"call.admitted"}`},
		{busclient.ReplaySubject, `{"from":1,"activation":"no such"}`},
		{busclient.ReplaySubject, `{"from":"x"}`},
	}
	for _, u := range []struct{ name, pass string }{{"", ""}, {"dash", "pw"}} {
		fc := connect(t, f.ClientURL(), busclient.UserOptions(u.name, u.pass)...)
		for i, h := range hosts {
			tc := connect(t, twins[h].ClientURL(), busclient.UserOptions(u.name, u.pass)...)
			for _, r := range requests {
				subject := busclient.UserSubject(busclient.HostSubject(h, r.subject), u.name)
				got, err := fc.Request(subject, []byte(r.body), 5*time.Second)
				if err != nil {
					t.Fatalf("user %q host %s %s %s: %v", u.name, h, r.subject, r.body, err)
				}
				want, err := tc.Request(subject, []byte(r.body), 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Data, want.Data) || !reflect.DeepEqual(got.Header, want.Header) {
					t.Errorf("user %q host %s %s %s: fleet answered %v %q, its twin %v %q", u.name, h, r.subject, r.body, got.Header, got.Data, want.Header, want.Data)
				}
			}
			// The whole chain, through the client, is the space's ledger.
			var seen [][]byte
			c := busclient.NewClient(fc).WithHost(h)
			if _, err := c.Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(_ events.Seq, raw []byte) error {
				seen = append(seen, bytes.Clone(raw))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			l := spaces[i].Ledger
			if want := raws(t, l, 1, l.Head().Seq); !reflect.DeepEqual(seen, want) {
				t.Errorf("user %q host %s: replayed %d events, the ledger holds %d", u.name, h, len(seen), len(want))
			}
			if head, err := c.Head(context.Background()); err != nil || head.Seq != l.Head().Seq || head.Hash != l.Head().Hash.String() {
				t.Errorf("user %q host %s: head %+v %v, ledger %+v", u.name, h, head, err, l.Head())
			}
		}
		if _, err := busclient.NewClient(fc).WithHost("h9").Head(context.Background()); err == nil {
			t.Errorf("user %q: a host without a space answered", u.name)
		}
	}
}

// Events committed after the start — appended, or imported into a mirror —
// arrive on their host's subjects in order; FleetEventSubjects sees every
// space's; checkpoints go to their host's subject.
func TestFleetPublishesCommits(t *testing.T) {
	l1 := openLedger(t, ledger.Options{})
	appendActivation(t, l1, 2, "before")
	src := openLedger(t, ledger.Options{})
	mirror := openLedger(t, ledger.Options{Mirror: true})
	f := startFleet(t, bus.FleetOptions{Spaces: []bus.Space{{HostID: "h1", Ledger: l1}, {HostID: "h2", Ledger: mirror}}})
	nc := connect(t, f.ClientURL())
	subs := map[string]*nats.Subscription{}
	for _, s := range []string{busclient.HostSubject("h1", busclient.EventSubjects()), busclient.HostSubject("h2", busclient.EventSubjects()),
		busclient.FleetEventSubjects(), busclient.HostSubject(events.Wildcard, busclient.CheckpointSubject)} {
		sub, err := nc.SubscribeSync(s)
		if err != nil {
			t.Fatal(err)
		}
		subs[s] = sub
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	appendActivation(t, l1, 3, "after")
	appendActivation(t, src, 4, "imported")
	for _, batch := range [][2]ledger.Seq{{1, 2}, {3, 4}} {
		if _, err := mirror.Import(context.Background(), raws(t, src, batch[0], batch[1])); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][][]byte{"h1": raws(t, l1, 3, 5), "h2": raws(t, src, 1, 4)}
	firstSeq := map[string]int{"h1": 3, "h2": 1}
	next := func(sub *nats.Subscription) *nats.Msg {
		t.Helper()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", sub.Subject, err)
		}
		return m
	}
	check := func(h string, i int, m *nats.Msg) {
		t.Helper()
		if got, ok := busclient.HostOfSubject(m.Subject); !ok || got != h || !strings.HasPrefix(m.Subject, busclient.HostSubject(h, events.SubjectPrefix)) {
			t.Errorf("event %d of %s on %s", i, h, m.Subject)
		}
		if !bytes.Equal(m.Data, want[h][i]) || m.Header.Get(busclient.HeaderSeq) != strconv.Itoa(firstSeq[h]+i) {
			t.Errorf("event %d of %s: seq %s, %q", i, h, m.Header.Get(busclient.HeaderSeq), m.Data)
		}
	}
	for _, h := range []string{"h1", "h2"} {
		sub := subs[busclient.HostSubject(h, busclient.EventSubjects())]
		for i := range want[h] {
			check(h, i, next(sub))
		}
		if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("%s: unexpected %s", h, m.Subject)
		}
	}
	n := map[string]int{}
	for range len(want["h1"]) + len(want["h2"]) {
		m := next(subs[busclient.FleetEventSubjects()])
		h, _ := busclient.HostOfSubject(m.Subject)
		check(h, n[h], m)
		n[h]++
	}
	if err := f.PublishCheckpoint("h2", []byte("signed")); err != nil {
		t.Fatal(err)
	}
	if m := next(subs[busclient.HostSubject(events.Wildcard, busclient.CheckpointSubject)]); m.Subject != busclient.HostSubject("h2", busclient.CheckpointSubject) || string(m.Data) != "signed" {
		t.Errorf("checkpoint on %s: %q", m.Subject, m.Data)
	}
	if err := f.PublishCheckpoint("h9", []byte("signed")); !errors.Is(err, bus.ErrOptions) {
		t.Errorf("checkpoint of a host without a space: %v", err)
	}
}

// Nobody may publish events, checkpoints or appends on a fleet bus, and it
// has no control user: AccessControl services are refused at start.
func TestFleetIsReadOnly(t *testing.T) {
	l := openLedger(t, ledger.Options{})
	appendActivation(t, l, 2, "a")
	f := startFleet(t, bus.FleetOptions{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", Spaces: []bus.Space{{HostID: "h1", Ledger: l}}})
	watcher := connect(t, f.ClientURL())
	events1, err := watcher.SubscribeSync(busclient.FleetEventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	_ = watcher.Flush()
	q := func(s string) string { return busclient.HostSubject("h1", s) }
	for _, u := range []struct{ name, pass string }{{"", ""}, {"dash", "pw"}} {
		perm := make(chan error, 16)
		nc := connect(t, f.ClientURL(), append(busclient.UserOptions(u.name, u.pass),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))...)
		for _, subject := range []string{
			q(events.Subject("lease.terminated", events.NoActivation)), q(busclient.CheckpointSubject),
			q(busclient.AppendSubject), busclient.UserSubject(q(busclient.AppendSubject), u.name),
			busclient.UserSubject(q(busclient.AppendSubject), "writer"), busclient.AppendSubject,
		} {
			if err := nc.Publish(subject, []byte(`{"kind":"lease.terminated","payload":{"reason":"x"}}`)); err != nil {
				t.Fatal(err)
			}
			_ = nc.Flush()
			select {
			case err := <-perm:
				if !strings.Contains(err.Error(), "Permissions Violation") {
					t.Fatalf("user %q on %s: %v", u.name, subject, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("user %q: publishing on %s was not refused", u.name, subject)
			}
		}
	}
	if m, err := events1.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("an event was published on %s", m.Subject)
	}
	if h := l.Head().Seq; h != 2 {
		t.Errorf("head %d after the attempts, want 2", h)
	}
	if _, err := nats.Connect(f.ClientURL(), nats.UserInfo("writer", "pw")); err == nil {
		t.Error("a user the fleet does not have was admitted")
	}
	control := []bus.Service{{Subject: controlSubject, Access: bus.AccessControl, Handle: echo(new(atomic.Int64))}}
	for name, opts := range map[string]bus.FleetOptions{
		"space":       {Spaces: []bus.Space{{HostID: "h1", Ledger: l, Services: control}}},
		"fleet-level": {Spaces: []bus.Space{{HostID: "h1", Ledger: l}}, Services: control},
	} {
		opts.Port = bus.RandomPort
		if f, err := bus.StartFleet(opts); !errors.Is(err, bus.ErrOptions) {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s control service: %v", name, err)
		}
	}
}

// Fleet-level services answer in the bare space, a space's in its host's,
// to anonymous clients and the read-only user; DenyAnonymous refuses
// anonymous clients.
func TestFleetServices(t *testing.T) {
	status := bus.Service{Subject: "leaseledger.api.fleet.status", Access: bus.AccessRead,
		Handle: func(_ context.Context, caller string, _ []byte) ([]byte, error) {
			return []byte("status:" + caller), nil
		}}
	hostEcho := func(h string) []bus.Service {
		return []bus.Service{{Subject: readSubject, Access: bus.AccessRead,
			Handle: func(_ context.Context, caller string, body []byte) ([]byte, error) {
				return []byte(h + ":" + caller + ":" + string(body)), nil
			}}}
	}
	var spaces []bus.Space
	for _, h := range []string{"h1", "h2"} {
		spaces = append(spaces, bus.Space{HostID: h, Ledger: openLedger(t, ledger.Options{}), Services: hostEcho(h)})
	}
	for _, deny := range []bool{false, true} {
		f := startFleet(t, bus.FleetOptions{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", DenyAnonymous: deny, Spaces: spaces, Services: []bus.Service{status}})
		if nc, err := nats.Connect(f.ClientURL()); (err == nil) == deny {
			t.Fatalf("DenyAnonymous %v: anonymous client: %v", deny, err)
		} else if err == nil {
			nc.Close()
		}
		for _, u := range []struct{ name, pass string }{{"", ""}, {"dash", "pw"}} {
			if deny && u.name == "" {
				continue
			}
			nc := connect(t, f.ClientURL(), busclient.UserOptions(u.name, u.pass)...)
			for subject, want := range map[string]string{
				status.Subject:                           "status:" + u.name,
				busclient.HostSubject("h1", readSubject): "h1:" + u.name + ":x",
				busclient.HostSubject("h2", readSubject): "h2:" + u.name + ":x",
			} {
				m, err := call(nc, subject, u.name, []byte("x"), 5*time.Second)
				if err != nil || string(m.Data) != want || m.Header.Get(busclient.HeaderError) != "" {
					t.Errorf("DenyAnonymous %v user %q %s: %v %v %q, want %q", deny, u.name, subject, err, m.Header, m.Data, want)
				}
			}
		}
	}
}

// Invalid fleet options are refused with ErrOptions and start nothing.
func TestFleetOptionsRefused(t *testing.T) {
	l := openLedger(t, ledger.Options{})
	space := func(h string) bus.Space { return bus.Space{HostID: h, Ledger: l} }
	tooMany := make([]bus.Space, bus.MaxFleetSpaces+1)
	for i := range tooMany {
		tooMany[i] = space(fmt.Sprintf("h%d", i))
	}
	for name, opts := range map[string]bus.FleetOptions{
		"no spaces":        {},
		"too many":         {Spaces: tooMany},
		"empty host":       {Spaces: []bus.Space{space("")}},
		"dotted host":      {Spaces: []bus.Space{space("a.b")}},
		"wildcard host":    {Spaces: []bus.Space{space("*")}},
		"duplicate host":   {Spaces: []bus.Space{space("h1"), space("h2"), space("h1")}},
		"no ledger":        {Spaces: []bus.Space{{HostID: "h1"}}},
		"reserved user":    {Spaces: []bus.Space{space("h1")}, ReadOnlyUser: "leaseledger", ReadOnlyPassword: "pw"},
		"user no password": {Spaces: []bus.Space{space("h1")}, ReadOnlyUser: "dash"},
		"bad service":      {Spaces: []bus.Space{{HostID: "h1", Ledger: l, Services: []bus.Service{{Subject: "leaseledger.api.replay", Access: bus.AccessRead, Handle: echo(new(atomic.Int64))}}}}},
		"bad fleet service": {Spaces: []bus.Space{space("h1")},
			Services: []bus.Service{{Subject: "other.status", Access: bus.AccessRead, Handle: echo(new(atomic.Int64))}}},
	} {
		opts.Port = bus.RandomPort
		f, err := bus.StartFleet(opts)
		if !errors.Is(err, bus.ErrOptions) || f != nil {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
	// The bound itself is served.
	f := startFleet(t, bus.FleetOptions{Spaces: tooMany[:bus.MaxFleetSpaces]})
	nc := connect(t, f.ClientURL())
	if head, err := busclient.NewClient(nc).WithHost(fmt.Sprintf("h%d", bus.MaxFleetSpaces-1)).Head(context.Background()); err != nil || head.Seq != l.Head().Seq {
		t.Errorf("last of MaxFleetSpaces spaces: %+v %v", head, err)
	}
}

// A publication that fails (here: an event larger than the server's
// payload limit) is logged with its space's host and skipped, as on a Bus;
// the next events are published, and the head counts the skipped one.
func TestFleetPublishFailureLogged(t *testing.T) {
	const maxPayload = 640
	var logs syncBuffer
	l := openLedger(t, ledger.Options{})
	f := startFleet(t, bus.FleetOptions{Spaces: []bus.Space{{HostID: "h1", Ledger: l}}, Limits: bus.Limits{MaxPayload: maxPayload},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	nc := connect(t, f.ClientURL())
	sub, err := nc.SubscribeSync(busclient.FleetEventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	big := events.Draft{Activation: "a1", Payload: &events.HTTPRegistered{Ref: "h-1", Scope: "request", Method: events.HTTPPost,
		Origin: "https://" + strings.Repeat("o", events.MaxTextLen-len("https://.example")) + ".example"}}
	if _, err := l.Append(context.Background(), big, draft("a1", "s", 1)); err != nil {
		t.Fatal(err)
	}
	if raw := raws(t, l, 1, 2); len(raw[0]) <= maxPayload || len(raw[1]) > maxPayload-200 {
		t.Fatalf("test events of %d and %d bytes do not straddle the limit %d", len(raw[0]), len(raw[1]), maxPayload)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || m.Header.Get(busclient.HeaderSeq) != "2" {
		t.Fatalf("after the failed publication: %v %v", err, m)
	}
	if s := logs.String(); !strings.Contains(s, "bus: publish failed") || !strings.Contains(s, "host=h1 seq=1") {
		t.Errorf("log %q", s)
	}
	if head, err := busclient.NewClient(nc).WithHost("h1").Head(context.Background()); err != nil || head.Seq != 2 {
		t.Errorf("head %+v %v", head, err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
