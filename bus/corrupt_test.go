package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// An anonymous replay that reaches a damaged sstable block is answered with
// an error naming the seqs it cannot read; the bus stays up (a second
// request, head and a replay past the damage, is still answered) and
// appends are still acknowledged: the write path is intact.
func TestReplayOfDamagedStorageLeavesTheBusUp(t *testing.T) {
	const n, bad = 400, 200
	dir := t.TempDir()
	ledgertest.WriteFlushed(t, dir, n)
	ledgertest.DamageEvent(t, dir, bad)
	quiet := slog.New(slog.DiscardHandler)
	l, err := ledger.Open(ledger.Options{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, Logger: quiet, WriterUser: "w", WriterPassword: "pw"})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	defer func() { b.Close(); l.Close() }()
	ctx := context.Background()
	c := busclient.NewClient(connect(t, b.ClientURL())) // anonymous

	for range 2 {
		_, err = c.Replay(ctx, 1, 0, busclient.TailFilter{}, func(ledger.Seq, []byte) error { return nil })
		var be *busclient.Error
		if !errors.Is(err, busclient.ErrRemote) || !errors.As(err, &be) || !strings.Contains(be.Reply, "storage damaged, seqs ") {
			t.Fatalf("replay over the damage: %v", err)
		}
	}
	if h, err := c.Head(ctx); err != nil || h.Seq != n {
		t.Fatalf("head after the damaged replay: %+v %v", h, err)
	}
	got := 0
	if _, err := c.Replay(ctx, n-5, 0, busclient.TailFilter{}, func(ledger.Seq, []byte) error { got++; return nil }); err != nil || got != 6 {
		t.Fatalf("replay past the damage: %d events, %v", got, err)
	}
	w := busclient.NewAppender(busclient.NewClient(connect(t, b.ClientURL(), busclient.UserOptions("w", "pw")...)))
	if seqs, err := w.Append(ctx, ledgertest.Draft(n+1)); err != nil || seqs[0] != n+1 {
		t.Fatalf("append after the damaged replay: %v %v", seqs, err)
	}
	if st := l.Stats(); st.CorruptReads < 2 || st.Failed {
		t.Fatalf("stats: %+v", st)
	}
}
