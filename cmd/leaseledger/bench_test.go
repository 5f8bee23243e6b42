package main

import (
	"context"
	"strings"
	"testing"
)

// TestBenchAppendPaths runs both paths of bench append on a tiny workload:
// each prints its table (the serve path with its latency and snapshot
// lines, every event delivered to the subscriber), and an unknown path is
// refused.
func TestBenchAppendPaths(t *testing.T) {
	ctx := context.Background()
	r := runCLI(t, ctx, "", "bench", "append", "--dir", t.TempDir(), "--events", "300", "--rounds", "1", "--concurrency", "4")
	if r.code != 0 || !strings.Contains(r.stdout, "ratio ledger / raw same keys") {
		t.Fatalf("ledger path: code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, ctx, "", "bench", "append", "--path", "serve", "--dir", t.TempDir(), "--events", "300", "--rounds", "1", "--concurrency", "4", "--batch", "3", "--snapshot-every", "50")
	if r.code != 0 || !strings.Contains(r.stdout, "ratio serve / raw same keys") || !strings.Contains(r.stdout, "ack p99 with snapshots / without") ||
		!strings.Contains(r.stdout, "delivered 300/300") {
		t.Fatalf("serve path: code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r = runCLI(t, ctx, "", "bench", "append", "--path", "nope", "--dir", t.TempDir()); r.code == 0 {
		t.Fatalf("unknown path accepted:\n%s", r.stdout)
	}
}
