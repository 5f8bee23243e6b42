package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/policy"
)

const cliPolicy = `@id("research-docs")
permit(principal == Leaseledger::Principal::"research", action == Leaseledger::Action::"start_server",
       resource == Leaseledger::Server::"docs");

@id("research-read-only")
permit(principal == Leaseledger::Principal::"research", action == Leaseledger::Action::"call_tool",
       resource in Leaseledger::Server::"docs")
when { context.read_only };

@id("staff-all")
permit(principal in Leaseledger::Group::"staff", action, resource);

@id("readers-no-destructive")
forbid(principal in Leaseledger::Group::"readers", action == Leaseledger::Action::"call_tool", resource)
when { context.destructive };
`

const cliEntities = `[
  {"uid": {"type": "Leaseledger::Principal", "id": "research"}, "attrs": {}, "parents": [{"type": "Leaseledger::Group", "id": "readers"}]},
  {"uid": {"type": "Leaseledger::Principal", "id": "bob"}, "attrs": {}, "parents": [{"type": "Leaseledger::Group", "id": "staff"}]}
]`

// policyFilesIn writes the policy and entities files into a temporary
// directory.
func policyFilesIn(t *testing.T) (dir, pol, ent string) {
	t.Helper()
	dir = t.TempDir()
	pol, ent = filepath.Join(dir, "policy.cedar"), filepath.Join(dir, "entities.json")
	writePolicyFile(t, pol, cliPolicy)
	writePolicyFile(t, ent, cliEntities)
	return dir, pol, ent
}

func writePolicyFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPolicySchema(t *testing.T) {
	r := runCLI(t, context.Background(), "", "policy", "schema")
	if r.code != 0 || r.stdout != policy.Schema() || !strings.Contains(r.stdout, "namespace Leaseledger") {
		t.Fatalf("%+v", r)
	}
}

