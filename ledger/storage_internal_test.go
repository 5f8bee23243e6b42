package ledger

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// Pebble's Fatalf never panics or exits: it fails the write path for good
// (ErrFailed, and ErrNoSpace for a full disk), reads in progress at that
// moment fail with ErrCorrupt, and later reads keep working.
func TestPebbleFatalFailsTheWritePathWithoutPanicking(t *testing.T) {
	l, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	d := events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "r"}}
	if _, err := l.Append(ctx, d); err != nil {
		t.Fatal(err)
	}
	g := l.guard()
	pebbleLogger{l.faults}.Fatalf("pebble: fatal commit error: %v", syscall.ENOSPC)
	if err := g.check("get", 1, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a read during the fatal error: %v", err)
	}
	_, err = l.Append(ctx, d)
	if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append after a fatal error: %v", err)
	}
	if st := l.Stats(); !st.Failed || !errors.Is(st.Failure, ErrNoSpace) || st.CorruptReads != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if _, err := l.Get(1); err != nil {
		t.Fatalf("a read after the fatal error: %v", err)
	}
}
