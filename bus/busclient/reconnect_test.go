package busclient_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// reconnectWait is the pause between reconnection attempts of these
// tests' connections.
const reconnectWait = 10 * time.Millisecond

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A connection made with ConnectOptions never follows the servers its
// cluster advertises: while its host is down it does not reconnect to
// another host of the cluster (where the host's subjects are refused), and
// once the host is back on the URL it was given, it is connected there and
// its requests reach that host again. A plain connection beside it shows
// what the option prevents: it learns the other host and moves there.
func TestClientStaysWithItsServer(t *testing.T) {
	co := func(routes ...string) bus.ClusterOptions {
		return bus.ClusterOptions{Name: "fleet", Listen: "127.0.0.1:-1", Routes: routes}
	}
	dir1, port1 := t.TempDir(), freePort(t)
	start1 := func() (*bus.Bus, func()) {
		l := open(t, dir1)
		b, err := bus.Start(l, bus.Options{Port: port1, HostID: "h1", Cluster: co(), WriterUser: "w", WriterPassword: "pw"})
		if err != nil {
			l.Close()
			t.Fatal(err)
		}
		return b, func() { b.Close(); l.Close() }
	}
	b1, stop1 := start1()
	_, b2 := startBus(t, bus.Options{HostID: "h2", Cluster: co(b1.ClusterURL()), WriterUser: "w", WriterPassword: "pw"})
	url1 := b1.ClientURL()
	port2 := ":" + strconv.Itoa(b2.Server().Addr().(*net.TCPAddr).Port)

	// The cluster advertises h2's client URL to h1's clients.
	plain, err := nats.Connect(url1, append(busclient.UserOptions("w", "pw"), nats.MaxReconnects(-1), nats.ReconnectWait(reconnectWait))...)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	testproc.Eventually(t, "h2 advertised to h1's clients", func() error {
		if !strings.Contains(strings.Join(plain.DiscoveredServers(), " "), port2) {
			return fmt.Errorf("discovered %v", plain.DiscoveredServers())
		}
		return nil
	})

	back := make(chan struct{}, 1)
	nc := connect(t, url1, append(busclient.UserOptions("w", "pw"), nats.MaxReconnects(-1), nats.ReconnectWait(reconnectWait),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case back <- struct{}{}:
			default:
			}
		}))...)
	if d := nc.DiscoveredServers(); len(d) != 0 {
		t.Fatalf("the connection took advertised servers: %v", d)
	}
	if s := nc.Servers(); len(s) != 1 || s[0] != url1 {
		t.Fatalf("servers %v, want only %s", s, url1)
	}
	c := busclient.NewClient(nc).WithHost("h1")
	lines := []byte(`{"kind":"lease.terminated","data":{"reason":"revoked"}}` + "\n")
	if acks, err := c.Append(context.Background(), lines); err != nil || len(acks) != 1 || acks[0].Seq != 1 {
		t.Fatalf("append to h1: %v %v", acks, err)
	}

	stop1()
	// The plain connection follows the cluster to h2; ours waits for h1.
	testproc.Eventually(t, "the plain connection on h2", func() bool { return strings.HasSuffix(plain.ConnectedUrl(), port2) })
	// Ours is reconnecting ("") or has not yet seen h1 go (still url1);
	// on any other server it followed the cluster.
	if u := nc.ConnectedUrl(); u != "" && u != url1 {
		t.Fatalf("our connection moved to %s while h1 was down", u)
	}
	_, stop1 = start1()
	defer stop1()
	select {
	case <-back:
	case <-time.After(testproc.HangBound):
		t.Fatal("the connection did not come back to h1")
	}
	if u := nc.ConnectedUrl(); u != url1 {
		t.Fatalf("reconnected to %s, want %s", u, url1)
	}
	if acks, err := c.Append(context.Background(), lines); err != nil || len(acks) != 1 || acks[0].Seq != 2 {
		t.Fatalf("append to h1 after its restart: %v %v", acks, err)
	}
}

