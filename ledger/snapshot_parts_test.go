package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/leaseledger/leaseledger/events"
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

	if err := l.SaveSnapshotParts("proj", 9, []byte("h4"), []ledger.SnapshotPart{{Key: "d", Value: []byte("5")}, {Key: "e/", Value: []byte("x")}}, false); err == nil {
		t.Fatal("invalid part key accepted")
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

// TestSnapshotPartChunks: a part larger than SnapshotChunkBytes is stored
// in chunks and read back whole by LoadSnapshotPart and ScanSnapshotParts
// (keys that sort between a part and its chunks do not mix in); a shorter
// value written over it reads as itself, not with the old chunks; prefix
// scans see only their kind's keys.
func TestSnapshotPartChunks(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	appendN(t, l, 10)
	c := ledger.SnapshotChunkBytes
	big := make([]byte, 2*c+c/2)
	for i := range big {
		big[i] = byte(i * 7)
	}
	exact := bytes.Repeat([]byte{'e'}, c)
	save := func(covers ledger.Seq, parts ...ledger.SnapshotPart) {
		t.Helper()
		if err := l.SaveSnapshotParts("proj", covers, []byte("h"), parts, false); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want map[string][]byte) {
		t.Helper()
		for k, w := range want {
			v, ok, err := l.LoadSnapshotPart("proj", k)
			if err != nil || !ok || !bytes.Equal(v, w) {
				t.Fatalf("part %s: %d bytes ok=%v err=%v, want %d bytes", k, len(v), ok, err, len(w))
			}
		}
		got := map[string][]byte{}
		if err := l.ScanSnapshotParts(context.Background(), "proj", "", func(k string, v []byte) error {
			got[k] = append([]byte(nil), v...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("scan: %d parts, want %d", len(got), len(want))
		}
		for k, w := range want {
			if !bytes.Equal(got[k], w) {
				t.Fatalf("scan: part %s: %d bytes, want %d", k, len(got[k]), len(w))
			}
		}
	}
	save(1, ledger.SnapshotPart{Key: "a.x", Value: big}, ledger.SnapshotPart{Key: "a.x-y", Value: []byte("n")}, ledger.SnapshotPart{Key: "o.x", Value: exact})
	check(map[string][]byte{"a.x": big, "a.x-y": []byte("n"), "o.x": exact})
	save(2, ledger.SnapshotPart{Key: "a.x", Value: []byte("small")})
	check(map[string][]byte{"a.x": []byte("small"), "a.x-y": []byte("n"), "o.x": exact})
	save(3, ledger.SnapshotPart{Key: "a.x", Value: exact}, ledger.SnapshotPart{Key: "o.x", Value: big})
	check(map[string][]byte{"a.x": exact, "a.x-y": []byte("n"), "o.x": big})
	save(4, ledger.SnapshotPart{Key: "o.x", Value: nil})
	check(map[string][]byte{"a.x": exact, "a.x-y": []byte("n")})
	n := 0
	if err := l.ScanSnapshotParts(context.Background(), "proj", "a.", func(k string, v []byte) error { n++; return nil }); err != nil || n != 2 {
		t.Fatalf("prefix scan: %d parts, %v", n, err)
	}
	save(5, ledger.SnapshotPart{Key: "o.y", Value: big})
	if _, err := verify.Ledger(context.Background(), l, verify.Options{}); err != nil {
		t.Fatalf("chunked parts disturb verification: %v", err)
	}
}

// TestPartsView: a view reads the parts as they were when it opened,
// whatever is saved meanwhile, until closed.
func TestPartsView(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	appendN(t, l, 10)
	if err := l.SaveSnapshotParts("proj", 1, []byte("h"), []ledger.SnapshotPart{{Key: "a.x", Value: []byte("1")}, {Key: "a.y", Value: []byte("2")}}, false); err != nil {
		t.Fatal(err)
	}
	v, err := l.ViewSnapshotParts("proj")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := l.SaveSnapshotParts("proj", 2, []byte("h"), []ledger.SnapshotPart{{Key: "a.x", Value: []byte("3")}, {Key: "a.z", Value: []byte("4")}}, false); err != nil {
		t.Fatal(err)
	}
	if b, ok, err := v.Load("a.x"); err != nil || !ok || string(b) != "1" {
		t.Fatalf("view load: %q %v %v", b, ok, err)
	}
	var got []string
	if err := v.Scan(context.Background(), "a.", func(k string, b []byte) error { got = append(got, k+"="+string(b)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "a.x=1" || got[1] != "a.y=2" {
		t.Fatalf("view scan: %v", got)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}

// A snapshot header with parts beside it, saved in one synced batch, read
// back from a consistent view.
func ExampleLedger_ViewSnapshotParts() {
	dir, _ := os.MkdirTemp("", "ledger-parts-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	if _, err := l.Append(context.Background(), events.Draft{Session: "s1", Payload: &events.SessionEnded{}}); err != nil {
		panic(err)
	}
	err = l.SaveSnapshotParts("proj", 1, []byte("header"), []ledger.SnapshotPart{
		{Key: "a.act-1", Value: []byte("one")}, {Key: "a.act-2", Value: []byte("two")}, {Key: "o.owner-1", Value: []byte("owner")}}, false)
	if err != nil {
		panic(err)
	}
	v, err := l.ViewSnapshotParts("proj")
	if err != nil {
		panic(err)
	}
	defer v.Close()
	_ = v.Scan(context.Background(), "a.", func(key string, value []byte) error {
		fmt.Println(key, string(value))
		return nil
	})
	b, ok, _ := v.Load("o.owner-1")
	fmt.Println(string(b), ok)
	// Output:
	// a.act-1 one
	// a.act-2 two
	// owner true
}
