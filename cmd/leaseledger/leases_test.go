package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestLeasesTable(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	in, err := os.ReadFile("testdata/lease.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ctx, string(in), "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r := runCLI(t, ctx, "", "--data-dir", dir, "leases")
	if r.code != 0 || !strings.Contains(r.stdout, "lease table at seq 7: 2 lease(s)") ||
		!strings.Contains(r.stdout, "ready") || !strings.Contains(r.stdout, "terminated") {
		t.Fatalf("leases: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "leases", "--live", "--json")
	var out struct {
		Seq    uint64 `json:"seq"`
		Leases []struct {
			Server, State, Fingerprint string
			CallsInFlight              int `json:"calls_in_flight"`
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("leases --json: %v\n%s", err, r.stdout)
	}
	if out.Seq != 7 || len(out.Leases) != 1 || out.Leases[0].Server != "everything" || out.Leases[0].State != "ready" ||
		out.Leases[0].CallsInFlight != 1 || !strings.HasPrefix(out.Leases[0].Fingerprint, "aaaa") {
		t.Fatalf("live leases: %+v", out)
	}
}
