package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// TestBindHostEmpty: on an empty ledger host.bound becomes seq 1.
func TestBindHostEmpty(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	seq, err := l.BindHost(context.Background(), "h1")
	if err != nil || seq != 1 {
		t.Fatalf("BindHost: seq %d, %v", seq, err)
	}
	env, err := l.Get(1)
	if err != nil || env.Kind != events.KindHostBound || env.Prev != (events.Hash{}) {
		t.Fatalf("seq 1: %+v, %v", env, err)
	}
	if _, err := l.BindHost(context.Background(), "not a host"); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("invalid host id: %v", err)
	}
}

// TestBindHostAgain: binding the same host again, also after a reopen and
// after other events, returns the first seq and writes nothing.
func TestBindHostAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := open(t, dir)
	if _, err := l.BindHost(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	appendVaried(t, l, 0, 20)
	l.Close()
	l = open(t, dir)
	defer l.Close()
	head := l.Head()
	seq, err := l.BindHost(ctx, "h1")
	if err != nil || seq != 1 {
		t.Fatalf("BindHost again: seq %d, %v", seq, err)
	}
	if l.Head() != head {
		t.Fatalf("a repeated bind wrote: head %d → %d", head.Seq, l.Head().Seq)
	}
}

// TestBindHostMismatch: a ledger bound to h1 refuses h2 with
// ErrHostMismatch naming both, and writes nothing.
func TestBindHostMismatch(t *testing.T) {
	ctx := context.Background()
	l := open(t, t.TempDir())
	defer l.Close()
	if _, err := l.BindHost(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	_, err := l.BindHost(ctx, "h2")
	if !errors.Is(err, ledger.ErrHostMismatch) || !strings.Contains(err.Error(), `"h1"`) || !strings.Contains(err.Error(), `"h2"`) {
		t.Fatalf("bind another host: %v", err)
	}
	if l.Head().Seq != 1 {
		t.Fatalf("a refused bind wrote: head %d", l.Head().Seq)
	}
}

// TestBindHostLate: a ledger written before its host was named gets
// host.bound at head+1.
func TestBindHostLate(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	appendVaried(t, l, 0, 7)
	seq, err := l.BindHost(context.Background(), "h1")
	if err != nil || seq != 8 {
		t.Fatalf("late bind: seq %d, %v", seq, err)
	}
	if s, host, err := l.BoundHost(); s != 8 || host != "h1" || err != nil {
		t.Fatalf("BoundHost: %d %q %v", s, host, err)
	}
}

// TestBindHostUsesKindIndex: with events before and after the binding
// overwritten with garbage, decoding the log fails but BindHost, which
// reads the kind index and the bound event only, still answers.
func TestBindHostUsesKindIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := open(t, dir)
	appendVaried(t, l, 0, 50)
	if _, err := l.BindHost(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	appendVaried(t, l, 100, 50)
	l.Close()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []ledger.Seq{3, 40, 80} {
		if err := db.Set(keys.Event(s), []byte("{garbage"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	l = open(t, dir)
	defer l.Close()
	for _, s := range []ledger.Seq{3, 40, 80} {
		if _, err := l.Get(s); err == nil {
			t.Fatalf("seq %d decodes: the test proves nothing", s)
		}
	}
	if seq, err := l.BindHost(ctx, "h1"); err != nil || seq != 51 {
		t.Fatalf("BindHost: seq %d, %v", seq, err)
	}
}
