package busclient_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// appender is what the runtime appends through: *ledger.Ledger locally,
// *busclient.Appender remotely.
type appender interface {
	Append(ctx context.Context, drafts ...events.Draft) ([]events.Seq, error)
}

var (
	_ appender = (*ledger.Ledger)(nil)
	_ appender = (*busclient.Appender)(nil)
)

func writerAppender(t *testing.T, b *bus.Bus) (*busclient.Appender, *nats.Conn) {
	t.Helper()
	nc := connect(t, b.ClientURL(), busclient.UserOptions("host", "pw")...)
	return busclient.NewAppender(busclient.NewClient(nc)), nc
}

func mixedDrafts() []events.Draft {
	return []events.Draft{
		draft("act-1", "s1", 1),
		{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked", CallsInFlight: 2}},
		{Session: "s1", Payload: &events.SessionEnded{LeasesTerminated: 2, SharedSpared: 1}},
		{Payload: &events.LeaseTerminated{Reason: "terminate_all"}},
	}
}

// Same drafts, local and remote: the same events, byte for byte apart from
// what the ledger assigns (seq, id, time, prev, hash).
func TestAppenderMatchesLocal(t *testing.T) {
	remote, b := startBus(t, bus.Options{WriterUser: "host", WriterPassword: "pw"})
	local := open(t, t.TempDir())
	defer local.Close()
	app, _ := writerAppender(t, b)
	ctx := context.Background()
	for round := range 3 {
		want, err := local.Append(ctx, mixedDrafts()...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := app.Append(ctx, mixedDrafts()...)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: seqs %v, local %v", round, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("round %d: seqs %v, local %v", round, got, want)
			}
			r, err := remote.Get(got[i])
			if err != nil {
				t.Fatal(err)
			}
			l, _ := local.Get(want[i])
			if strip(r) != strip(l) {
				t.Fatalf("seq %d differs:\nremote %s\nlocal  %s", got[i], strip(r), strip(l))
			}
		}
	}
	if remote.Head().Seq != local.Head().Seq {
		t.Fatalf("heads %d and %d", remote.Head().Seq, local.Head().Seq)
	}
	if seqs, err := app.Append(ctx); seqs != nil || err != nil {
		t.Fatalf("empty append: %v %v", seqs, err)
	}
}

// strip returns env's canonical bytes with everything the ledger assigns
// zeroed.
func strip(env events.Envelope) string {
	env.Seq, env.ID, env.Time, env.Prev, env.Hash = 1, [16]byte{}, time.Unix(0, 0), events.Hash{}, events.Hash{}
	return string(env.AppendCanonical(nil, false))
}

// Refusals match the local ledger's and write nothing.
func TestAppenderRefusesLikeLocal(t *testing.T) {
	remote, b := startBus(t, bus.Options{WriterUser: "host", WriterPassword: "pw"})
	local := open(t, t.TempDir())
	defer local.Close()
	app, _ := writerAppender(t, b)
	ctx := context.Background()
	bad := draft("act-1", "s", 2)
	bad.Activation = "not valid!"
	for name, c := range map[string]struct {
		drafts        []events.Draft
		local, remote error
	}{
		"invalid":  {[]events.Draft{draft("act-1", "s", 1), bad}, events.ErrInvalid, events.ErrInvalid},
		"too many": {make([]events.Draft, busclient.MaxAppendEvents+1), ledger.ErrTooManyEvents, busclient.ErrTooManyEvents},
	} {
		_, lerr := local.Append(ctx, c.drafts...)
		_, rerr := app.Append(ctx, c.drafts...)
		if !errors.Is(lerr, c.local) || !errors.Is(rerr, c.remote) {
			t.Fatalf("%s: local %v, remote %v", name, lerr, rerr)
		}
		var be *busclient.Error
		if !errors.As(rerr, &be) || be.Op != "append" || errors.Is(rerr, busclient.ErrInDoubt) || errors.Is(rerr, busclient.ErrRemote) {
			t.Fatalf("%s: %v", name, rerr)
		}
	}
	var fe *events.FieldError
	if _, err := app.Append(ctx, bad); !errors.As(err, &fe) || fe.Field != "activation" {
		t.Fatalf("the refusal does not name the field: %v", err)
	}
	if remote.Head().Seq != 0 || local.Head().Seq != 0 {
		t.Fatal("a refused append wrote events")
	}
}

// gate holds every committed batch before its appenders are acknowledged,
// until released. entered, when set, is closed when the first batch
// arrives.
type gate struct {
	release, entered chan struct{}
	once             sync.Once
}

