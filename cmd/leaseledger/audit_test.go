package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

var auditDigest = strings.Repeat("ab", 32)

// auditLog writes act-ok (closed, confirmed, with more than 64 confirmed
// requests), act-bad (closed with a pending request) and act-open (never
// closed) into dir.
func auditLog(t *testing.T, dir string) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var ds []events.Draft
	d := func(a string, p events.Payload) {
		ds = append(ds, events.Draft{Activation: a, Session: "s-1", Server: "github", Payload: p})
	}
	now := events.At(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	for _, a := range []string{"act-ok", "act-bad", "act-open"} {
		d(a, &events.ConnectionOpened{Transport: "stdio", Cleanup: "verified", OneShot: true})
		d(a, &events.GuardianStarted{GuardianPID: 10, TargetPID: 11, HelperVersion: "leaseledger-guardian/1", PIDFD: true})
		for i := range 70 {
			ref := fmt.Sprintf("h-%d", i)
			d(a, &events.HTTPRegistered{Ref: ref, Scope: "request", Method: "POST", Origin: "https://mcp.example.com"})
			d(a, &events.HTTPBarrier{Ref: ref, Outcome: "ok"})
			d(a, &events.HTTPWorkerDown{Ref: ref, Worker: "w-1", Reason: "normal"})
		}
		if a == "act-bad" {
			d(a, &events.HTTPRegistered{Ref: "slow", Scope: "sse", Method: "GET", Origin: "https://mcp.example.com"})
		}
		if a == "act-open" {
			continue
		}
		d(a, &events.ConnectionPhase{Phase: "closing", BudgetNS: 5e9})
		d(a, &events.GuardianReceipt{HelperVersion: "leaseledger-guardian/1", TargetPID: 11, Reaped: true, ExitCode: 0,
			StdinClosedAt: now, StdoutClosedAt: now, StderrClosedAt: now, EOFGraceNS: 1, HelperExitCode: 0})
		for _, o := range projector.Obligations {
			d(a, &events.ConnectionBarrier{Obligation: o, Outcome: "ok", ElapsedNS: 5})
		}
		d(a, &events.ConnectionPhase{Phase: "closed"})
		d(a, &events.ConnectionClosed{ElapsedNS: 7})
		d(a, &events.ConnectionClosed{ElapsedNS: 1, Repeat: true})
	}
	if _, err := l.Append(context.Background(), ds...); err != nil {
		t.Fatal(err)
	}
}

func TestAudit(t *testing.T) {
	dir := t.TempDir()
	auditLog(t, dir)
	ctx := context.Background()

	r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-ok")
	if r.code != 0 {
		t.Fatalf("audit act-ok: %+v", r)
	}
	for _, want := range []string{"verdict: confirmed", "close report (version 1): confirmed", "close calls 2",
		"resources: 71 (confirmed 71 = 64 recent + 7 aggregated", "{act-ok, confirmed_history:request}", "confirmed_count=7",
		"{act-ok, guardian:11}", "timeline (", "connection.closed"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("audit act-ok output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-bad", "--json", "--timeline", "5")
	if r.code != exitUnconfirmed {
		t.Fatalf("audit act-bad: %d %s", r.code, r.stderr)
	}
	var out audit.Activation
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("json: %v\n%s", err, r.stdout)
	}
	rep := out.Report
	if rep.Verdict != "unconfirmed" || rep.Connection.Report == nil || rep.Counts.Pending != 1 || len(out.Timeline) != 5 ||
		out.TimelineOmitted == 0 || !strings.Contains(strings.Join(rep.Reasons, "\n"), "{act-bad, slow}: pending") {
		t.Fatalf("act-bad report: %+v", out)
	}
	if out.Timeline[4].Kind != "connection.closed" {
		t.Fatalf("timeline does not end with the last event: %+v", out.Timeline)
	}

	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all")
	if r.code != exitUnconfirmed || !strings.Contains(r.stdout, "activations: 3\nconfirmed: 1\nunconfirmed: 2 (not closed: 1)") ||
		!strings.Contains(r.stderr, "audit [") {
		t.Fatalf("audit --all: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all", "--json")
	var all audit.Summary
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || all.Verdicts["confirmed"] != 1 || all.Verdicts["unconfirmed"] != 2 || len(all.Unconfirmed) != 2 {
		t.Fatalf("audit --all --json: %v %+v", err, all)
	}

	if r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-none"); r.code != 1 || !strings.Contains(r.stderr, "no events") {
		t.Fatalf("unknown activation: %+v", r)
	}
	if r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "bad/id"); r.code != 1 {
		t.Fatalf("bad id: %+v", r)
	}
	if r = runCLI(t, ctx, "", "--data-dir", dir, "audit"); r.code != 1 {
		t.Fatalf("no args: %+v", r)
	}
}

// A refusal at the lease cap and a spawn failure are facts with no cleanup
// obligation: `audit --all` counts them as never started and exits 0 when
// everything else is confirmed; `audit <activation>` says so and exits 0.
func TestAuditNeverStarted(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	fp := auditDigest
	_, err = l.Append(context.Background(),
		events.Draft{Activation: "act-cap", Session: "s-1", Server: "github",
			Payload: &events.LeaseAcquireFailed{Fingerprint: fp, Reason: "too_many_leases"}},
		events.Draft{Activation: "act-spawn", Session: "s-1", Server: "missing",
			Payload: &events.LeaseAcquiring{KeySession: "s-1", Fingerprint: fp}},
		events.Draft{Activation: "act-spawn", Session: "s-1", Server: "missing",
			Payload: &events.LeaseAcquireFailed{Fingerprint: fp, Reason: "spawn_failed", DurationNS: 1}})
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all")
	if r.code != 0 || !strings.Contains(r.stdout, "unconfirmed: 0 (not closed: 0)\nnever started: 2") {
		t.Fatalf("audit --all: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-spawn")
	if r.code != 0 || !strings.Contains(r.stdout, "verdict: never_started") || !strings.Contains(r.stdout, "spawn_failed") {
		t.Fatalf("audit act-spawn: %+v", r)
	}
}
