package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

type fileState struct {
	mode  os.FileMode
	mtime time.Time
	data  string
}

// dirState is every file of dir: mode, mtime and contents.
func dirState(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fileState{mode: fi.Mode(), mtime: fi.ModTime()}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			st.data = string(b)
		}
		out[strings.TrimPrefix(p, dir)] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameState(t *testing.T, what string, a, b map[string]fileState) {
	t.Helper()
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.mode != w.mode || !v.mtime.Equal(w.mtime) || v.data != w.data {
			t.Fatalf("%s changed %q (present after: %v)", what, k, ok)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Fatalf("%s created %q", what, k)
		}
	}
}

// readCommands runs every read command on dir and checks that each works
// and says it opened the directory read-only.
func readCommands(t *testing.T, dir string, check func(what string)) {
	t.Helper()
	ctx := context.Background()
	skey := filepath.Join(t.TempDir(), "key")
	if r := runCLI(t, ctx, "", "checkpoint", "keygen", "--name", "ro-test", "--out", skey); r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	for _, args := range [][]string{
		{"head"},
		{"verify", "--quiet"},
		{"export", "--to", "5"},
		{"export", "--activation", "a1"},
		{"audit", "--all"},
		{"audit", "a1"},
		{"leases"},
		{"checkpoint", "--key", skey, "--origin", "ro-test"},
	} {
		r := runCLI(t, ctx, "", append([]string{"--data-dir", dir}, args...)...)
		what := strings.Join(args, " ")
		// audit exits non-zero for unconfirmed activations (these are): it
		// ran, that is all this test asks.
		if (r.code != 0 && args[0] != "audit") || r.code > 2 || !strings.Contains(r.stderr, "opened read-only") || r.stdout == "" {
			t.Fatalf("%s on a read-only directory: %+v", what, r)
		}
		check(what)
	}
}

// Every read command leaves the data directory byte-identical (contents,
// modes and mtimes; no file created), locked or not.
func TestReadCommandsWriteNothing(t *testing.T) {
	dir := t.TempDir()
	ledgertest.WriteFlushed(t, dir, 50)
	// A ledger closed after appends (its WAL not flushed) too: a read-only
	// open must replay it without writing.
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), ledgertest.Draft(51)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	before := dirState(t, dir)
	readCommands(t, dir, func(what string) { sameState(t, what, before, dirState(t, dir)) })
}
