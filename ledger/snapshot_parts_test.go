package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
)

// TestSnapshotParts: a header and its parts are stored together; parts
// not named keep their value, a nil value deletes, reset drops every part
// of the name (and no other name's), each bound is a typed error that
// stores nothing, and verify accepts the keys.
func TestSnapshotParts(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir)
	appendN(t, l, 10)
	part := func(name, key string) string {
		t.Helper()
		v, ok, err := l.LoadSnapshotPart(name, key)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return "<none>"
		}
		return string(v)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.SaveSnapshotParts("proj", 5, []byte("h1"), []ledger.SnapshotPart{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}, false))
	must(l.SaveSnapshotParts("projx", 5, []byte("other"), []ledger.SnapshotPart{{Key: "a", Value: []byte("x")}}, false))
	must(l.SaveSnapshotParts("proj", 7, []byte("h2"), []ledger.SnapshotPart{{Key: "b", Value: []byte("3")}, {Key: "c", Value: nil}}, false))
	if got := part("proj", "a") + part("proj", "b") + part("proj", "c"); got != "13<none>" {
		t.Fatalf("parts %q", got)
	}
	if covers, h, err := l.LoadSnapshot("proj"); err != nil || covers != 7 || string(h) != "h2" {
		t.Fatalf("header %d %q %v", covers, h, err)
	}
	must(l.SaveSnapshotParts("proj", 8, []byte("h3"), []ledger.SnapshotPart{{Key: "c", Value: []byte("4")}}, true))
	if got := part("proj", "a") + part("proj", "b") + part("proj", "c") + part("projx", "a"); got != "<none><none>4x" {
		t.Fatalf("after reset: parts %q", got)
	}

	big := bytes.Repeat([]byte{'x'}, ledger.MaxSnapshotPartBytes+1)
	err := l.SaveSnapshotParts("proj", 9, []byte("h4"), []ledger.SnapshotPart{{Key: "d", Value: []byte("5")}, {Key: "e", Value: big}}, false)
	if !errors.Is(err, ledger.ErrSnapshotTooLarge) {
		t.Fatalf("oversized part: %v", err)
	}
	if covers, _, _ := l.LoadSnapshot("proj"); covers != 8 || part("proj", "d") != "<none>" {
		t.Fatal("a refused snapshot stored something")
	}
	if err := l.SaveSnapshotParts("proj", 11, nil, nil, false); !errors.Is(err, ledger.ErrBeyondHead) {
		t.Fatalf("beyond the head: %v", err)
	}
	if _, err := verify.Ledger(context.Background(), l, verify.Options{}); err != nil {
		t.Fatalf("snapshot parts disturb verification: %v", err)
	}
	l.Close()
	l = open(t, dir)
	defer l.Close()
	if part("proj", "c") != "4" {
		t.Fatal("part lost across reopen")
	}
}
