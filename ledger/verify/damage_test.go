package verify

import (
	"context"
	"errors"
	"testing"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// A damaged sstable block is a verify.Error naming the first seq it could
// not read (FaultUnreadable, wrapping ErrVerify and ledger.ErrCorrupt),
// never a panic; Dir and Ledger agree.
func TestVerifyNamesDamagedStorage(t *testing.T) {
	const n, bad = 400, 200
	dir := t.TempDir()
	ledgertest.WriteFlushed(t, dir, n)
	ctx := context.Background()
	if _, err := Dir(ctx, dir, Options{}); err != nil {
		t.Fatalf("before the damage: %v", err)
	}
	ledgertest.DamageEvent(t, dir, bad)
	check := func(what string, err error) {
		t.Helper()
		var ve *Error
		if !errors.As(err, &ve) || !errors.Is(err, ErrVerify) || !errors.Is(err, ledger.ErrCorrupt) {
			t.Fatalf("%s: %v, want a verify *Error wrapping ledger.ErrCorrupt", what, err)
		}
		if ve.Fault != FaultUnreadable || ve.Op != "chain" || ve.Seq == 0 || ve.Seq > bad || max(ve.Last, ve.Seq) < bad {
			t.Fatalf("%s: %v (seqs %d-%d), want unreadable seqs holding %d", what, err, ve.Seq, ve.Last, bad)
		}
	}
	_, err := Dir(ctx, dir, Options{})
	check("Dir", err)

	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Ledger(ctx, l, Options{})
	check("Ledger", err)
	if st := l.Stats(); st.CorruptReads == 0 || st.Failed {
		t.Fatalf("stats: %+v", st)
	}
}
