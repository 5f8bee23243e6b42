package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
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

// `audit` of an HTTP server's activations shows each tracked request with
// its redirect hops (origins, status, barriers), completion, barriers,
// worker end and lost evidence, in text and JSON (testdata/http.jsonl:
// act-http-ok is confirmed with two 307 hops, a GET stream aborted at
// close and the session DELETE; act-http-bad has a cross-origin hop whose
// barrier timed out, a lost request and a barrier after the close).
func TestAuditHTTP(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	in, err := os.ReadFile("testdata/http.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ctx, string(in), "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	const o = "http://127.0.0.1:8931"
	r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-http-ok")
	if r.code != 0 {
		t.Fatalf("audit act-http-ok: %+v", r)
	}
	for _, want := range []string{
		"verdict: confirmed",
		"http requests (4):\n",
		"  h-3 POST " + o + " (scope request): confirmed, barriers [ok], completed ok 200, worker mcp_http_client down (released)\n" +
			"    hop 1 h-3-1: 307 " + o + " → " + o + " (same origin): confirmed, barriers [ok]\n" +
			"    hop 2 h-3-2: 307 " + o + " → " + o + " (same origin): confirmed, barriers [ok]\n" +
			"    11 registered POST " + o + " (scope request)\n" +
			"    12 redirect hop 1 (h-3-1): 307 " + o + " → " + o + ", same origin\n" +
			"    13 barrier ok (hop 1, h-3-1)\n" +
			"    14 redirect hop 2 (h-3-2): 307 " + o + " → " + o + ", same origin\n" +
			"    15 barrier ok (hop 2, h-3-2)\n" +
			"    16 completed ok, status 200, 2048 bytes\n" +
			"    17 barrier ok\n" +
			"    18 worker mcp_http_client down (released)\n",
		"  h-2 GET " + o + " (scope sse): confirmed, barriers [ok], completed aborted 200 (aborted), worker mcp_http_client down (released)\n",
		"    23 completed aborted, status 200, 77 bytes, aborted\n    24 barrier ok\n",
		"  h-4 DELETE " + o + " (scope session_delete): confirmed",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("audit act-http-ok lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-http-bad")
	if r.code != exitUnconfirmed {
		t.Fatalf("audit act-http-bad: %+v", r)
	}
	for _, want := range []string{
		"    hop 1 h-1-1: 307 " + o + " → http://127.0.0.1:8932 (cross origin): missing (barrier_timeout), barriers [timeout]\n",
		"    39 barrier timeout (hop 1, h-1-1)\n    40 completed timeout, status 0, 0 bytes, receive_timeout\n",
		"  h-2 POST " + o + " (scope request): lost (connection_dropped), barriers [ok (late)], lost (connection_dropped)\n",
		"    53 barrier ok — after the close, no effect\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("audit act-http-bad lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-http-bad", "--json")
	var out audit.Activation
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("json: %v\n%s", err, r.stdout)
	}
	if len(out.HTTPRequests) != 2 || out.HTTPRequestsOmitted != 0 {
		t.Fatalf("http requests: %+v", out.HTTPRequests)
	}
	h1, h2 := out.HTTPRequests[0], out.HTTPRequests[1]
	wantHop := audit.HTTPHop{Hop: 1, Ref: "h-1-1", Seq: 38, RedirectStatus: 307, FromOrigin: o, ToOrigin: "http://127.0.0.1:8932",
		Status: projector.StatusMissing, Reason: "barrier_timeout", Barriers: []audit.HTTPBarrier{{Seq: 39, Outcome: events.HTTPBarrierTimeout}}}
	if h1.Ref != "h-1" || h1.Status != projector.StatusConfirmed || len(h1.Hops) != 1 || !reflect.DeepEqual(h1.Hops[0], wantHop) ||
		h1.Completed == nil || h1.Completed.Outcome != events.HTTPTimeout || h1.Completed.Detail != "receive_timeout" ||
		!reflect.DeepEqual(h1.Barriers, []audit.HTTPBarrier{{Seq: 41, Outcome: events.HTTPBarrierOK}}) ||
		h1.WorkerDown == nil || h1.WorkerDown.Reason != "released" || h1.Lost != nil {
		t.Fatalf("h-1: %+v", h1)
	}
	if h2.Status != projector.StatusLost || h2.Lost == nil || h2.Lost.Reason != "connection_dropped" ||
		!reflect.DeepEqual(h2.Barriers, []audit.HTTPBarrier{{Seq: 53, Outcome: events.HTTPBarrierOK, Late: true}}) || len(h2.Steps) != 3 {
		t.Fatalf("h-2: %+v", h2)
	}
}

// The text audit lists the calls whose outcome the log does not hold, with
// their state: a lease ended by a host's loss makes its unfinished call
// lost, and a finished call is never listed.
func TestAuditTextUnknownOutcome(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	digest := strings.Repeat("cd", 32)
	a := "act-calls"
	ds := []events.Draft{}
	d := func(p events.Payload) {
		ds = append(ds, events.Draft{Activation: a, Session: "s-1", Server: "github", Payload: p})
	}
	d(&events.LeaseAcquiring{KeySession: "s-1", Fingerprint: digest})
	d(&events.LeaseChildStarted{PID: 10, GuardianPID: 11, Cleanup: events.CleanupVerified})
	d(&events.LeaseListingPinned{ToolCount: 1, Pages: 1, ListingBytes: 10, ListingDigest: digest})
	d(&events.LeaseAcquired{Fingerprint: digest, DurationNS: 1000})
	d(&events.CallAdmitted{CallID: "c-done", Tool: "echo", Digest: digest})
	d(&events.CallFinished{CallID: "c-done", Tool: "echo", Outcome: events.CallOK, DurationNS: 1,
		ArgsBytes: 2, ArgsSHA256: digest, ResultBytes: 2, ResultSHA256: digest})
	d(&events.CallAdmitted{CallID: "c-gone", Tool: "echo", Digest: digest})
	d(&events.LeaseTerminated{Reason: "host_lost"})
	if _, err := l.Append(context.Background(), ds...); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, context.Background(), "", "--data-dir", dir, "audit", a)
	want := "calls with unknown outcome (1):\n  c-gone\tlost\ttool echo\tsession s-1\tadmitted at seq 7\n"
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("audit %s output lacks %q:\n%s", a, want, r.stdout)
	}
	if strings.Contains(r.stdout, "c-done\t") {
		t.Fatalf("a finished call is listed:\n%s", r.stdout)
	}
}

// TestAuditAllHost: `audit --all` names the host the chain is bound to, in
// text and in JSON (the summary's host field), and nothing when unbound.
func TestAuditAllHost(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	auditLog(t, dir)
	all := func() (string, audit.Summary) {
		t.Helper()
		text := runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all").stdout
		r := runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all", "--json")
		var sum audit.Summary
		if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
			t.Fatalf("audit --all --json: %v\n%s", err, r.stdout)
		}
		return text, sum
	}
	if text, sum := all(); strings.Contains(text, "host:") || sum.Host != "" {
		t.Fatalf("unbound chain: host %q in\n%s", sum.Host, text)
	}
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.BindHost(ctx, "host-eu-1")
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	text, sum := all()
	if !strings.HasPrefix(text, "host: host-eu-1\nevents: ") || sum.Host != "host-eu-1" {
		t.Fatalf("bound chain: JSON host %q, text\n%s", sum.Host, text)
	}
}