func (g *gate) Committed([]ledger.Record) {
	if g.entered != nil {
		g.once.Do(func() { close(g.entered) })
	}
	<-g.release
}

// A request that was sent but not answered is in doubt, and really may be
// written; one that never left is not.
func TestAppenderInDoubt(t *testing.T) {
	g := &gate{release: make(chan struct{})}
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir(), BeforeAck: g})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, WriterUser: "host", WriterPassword: "pw"})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	defer l.Close()
	defer b.Close()
	app, nc := writerAppender(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = app.Append(ctx, draft("act-1", "s", 1))
	var be *busclient.Error
	if !errors.Is(err, busclient.ErrInDoubt) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &be) || be.Op != "append" {
		t.Fatalf("unanswered append: %v", err)
	}
	close(g.release) // the bus finishes the append it took in
	b.Close()
	if h := l.Head().Seq; h != 1 {
		t.Fatalf("the in-doubt append was not written after all: head %d", h)
	}
	nc.Close()
	_, err = app.Append(context.Background(), draft("act-1", "s", 2))
	if !errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, busclient.ErrInDoubt) {
		t.Fatalf("append on a closed connection: %v", err)
	}
}

// A connection that closes while the reply is awaited leaves the append in
// doubt (nats.ErrConnectionClosed comes after the request was published),
// and the append is indeed written.
func TestAppenderInDoubtWhenConnectionCloses(t *testing.T) {
	g := &gate{release: make(chan struct{}), entered: make(chan struct{})}
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir(), BeforeAck: g})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, WriterUser: "host", WriterPassword: "pw"})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	defer l.Close()
	defer b.Close()
	app, nc := writerAppender(t, b)
	res := make(chan error, 1)
	go func() {
		_, err := app.Append(context.Background(), draft("act-1", "s", 1))
		res <- err
	}()
	select {
	case <-g.entered: // the bus took the request in and committed it
	case <-time.After(30 * time.Second):
		t.Fatal("the append never reached the ledger")
	}
	nc.Close()
	select {
	case err = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("Append did not return after its connection closed")
	}
	var be *busclient.Error
	if !errors.Is(err, busclient.ErrInDoubt) || !errors.Is(err, nats.ErrConnectionClosed) || !errors.As(err, &be) || be.Op != "append" {
		t.Fatalf("append whose connection closed while waiting: %v", err)
	}
	close(g.release)
	b.Close()
	if h := l.Head().Seq; h != 1 {
		t.Fatalf("the in-doubt append was not written after all: head %d", h)
	}
}

// scripted starts a bare NATS server whose append subject is answered by
// respond (nil: no responder), and returns a client connected to it.
func scripted(t *testing.T, respond func(m *nats.Msg)) *busclient.Client {
	t.Helper()
	return scriptedOn(t, busclient.AppendSubject, respond)
}

// scriptedOn is scripted with subject answered instead of the append one.
func scriptedOn(t *testing.T, subject string, respond func(m *nats.Msg)) *busclient.Client {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	if respond != nil {
		rc := connect(t, srv.ClientURL())
		if _, err := rc.Subscribe(subject, respond); err != nil {
			t.Fatal(err)
		}
		if err := rc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return busclient.NewClient(connect(t, srv.ClientURL()))
}

// Each answer the bus may give (and some it never gives) maps to "refused,
// nothing written", "in doubt" or success — never a doubt to a refusal.
func TestAppenderReplies(t *testing.T) {
	const id = "01J9Z3K7ABCDEFGHJKMNPQRSTV"
	reply := func(body string, hdr ...string) func(*nats.Msg) {
		return func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			r.Data = []byte(body)
			for i := 0; i+1 < len(hdr); i += 2 {
				r.Header.Set(hdr[i], hdr[i+1])
			}
			_ = m.RespondMsg(r)
		}
	}
	type want struct{ inDoubt, remote, noResponders bool }
	for name, c := range map[string]struct {
		respond func(*nats.Msg)
		want    want
	}{
		"refused":        {reply("", busclient.HeaderError, "line 1: invalid event"), want{remote: true}},
		"failed sync":    {reply("", busclient.HeaderError, "ledger: failed: sync", busclient.HeaderInDoubt, "true"), want{inDoubt: true}},
		"malformed acks": {reply("1 not-a-ulid\n"), want{inDoubt: true}},
		"missing acks":   {reply(""), want{inDoubt: true}},
		"no responder":   {nil, want{noResponders: true}},
		"acknowledged":   {reply("7 " + id + "\n"), want{}},
	} {
		app := busclient.NewAppender(scripted(t, c.respond).WithRetry(busclient.RetryPolicy{MaxAttempts: 1}))
		seqs, err := app.Append(context.Background(), draft("act-1", "s", 1))
		got := want{errors.Is(err, busclient.ErrInDoubt), errors.Is(err, busclient.ErrRemote), errors.Is(err, nats.ErrNoResponders)}
		if got != c.want || (err == nil) != (c.want == want{}) {
			t.Errorf("%s: %v (seqs %v)", name, err, seqs)
		}
		if err == nil && (len(seqs) != 1 || seqs[0] != 7) {
			t.Errorf("%s: seqs %v", name, seqs)
		}
	}
}

