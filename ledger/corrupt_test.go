package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// damagedLedger is a ledger of n events whose sstable block holding event
// bad was overwritten.
func damagedLedger(t *testing.T, n, bad int) string {
	t.Helper()
	dir := t.TempDir()
	ledgertest.WriteFlushed(t, dir, n)
	ledgertest.DamageEvent(t, dir, bad)
	return dir
}

// wantCorrupt checks that err is an *ledger.Error wrapping ErrCorrupt
// whose seq or range covers bad and starts after the events read before.
func wantCorrupt(t *testing.T, what string, err error, bad ledger.Seq) *ledger.Error {
	t.Helper()
	var le *ledger.Error
	if !errors.Is(err, ledger.ErrCorrupt) || !errors.As(err, &le) {
		t.Fatalf("%s: %v, want an *Error wrapping ErrCorrupt", what, err)
	}
	last := max(le.Last, le.Seq)
	if le.Seq == 0 || le.Seq > bad || last < bad {
		t.Fatalf("%s: %v names seqs %d-%d, want a range holding %d", what, err, le.Seq, le.Last, bad)
	}
	return le
}

// Every read path of an open ledger turns a damaged sstable block into
// ErrCorrupt naming the seqs it could not read: no panic, no Fatalf, and
// the write path keeps working (appends are acknowledged and readable).
func TestDamagedBlockIsAnErrorOnEveryReadPath(t *testing.T) {
	const n, bad = 400, 200
	dir := damagedLedger(t, n, bad)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatalf("open (the damage is not at the head): %v", err)
	}
	defer l.Close()
	ctx := context.Background()

	if _, err := l.Get(bad); err == nil {
		t.Fatal("Get of the damaged event succeeded")
	} else {
		wantCorrupt(t, "Get", err, bad)
	}
	if _, err := l.GetRaw(bad); err == nil {
		t.Fatal("GetRaw of the damaged event succeeded")
	} else {
		wantCorrupt(t, "GetRaw", err, bad)
	}
	if _, err := l.Get(1); err != nil {
		t.Fatalf("Get of a sound event: %v", err)
	}

	var seen ledger.Seq
	err = l.Scan(ctx, ledger.Query{}, func(seq ledger.Seq, _ []byte) error { seen = seq; return nil })
	le := wantCorrupt(t, "Scan", err, bad)
	if le.Seq != seen+1 || le.Last == 0 {
		t.Fatalf("Scan: %v after seq %d: want the range from the first seq not read", err, seen)
	}
	// A range past the damaged block is still served.
	count := 0
	if err := l.Scan(ctx, ledger.Query{From: n - 10}, func(ledger.Seq, []byte) error { count++; return nil }); err != nil || count != 11 {
		t.Fatalf("Scan past the damage: %d events, %v", count, err)
	}
	// Through an index: the e/ value named by the index is unreadable.
	err = l.Scan(ctx, ledger.Query{Activation: ledgertest.Draft(bad).Activation}, func(ledger.Seq, []byte) error { return nil })
	wantCorrupt(t, "Scan by activation", err, bad)

	var evErr error
	for _, err := range l.Events(ctx, ledger.Query{From: bad - 1, To: bad + 1}) {
		if err != nil {
			evErr = err
		}
	}
	wantCorrupt(t, "Events", evErr, bad)

	st := l.Stats()
	if st.CorruptReads < 5 || st.Failed {
		t.Fatalf("stats after damaged reads: %+v", st)
	}
	// The write path is intact: appends are acknowledged and read back.
	seqs, err := l.Append(ctx, ledgertest.Draft(n+1))
	if err != nil || seqs[0] != n+1 {
		t.Fatalf("append after damaged reads: %v %v", seqs, err)
	}
	if _, err := l.Get(n + 1); err != nil {
		t.Fatal(err)
	}
}

// Damage under the head: Open refuses the ledger with ErrCorrupt naming the
// last event; a read-only open does the same.
func TestOpenRefusesADamagedHead(t *testing.T) {
	const n = 300
	dir := damagedLedger(t, n, n)
	for _, ro := range []bool{false, true} {
		_, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: ro})
		var le *ledger.Error
		if !errors.Is(err, ledger.ErrCorrupt) || !errors.As(err, &le) || le.Op != "open" || le.Seq != n {
			t.Fatalf("open (read-only %v) with the last event damaged: %v", ro, err)
		}
	}
}

// A matched retry whose original acknowledgements cannot be read (damaged
// storage) is not reported as a refusal: its events are durable, so the
// error is ErrUnacknowledged (in doubt), never a plain failure.
func TestIdempotentRetryOfUnreadableAcksIsInDoubt(t *testing.T) {
	const n, bad = 400, 200
	dir := t.TempDir()
	id := ledger.Idempotency{Key: "k-200"}
	ledgertest.WriteFlushedWith(t, dir, func(l *ledger.Ledger) {
		for i := 1; i <= n; i++ {
			var err error
			if i == bad {
				_, _, err = l.AppendIdempotent(context.Background(), id, ledgertest.Draft(i))
			} else {
				_, err = l.Append(context.Background(), ledgertest.Draft(i))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	ledgertest.DamageEvent(t, dir, bad)
	l, err := ledger.Open(ledger.Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, _, err = l.AppendIdempotent(context.Background(), id, ledgertest.Draft(bad))
	if !errors.Is(err, ledger.ErrUnacknowledged) || !errors.Is(err, ledger.ErrCorrupt) {
		t.Fatalf("retry of a key whose events cannot be read: %v, want ErrUnacknowledged wrapping ErrCorrupt", err)
	}
	if h := l.Head().Seq; h != n {
		t.Fatalf("the retry wrote: head %d", h)
	}
}
