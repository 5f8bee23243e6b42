package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/bus"
	"github.com/nats-io/nats.go"
)

// appender is what the runtime appends through: *ledger.Ledger locally,
// *bus.Appender remotely.
type appender interface {
	Append(ctx context.Context, drafts ...events.Draft) ([]events.Seq, error)
}

var (
	_ appender = (*ledger.Ledger)(nil)
	_ appender = (*bus.Appender)(nil)
)

func writerAppender(t *testing.T, b *bus.Bus) (*bus.Appender, *nats.Conn) {
	t.Helper()
	nc := connect(t, b.ClientURL(), bus.UserOptions("host", "pw")...)
	return bus.NewAppender(bus.NewClient(nc)), nc
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
	for name, ds := range map[string][]events.Draft{
		"invalid":  {draft("act-1", "s", 1), bad},
		"too many": make([]events.Draft, ledger.MaxAppendEvents+1),
	} {
		_, lerr := local.Append(ctx, ds...)
		_, rerr := app.Append(ctx, ds...)
		for _, target := range []error{events.ErrInvalid, ledger.ErrTooManyEvents} {
			if errors.Is(lerr, target) != errors.Is(rerr, target) {
				t.Fatalf("%s: local %v, remote %v", name, lerr, rerr)
			}
		}
		if rerr == nil || errors.Is(rerr, bus.ErrInDoubt) {
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
// until released.
type gate struct{ release chan struct{} }

func (g *gate) Committed([]ledger.Record) { <-g.release }

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
	var be *bus.Error
	if !errors.Is(err, bus.ErrInDoubt) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &be) || be.Op != "append" {
		t.Fatalf("unanswered append: %v", err)
	}
	close(g.release) // the bus finishes the append it took in
	b.Close()
	if h := l.Head().Seq; h != 1 {
		t.Fatalf("the in-doubt append was not written after all: head %d", h)
	}
	nc.Close()
	_, err = app.Append(context.Background(), draft("act-1", "s", 2))
	if !errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, bus.ErrInDoubt) {
		t.Fatalf("append on a closed connection: %v", err)
	}
}

// Only the writer user may append; the refusal never writes.
func TestAppenderNeedsWriter(t *testing.T) {
	l, b := startBus(t, bus.Options{ReadOnlyUser: "dash", ReadOnlyPassword: "pw", WriterUser: "host", WriterPassword: "pw"})
	nc := connect(t, b.ClientURL(), append(bus.UserOptions("dash", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := bus.NewAppender(bus.NewClient(nc)).Append(ctx, draft("act-1", "s", 1))
	if err == nil || !strings.Contains(err.Error(), "append") {
		t.Fatalf("read-only append: %v", err)
	}
	if l.Head().Seq != 0 {
		t.Fatal("a read-only user appended")
	}
}
