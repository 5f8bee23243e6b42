package verify

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// silent is a Pebble logger for tests.
type silent struct{}

func (silent) Infof(string, ...any)           {}
func (silent) Errorf(string, ...any)          {}
func (silent) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

// The two entry points: an open ledger (while it keeps appending) and a
// directory nobody has open.
func TestLedgerAndDir(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		if _, err := l.Append(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "r", CallsInFlight: i}}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Ledger(ctx, l, Options{Anchors: []ledger.Head{l.Head()}})
	if err != nil || rep.Events != 5 || rep.Head != l.Head() || rep.Indexes != 10 {
		t.Fatalf("Ledger: %+v %v", rep, err)
	}
	if _, err := Dir(ctx, dir, Options{}); !errors.Is(err, ledger.ErrLocked) {
		t.Fatalf("Dir on an open ledger: %v, want ErrLocked", err)
	}
	head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Ledger(ctx, l, Options{}); !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("Ledger on a closed ledger: %v", err)
	}
	// Making a checkpoint fails with ErrCheckpoint, whatever the cause.
	if _, err := NewCheckpoint(ctx, l, "origin"); !errors.Is(err, ErrCheckpoint) || !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("NewCheckpoint on a closed ledger: %v", err)
	}
	var last uint64
	rep, err = Dir(ctx, dir, Options{Progress: func(done, _ uint64) { last = done }})
	if err != nil || rep.Head != head || last != 5 {
		t.Fatalf("Dir: %+v %v (progress %d)", rep, err, last)
	}
	_, err = Dir(ctx, dir, Options{Anchors: []ledger.Head{{Seq: 9, Hash: head.Hash}}})
	var ve *Error
	if !errors.As(err, &ve) || !errors.Is(err, ErrVerify) || ve.Op != "anchor" || ve.Fault != FaultAnchor || ve.Seq != 6 {
		t.Fatalf("anchor beyond the chain: %v", err)
	}
	if _, err := Dir(ctx, filepath.Join(dir, "missing"), Options{}); !errors.Is(err, ledger.ErrNoLedger) {
		t.Fatalf("Dir on a missing dir: %v", err)
	}
}