func TestPolicyCheck(t *testing.T) {
	ctx := context.Background()
	_, pol, ent := policyFilesIn(t)
	set, err := policy.Load(pol, ent)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"policy", "check", "--policy", pol, "--entities", ent}
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		out   string // a line stdout must hold
		inErr string
	}{
		{"read-only tool", []string{"--principal", "research", "--action", "call_tool", "--server", "docs", "--tool", "search", "--read-only", "--destructive=false"},
			0, "deciding policies: research-read-only", ""},
		{"default hints are destructive", []string{"--principal", "research", "--action", "call_tool", "--server", "docs", "--tool", "edit"},
			exitDenied, "deciding policies: readers-no-destructive", "denied"},
		{"no permit", []string{"--principal", "research", "--action", "start_server", "--server", "github"},
			exitDenied, "deciding policies: none (no permit applies)", ""},
		{"staff", []string{"--principal", "bob", "--action", "read_resource", "--server", "vault", "--resource", "file:///a", "--client-address", "10.0.0.1"},
			0, "deciding policies: staff-all", ""},
		{"complete a template", []string{"--principal", "bob", "--action", "complete", "--server", "fs", "--resource", "file:///{p}"},
			0, "allow", ""},
		{"no-token principal", []string{"--principal", "", "--action", "start_server", "--server", "docs"}, exitDenied, "deny", ""},
		{"unknown action", []string{"--principal", "bob", "--action", "drop", "--server", "docs"}, 1, "", "--action: want one of"},
		{"tool missing", []string{"--principal", "bob", "--action", "call_tool", "--server", "docs"}, 1, "", "call_tool needs --tool"},
		{"target for a server action", []string{"--principal", "bob", "--action", "start_server", "--server", "docs", "--tool", "x"}, 1, "", "acts on the server itself"},
		{"two targets", []string{"--principal", "bob", "--action", "complete", "--server", "docs", "--prompt", "x", "--resource", "y"}, 1, "", "none of the others"},
		{"bad address", []string{"--principal", "bob", "--action", "start_server", "--server", "docs", "--client-address", "nope"}, 1, "", "--client-address"},
		{"principal required", []string{"--action", "start_server", "--server", "docs"}, 1, "", "principal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, ctx, "", append(base, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d: %+v", r.code, tc.code, r)
			}
			lines := strings.Split(r.stdout, "\n")
			if tc.out != "" && !contains(lines, tc.out) {
				t.Fatalf("stdout lacks %q: %q", tc.out, r.stdout)
			}
			if tc.code != 1 && !contains(lines, "policy digest: "+set.Digest()) {
				t.Fatalf("no digest: %q", r.stdout)
			}
			if tc.inErr != "" && !strings.Contains(r.stderr, tc.inErr) {
				t.Fatalf("stderr lacks %q: %q", tc.inErr, r.stderr)
			}
		})
	}

	// A policy that does not validate: the error names file, line and id.
	bad := filepath.Join(t.TempDir(), "bad.cedar")
	writePolicyFile(t, bad, "\n@id(\"oops\")\npermit(principal, action == Leaseledger::Action::\"start_server\", resource) when { context.read_only };\n")
	r := runCLI(t, ctx, "", "policy", "check", "--policy", bad, "--principal", "a", "--action", "start_server", "--server", "s")
	if r.code != 1 || !strings.Contains(r.stderr, bad+":2:1: policy oops: does not validate against the schema") {
		t.Fatalf("%+v", r)
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// With --data-dir, check says when the file pair was in force, and
// refuses a pair that never was.
func TestPolicyCheckInForce(t *testing.T) {
	ctx := context.Background()
	dir, pol, ent := policyFilesIn(t)
	set, err := policy.Load(pol, ent)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	l, err := ledger.Open(ledger.Options{Dir: data})
	if err != nil {
		t.Fatal(err)
	}
	other := policy.Digest([]byte("permit(principal, action, resource);"), nil)
	_, err = l.Append(ctx,
		events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigStart, Mode: events.PolicyEnforced, Digest: other, Policies: 1}},
		events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: set.Digest(), Policies: set.Len()}},
		events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyAllowAll}},
		events.Draft{Payload: &events.PolicyLoaded{Trigger: events.ConfigReload, Mode: events.PolicyEnforced, Digest: set.Digest(), Policies: set.Len()}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	q := []string{"--principal", "research", "--action", "start_server", "--server", "docs"}
	r := runCLI(t, ctx, "", append([]string{"--data-dir", data, "policy", "check", "--policy", pol, "--entities", ent}, q...)...)
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "in force from seq 2 (") || !strings.Contains(lines[0], ", reload) until seq 3 (") ||
		!strings.HasPrefix(lines[1], "in force from seq 4 (") || !strings.HasSuffix(lines[1], "still in force at the end of the ledger") || lines[2] != "allow" {
		t.Fatalf("stdout %q", r.stdout)
	}

	// Without the entities file the digest differs: never in force.
	r = runCLI(t, ctx, "", append([]string{"--data-dir", data, "policy", "check", "--policy", pol}, q...)...)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "was never in force") {
		t.Fatalf("%+v", r)
	}
}

func TestPolicyTestCommand(t *testing.T) {
	ctx := context.Background()
	dir, pol, ent := policyFilesIn(t)
	cases := filepath.Join(dir, "cases.json")
	writePolicyFile(t, cases, `{"cases": [
  {"name": "research reads", "principal": "research", "action": "call_tool", "server": "docs", "target": "search",
   "hints": {"read_only": true, "destructive": false}, "expect": "allow", "policies": ["research-read-only"]},
  {"name": "research edits", "principal": "research", "action": "call_tool", "server": "docs", "target": "edit", "expect": "deny"},
  {"name": "bob uses github", "principal": "bob", "action": "start_server", "server": "github", "expect": "allow"}
]}`)
	r := runCLI(t, ctx, "", "policy", "test", "--policy", pol, "--entities", ent, cases)
	if r.code != 0 || r.stdout != "3 cases, 0 failed\n" {
		t.Fatalf("%+v", r)
	}
	// Without the entities file bob is in no group.
	r = runCLI(t, ctx, "", "policy", "test", "--policy", pol, cases)
	if r.code != exitCasesFailed || r.stdout != "FAIL bob uses github: want allow, got deny (no deciding policy)\n3 cases, 1 failed\n" {
		t.Fatalf("%+v", r)
	}
	// A malformed cases file names itself and the line.
	writePolicyFile(t, cases, "{\"cases\": [\n{\"principal\": }]}")
	r = runCLI(t, ctx, "", "policy", "test", "--policy", pol, cases)
	if r.code != 1 || !strings.Contains(r.stderr, cases+":2:") {
		t.Fatalf("%+v", r)
	}
}