// An append whose connection drops while its answer is awaited is in
// doubt at the drop and sent again under the same idempotency key on the
// same server as soon as the connection is back — not after its request
// timeout: here the timeout is the whole deadline, so waiting for it would
// fail the append.
func TestAppendRetriedOnSameServerAfterRestart(t *testing.T) {
	port := freePort(t)
	startServer := func() *server.Server {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("NATS server not ready")
		}
		return srv
	}
	srv := startServer()
	url := srv.ClientURL()

	var (
		mu   sync.Mutex
		keys []string
	)
	first := make(chan struct{})
	rc := connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(reconnectWait))
	if _, err := rc.Subscribe(busclient.AppendSubject, func(m *nats.Msg) {
		mu.Lock()
		keys = append(keys, m.Header.Get(busclient.HeaderIdempotencyKey))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			close(first) // taken in; the answer is lost with the server
			return
		}
		r := nats.NewMsg(m.Reply)
		r.Data = []byte("1 " + ulid.Make().String() + "\n")
		_ = m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(reconnectWait))
	app := busclient.NewAppender(busclient.NewClient(nc).WithRetry(busclient.RetryPolicy{
		RequestTimeout: testproc.HangBound, Deadline: testproc.HangBound,
		MaxAttempts: 1000, Backoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}))
	type result struct {
		seqs []events.Seq
		err  error
	}
	res := make(chan result, 1)
	go func() {
		seqs, err := app.Append(context.Background(), draft("act-1", "s", 1))
		res <- result{seqs, err}
	}()
	<-first
	srv.Shutdown()
	srv.WaitForShutdown()
	srv = startServer()
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	var r result
	select {
	case r = <-res:
	case <-time.After(2 * testproc.HangBound):
		t.Fatal("the append did not return")
	}
	if r.err != nil || len(r.seqs) != 1 || r.seqs[0] != 1 {
		t.Fatalf("append across the restart: %v %v", r.seqs, r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) < 2 {
		t.Fatalf("attempts %d", len(keys))
	}
	for _, k := range keys {
		if k != keys[0] {
			t.Fatalf("attempts under keys %v: want one key", keys)
		}
	}
}

// A tail whose connection is re-made catches up by replay as soon as it
// is back: events committed while it was away reach it although no live
// event follows them.
func TestTailCatchesUpAfterReconnect(t *testing.T) {
	dir, port := t.TempDir(), freePort(t)
	l := open(t, dir)
	start := func() *bus.Bus {
		b, err := bus.Start(l, bus.Options{Port: port})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start()
	defer func() { b.Close(); l.Close() }()
	nc := connect(t, b.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(reconnectWait))
	got := make(chan events.Seq, 16)
	ctx, cancel := context.WithCancel(context.Background())
	tailDone := make(chan error, 1)
	go func() {
		tailDone <- busclient.NewClient(nc).Tail(ctx, 1, busclient.TailFilter{}, func(seq events.Seq, _ []byte) error {
			got <- seq
			return nil
		})
	}()
	defer func() {
		cancel()
		<-tailDone
	}()
	next := func(want events.Seq) {
		t.Helper()
		select {
		case seq := <-got:
			if seq != want {
				t.Fatalf("tail delivered %d, want %d", seq, want)
			}
		case err := <-tailDone:
			t.Fatalf("tail ended: %v", err)
		case <-time.After(testproc.HangBound):
			t.Fatalf("tail did not deliver %d", want)
		}
	}
	if _, err := l.Append(context.Background(), draft("act-1", "s", 1), draft("act-1", "s", 2)); err != nil {
		t.Fatal(err)
	}
	next(1)
	next(2)
	b.Close()
	// Committed while no bus runs: never published live.
	if _, err := l.Append(context.Background(), draft("act-1", "s", 3), draft("act-1", "s", 4)); err != nil {
		t.Fatal(err)
	}
	b = start()
	next(3)
	next(4)
}
