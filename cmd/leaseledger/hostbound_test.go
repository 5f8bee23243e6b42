package main

import (
	"context"
	"strings"
	"testing"
)

// TestAppendRefusesHostBoundLine: `append` refuses a host.bound line (only
// serve --host-id writes one) with its line number and why, appends the
// other lines even within the same --batch, and exits 1.
func TestAppendRefusesHostBoundLine(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	in := `{"kind":"lease.terminated","activation":"a1","data":{"reason":"revoked"}}
{"kind":"host.bound","data":{"host":"h2"}}
{"kind":"session.ended","session":"s1","data":{"leases_terminated":2,"shared_spared":1}}
`
	r := runCLI(t, ctx, in, "--data-dir", dir, "append", "--batch", "3")
	if r.code != 1 || !strings.Contains(r.stderr, "line 2: ") || !strings.Contains(r.stderr, "host.bound") ||
		!strings.Contains(r.stderr, "written only by the ledger itself") || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("append: %+v", r)
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir, "export", "--kind", "host.bound"); r.code != 0 || r.stdout != "" {
		t.Fatalf("a host.bound was written: %+v", r)
	}
}
