package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// TestAppendRefusesHostBound: every append entry point refuses a call
// holding a host.bound (alone or in the middle of a batch) with
// ErrReservedKind naming the kind, writes nothing of the call and leaves
// the head and the binding as they were; BindHost still writes it.
func TestAppendRefusesHostBound(t *testing.T) {
	ctx := context.Background()
	l := open(t, t.TempDir())
	defer l.Close()
	if _, err := l.Append(ctx, draft("a1", "s1", 0)); err != nil {
		t.Fatal(err)
	}
	bound := events.Draft{Payload: &events.HostBound{Host: "h2"}}
	batch := []events.Draft{draft("a1", "s1", 1), bound, draft("a1", "s1", 2)}
	prepared := make([]events.Prepared, len(batch))
	for i, d := range batch {
		p, err := events.Prepare(d)
		if err != nil {
			t.Fatal(err)
		}
		prepared[i] = p
	}
	calls := map[string]func() error{
		"Append":           func() error { _, err := l.Append(ctx, bound); return err },
		"Append batch":     func() error { _, err := l.Append(ctx, batch...); return err },
		"AppendAcks batch": func() error { _, err := l.AppendAcks(ctx, batch...); return err },
		"AppendAsync batch": func() error {
			wait, err := l.AppendAsync(ctx, batch...)
			if wait != nil {
				t.Errorf("AppendAsync refused but returned a wait")
			}
			return err
		},
		"AppendPreparedAsync batch": func() error {
			wait, err := l.AppendPreparedAsync(ctx, prepared...)
			if wait != nil {
				t.Errorf("AppendPreparedAsync refused but returned a wait")
			}
			return err
		},
		"AppendIdempotent batch": func() error {
			_, _, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "k-hostbound"}, batch...)
			return err
		},
	}
	head := l.Head()
	for name, call := range calls {
		err := call()
		if !errors.Is(err, ledger.ErrReservedKind) || !strings.Contains(fmt.Sprint(err), "host.bound") {
			t.Errorf("%s: %v, want ErrReservedKind naming host.bound", name, err)
		}
		if l.Head() != head {
			t.Fatalf("%s wrote: head %d → %d", name, head.Seq, l.Head().Seq)
		}
	}
	// Nothing was queued either: the next append follows the head, and the
	// key of the refused keyed call is not remembered.
	acks, replayed, err := l.AppendIdempotent(ctx, ledger.Idempotency{Key: "k-hostbound"}, draft("a1", "s1", 3))
	if err != nil || replayed || len(acks) != 1 || acks[0].Seq != head.Seq+1 {
		t.Fatalf("append after the refusals: %+v replayed %v, %v", acks, replayed, err)
	}
	if seq, host, err := l.BoundHost(); err != nil || seq != 0 || host != "" {
		t.Fatalf("BoundHost after the refusals: %d %q, %v", seq, host, err)
	}
	seq, err := l.BindHost(ctx, "h1")
	if err != nil || seq != head.Seq+2 {
		t.Fatalf("BindHost: seq %d, %v", seq, err)
	}
}

// TestImportKeepsHostBound: a mirror imports a chain holding host.bound
// verbatim, and its binding reads back.
func TestImportKeepsHostBound(t *testing.T) {
	ctx := context.Background()
	src := open(t, t.TempDir())
	defer src.Close()
	if _, err := src.BindHost(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	appendVaried(t, src, 0, 10)
	m := openMirror(t, t.TempDir())
	defer m.Close()
	head, err := m.Import(ctx, rawsOf(t, src))
	if err != nil || head != src.Head() {
		t.Fatalf("Import: head %+v (source %+v), %v", head, src.Head(), err)
	}
	if seq, host, err := m.BoundHost(); err != nil || seq != 1 || host != "h1" {
		t.Fatalf("mirror BoundHost: %d %q, %v", seq, host, err)
	}
}

// Appendable says whether a kind may be appended; every append call
// refuses, with nothing written, what it refuses.
func ExampleAppendable() {
	fmt.Println(ledger.Appendable("lease.terminated"))
	err := ledger.Appendable(events.KindHostBound)
	fmt.Println(errors.Is(err, ledger.ErrReservedKind))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// ledger: kind written only by the ledger itself: host.bound (only BindHost writes it: serve --host-id binds the host)
}
