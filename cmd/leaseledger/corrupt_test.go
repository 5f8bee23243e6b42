package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// A damaged sstable block: verify, export, audit and leases fail with an
// error naming the seqs they could not read (never a panic or a Go stack),
// and serve refuses to start, naming the damage.
func TestReadCommandsOnDamagedStorage(t *testing.T) {
	const n, bad = 400, 200
	dir := t.TempDir()
	ledgertest.WriteFlushed(t, dir, n)
	ledgertest.DamageEvent(t, dir, bad)
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--quiet"}, ": unreadable: the storage is damaged"},
		{[]string{"export"}, "ledger: corrupt"},
		{[]string{"audit", "--all"}, "ledger: corrupt"},
		{[]string{"leases"}, "ledger: corrupt"},
		{[]string{"serve", "--port", "-1"}, "refusing to start: the ledger in"},
	} {
		r := runCLI(t, ctx, "", append([]string{"--data-dir", dir}, tc.args...)...)
		what := strings.Join(tc.args, " ")
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "seqs ") ||
			strings.Contains(r.stderr, "goroutine ") {
			t.Fatalf("%s on damaged storage: %+v", what, r)
		}
	}
	// Reads that do not reach the damage still work.
	if r := runCLI(t, ctx, "", "--data-dir", dir, "export", "--from", "390"); r.code != 0 || strings.Count(r.stdout, "\n") != 11 {
		t.Fatalf("export past the damage: %+v", r)
	}
}
