package bus_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Shared with the other bus suite (package bustest).
var (
	fp       = bustest.Digest
	draft    = bustest.Draft
	open     = bustest.Open
	startBus = bustest.Start
	connect  = bustest.Connect
)

func TestBusPublishesAfterCommit(t *testing.T) {
	l, b := startBus(t, bus.Options{})
	if !strings.HasPrefix(b.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("bus not on loopback: %s", b.ClientURL())
	}
	nc := connect(t, b.ClientURL())
	sub, err := nc.SubscribeSync(busclient.EventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	acks, err := l.AppendAcks(context.Background(), draft("act-1", "s", 1), events.Draft{Payload: &events.LeaseTerminated{Reason: events.TerminatedRevoked}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"leaseledger.events.call.admitted.act-1", "leaseledger.events.lease.terminated._"} {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != want {
			t.Errorf("subject %q, want %q", m.Subject, want)
		}
		if m.Header.Get(busclient.HeaderMsgID) != acks[i].ID.String() || m.Header.Get(busclient.HeaderSeq) != strconv.Itoa(int(acks[i].Seq)) {
			t.Errorf("headers %v, ack %+v", m.Header, acks[i])
		}
		seq, _ := strconv.Atoi(m.Header.Get(busclient.HeaderSeq))
		if raw, err := l.GetRaw(ledger.Seq(seq)); err != nil || string(raw) != string(m.Data) {
			t.Errorf("published bytes differ from the durable event: %v", err)
		}
	}
}

func appendN(t *testing.T, l *ledger.Ledger, n int) {
	t.Helper()
	const per = 100
	for i := 0; i < n; i += per {
		ds := make([]events.Draft, min(per, n-i))
		for j := range ds {
			ds[j] = draft(fmt.Sprintf("a%d", (i+j)%5), "s", i+j)
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadOnlyUsers(t *testing.T) {
	l, b := startBus(t, bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw"})
	appendN(t, l, 10)
	for name, opts := range map[string][]nats.Option{
		"named":     busclient.UserOptions("dash", "pw"),
		"anonymous": nil,
	} {
		perm := make(chan error, 4)
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))
		nc := connect(t, b.ClientURL(), opts...)
		if err := nc.Publish(events.Subject("lease.terminated", events.NoActivation), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		select {
		case err := <-perm:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: publishing on an event subject was not refused", name)
		}
		n := 0
		if _, err := busclient.NewClient(nc).Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(events.Seq, []byte) error { n++; return nil }); err != nil || n != 10 {
			t.Fatalf("%s: replay %d events: %v", name, n, err)
		}
	}
	if _, err := nats.Connect(b.ClientURL(), nats.UserInfo("dash", "wrong")); err == nil {
		t.Fatal("wrong password accepted")
	}
}

func TestDenyAnonymous(t *testing.T) {
	_, b := startBus(t, bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", DenyAnonymous: true})
	if nc, err := nats.Connect(b.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("anonymous client admitted")
	}
	connect(t, b.ClientURL(), busclient.UserOptions("dash", "pw")...)
}

func TestAppendOverBus(t *testing.T) {
	l, b := startBus(t, bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", WriterUser: "host", WriterPassword: "pw2"})
	ctx := context.Background()
	lines := []byte(`{"kind":"lease.terminated","activation":"a1","data":{"reason":"revoked"}}
{"kind":"session.ended","session":"s1","data":{"leases_terminated":2,"shared_spared":1}}
`)
	w := busclient.NewClient(connect(t, b.ClientURL(), busclient.UserOptions("host", "pw2")...))
	acks, err := w.Append(ctx, lines)
	if err != nil || len(acks) != 2 || acks[0].Seq != 1 || acks[1].Seq != 2 {
		t.Fatalf("append: %v %v", acks, err)
	}
	if env, err := l.Get(2); err != nil || env.ID != acks[1].ID || env.Session != "s1" {
		t.Fatalf("stored %+v %v", env, err)
	}
	// All or nothing: one bad line refuses the request and names the line.
	bad := append(append([]byte{}, lines...), []byte(`{"kind":"lease.terminated","data":{"reason":"NOT OK"}}`)...)
	if _, err := w.Append(ctx, bad); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad line: %v", err)
	}
	if l.Head().Seq != 2 {
		t.Fatalf("a refused request wrote events: head %d", l.Head().Seq)
	}
	// Read-only and anonymous users cannot append.
	for _, opts := range [][]nats.Option{busclient.UserOptions("dash", "pw"), nil} {
		ro := busclient.NewClient(connect(t, b.ClientURL(), opts...))
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := ro.Append(rctx, lines)
		cancel()
		if err == nil {
			t.Fatal("read-only user appended")
		}
	}
	if l.Head().Seq != 2 {
		t.Fatalf("read-only append wrote events: head %d", l.Head().Seq)
	}
}

// A reply subject is chosen by the requester: naming an event subject must
// not make the ledger publish there (it would poison every tail).
func TestReplyInjectionRefused(t *testing.T) {
	l, b := startBus(t, bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", WriterUser: "w", WriterPassword: "pw2"})
	appendN(t, l, 5)
	watcher := connect(t, b.ClientURL())
	// Only the injected subject: the five events appended above may still
	// be on their way to subscribers of everything.
	sub, err := watcher.SubscribeSync(events.Subject("lease.revoked", "act-9"))
	if err != nil {
		t.Fatal(err)
	}
	_ = watcher.Flush()
	ctx := context.Background()
	for i, opts := range [][]nats.Option{nil, busclient.UserOptions("dash", "pw"), busclient.UserOptions("w", "pw2")} {
		nc := connect(t, b.ClientURL(), append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
		for _, subj := range []string{busclient.ReplaySubject, busclient.HeadSubject, busclient.AppendSubject} {
			_ = nc.PublishRequest(subj, events.Subject("lease.revoked", "act-9"), []byte(`{"from":1}`))
		}
		// A barrier instead of a wait: each API subject is served in order,
		// so once a proper request on it is answered, the injected one
		// before it has been handled (and anything it published was sent
		// before that answer).
		c := busclient.NewClient(nc)
		if _, err := c.Head(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Replay(ctx, 1, 1, busclient.TailFilter{}, func(events.Seq, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // only the writer may call append at all
			if _, err := c.Append(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A round trip from the watcher: everything the server sent it before
	// is in the subscription's queue now.
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 0 {
		m, _ := sub.NextMsg(0)
		t.Fatalf("the ledger published %q on an event subject at a requester's bidding", m.Subject)
	}
	if l.Head().Seq != 5 {
		t.Fatalf("head moved to %d", l.Head().Seq)
	}
}

// Named users read replies only on their own inbox prefix: another user
// (or an anonymous client) cannot subscribe to them.
func TestInboxesArePrivate(t *testing.T) {
	_, b := startBus(t, bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", WriterUser: "w", WriterPassword: "pw2"})
	perm := make(chan error, 8)
	spy := connect(t, b.ClientURL(), append(busclient.UserOptions("dash", "pw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))...)
	if _, err := spy.SubscribeSync(busclient.InboxPrefix("w") + ".>"); err != nil {
		t.Fatal(err)
	}
	_ = spy.Flush()
	select {
	case err := <-perm:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read-only user subscribed to the writer's inbox")
	}
}

func TestEmptyPasswordsRefused(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	for _, o := range []bus.Options{{WriterUser: "w"}, {ReadOnlyUser: "r"}, {ReadOnlyUser: "a.b", ReadOnlyPassword: "x"}} {
		o.Port = bus.RandomPort
		if b, err := bus.Start(l, o); err == nil {
			b.Close()
			t.Fatalf("Start(%+v) accepted", o)
		}
	}
}