// Only the writer user may append; the refusal never writes.
func TestAppenderNeedsWriter(t *testing.T) {
	l, b := startBus(t, bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", WriterUser: "host", WriterPassword: "pw"})
	nc := connect(t, b.ClientURL(), append(busclient.UserOptions("dash", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := busclient.NewAppender(busclient.NewClient(nc)).Append(ctx, draft("act-1", "s", 1))
	if err == nil || !strings.Contains(err.Error(), "append") {
		t.Fatalf("read-only append: %v", err)
	}
	if l.Head().Seq != 0 {
		t.Fatal("a read-only user appended")
	}
}

// An append whose answer is late is retried under its key: the caller gets
// the original seqs once the ledger has them, and the events are written
// once, however many attempts reached the bus.
func TestAppenderRetriesInDoubtUnderItsKey(t *testing.T) {
	g := &gate{release: make(chan struct{}), entered: make(chan struct{})}
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir(), BeforeAck: g})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, WriterUser: "host", WriterPassword: "pw"})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	defer l.Close()
	defer b.Close()
	nc := connect(t, b.ClientURL(), busclient.UserOptions("host", "pw")...)
	app := busclient.NewAppender(busclient.NewClient(nc).WithRetry(busclient.RetryPolicy{
		RequestTimeout: 100 * time.Millisecond, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Deadline: 30 * time.Second}))
	res := make(chan []events.Seq, 1)
	go func() {
		seqs, err := app.Append(context.Background(), draft("act-1", "s", 1), draft("act-1", "s", 2))
		if err != nil {
			t.Error(err)
		}
		res <- seqs
	}()
	<-g.entered
	time.Sleep(500 * time.Millisecond) // several attempts time out meanwhile
	close(g.release)
	seqs := <-res
	if len(seqs) != 2 || seqs[0] != 1 || seqs[1] != 2 || l.Head().Seq != 2 {
		t.Fatalf("seqs %v, head %d: want 1, 2 written once", seqs, l.Head().Seq)
	}
	// The same key and lines again: the original acks, nothing written.
	c := busclient.NewClient(nc)
	lines := []byte(`{"kind":"lease.terminated","data":{"reason":"revoked"}}` + "\n")
	first, err := c.AppendWithKey(context.Background(), "k-1", lines)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.AppendWithKey(context.Background(), "k-1", lines)
	if err != nil || len(again) != 1 || again[0] != first[0] || l.Head().Seq != 3 {
		t.Fatalf("replayed key: %v %v (first %v), head %d", again, err, first, l.Head().Seq)
	}
	other := []byte(`{"kind":"lease.terminated","data":{"reason":"terminate_all"}}` + "\n")
	if _, err := c.AppendWithKey(context.Background(), "k-1", other); !errors.Is(err, busclient.ErrIdempotencyConflict) || !errors.Is(err, busclient.ErrRemote) || errors.Is(err, busclient.ErrInDoubt) {
		t.Fatalf("the key reused for other lines: %v", err)
	}
	if _, err := c.AppendWithKey(context.Background(), "bad key", lines); !errors.Is(err, busclient.ErrIdempotencyKey) {
		t.Fatalf("invalid key: %v", err)
	}
}

// Once an attempt may have been written, a later failure never turns the
// append into "not written".
func TestAppenderKeepsDoubtAcrossAttempts(t *testing.T) {
	var calls int
	var mu sync.Mutex
	c := scripted(t, func(m *nats.Msg) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			return // no answer: in doubt
		}
		r := nats.NewMsg(m.Reply)
		r.Header.Set(busclient.HeaderError, "too busy")
		_ = m.RespondMsg(r)
	})
	app := busclient.NewAppender(c.WithRetry(busclient.RetryPolicy{RequestTimeout: 100 * time.Millisecond, Backoff: time.Millisecond, MaxAttempts: 3}))
	_, err := app.Append(context.Background(), draft("act-1", "s", 1))
	if !errors.Is(err, busclient.ErrInDoubt) {
		t.Fatalf("a refusal after an unanswered attempt: %v", err)
	}
}
