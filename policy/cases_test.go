package policy

import (
	"errors"
	"strings"
	"testing"
)

const researchCases = `{"cases": [
  {"name": "research reads docs", "principal": "research", "action": "call_tool", "server": "docs", "target": "search",
   "hints": {"read_only": true}, "expect": "allow", "policies": ["research-read-only"]},
  {"name": "research cannot write", "principal": "research", "action": "call_tool", "server": "docs", "target": "edit",
   "expect": "deny", "policies": []},
  {"principal": "alice", "action": "call_tool", "server": "github", "target": "rm", "expect": "deny", "policies": ["readers-no-destructive"]},
  {"name": "secret away", "principal": "bob", "action": "read_resource", "server": "vault", "target": "secret://k",
   "client_address": "192.0.2.1", "expect": "deny"},
  {"name": "complete", "principal": "", "action": "complete", "server": "fs", "target": "file:///{path}", "ref": "ref/resource",
   "time": "2026-12-01T12:00:00Z", "session": "s", "expect": "allow"}
]}`

func TestCases(t *testing.T) {
	s := mustParse(t, researchPolicy, groupsJSON)
	cases, err := ParseCases([]byte(researchCases))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 5 || cases[1].Hints != nil || *cases[0].Hints != (ToolHints{ReadOnly: true, Destructive: true, OpenWorld: true}) {
		t.Fatalf("decoded %+v", cases)
	}
	for _, r := range s.Test(cases) {
		if !r.Passed {
			t.Errorf("%s: %s", r.Label(), r.Problem)
		}
	}
	// The same expectations against a policy without the forbid: the
	// third case fails, and says how.
	weaker := strings.Replace(researchPolicy, "forbid(principal in Leaseledger::Group::\"readers\"", "forbid(principal in Leaseledger::Group::\"nobody\"", 1)
	res := mustParse(t, weaker, groupsJSON).Test(cases)
	var failed []string
	for _, r := range res {
		if !r.Passed {
			failed = append(failed, r.Label()+": "+r.Problem)
		}
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "#3: want deny, got allow (staff-all)") {
		t.Fatalf("failures %q", failed)
	}
	// Right decision, wrong deciding policies.
	cases[0].Policies = []string{"staff-all"}
	if r := s.Test(cases[:1])[0]; r.Passed || !strings.Contains(r.Problem, "but by (research-read-only), want (staff-all)") {
		t.Fatalf("%+v", r)
	}
}

func TestParseCasesErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		text string
		kind error
		line int
	}{
		"unknown field":   {`{"cases": [{"principal": "a", "action": "start_server", "server": "s", "expect": "allow", "color": 1}]}`, ErrCases, 0},
		"unknown hint":    {`{"cases": [{"principal": "a", "action": "call_tool", "server": "s", "target": "t", "hints": {"safe": true}, "expect": "allow"}]}`, ErrCases, 0},
		"syntax":          {"{\"cases\": [\n{\"principal\": }]}", ErrCases, 2},
		"wrong type":      {"{\"cases\": [\n{\"principal\": 1}]}", ErrCases, 2},
		"trailing":        {`{"cases": []} {}`, ErrCases, 1},
		"bad expect":      {`{"cases": [{"principal": "a", "action": "start_server", "server": "s", "expect": "maybe"}]}`, ErrCases, 0},
		"bad action":      {`{"cases": [{"principal": "a", "action": "drop", "server": "s", "expect": "deny"}]}`, ErrCases, 0},
		"complete no ref": {`{"cases": [{"principal": "a", "action": "complete", "server": "s", "target": "t", "expect": "deny"}]}`, ErrCases, 0},
		"bad ref":         {`{"cases": [{"principal": "a", "action": "complete", "server": "s", "target": "t", "ref": "prompt", "expect": "deny"}]}`, ErrCases, 0},
		"tool no target":  {`{"cases": [{"principal": "a", "action": "call_tool", "server": "s", "expect": "deny"}]}`, ErrCases, 0},
		"bad policy id":   {`{"cases": [{"principal": "a", "action": "start_server", "server": "s", "expect": "deny", "policies": ["a b"]}]}`, ErrCases, 0},
		"bad address":     {`{"cases": [{"principal": "a", "action": "start_server", "server": "s", "expect": "deny", "client_address": "nope"}]}`, ErrCases, 0},
		"too large":       {`{"cases": []}` + strings.Repeat(" ", MaxCasesFileBytes), ErrTooLarge, 0},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseCases([]byte(tc.text))
			var e *Error
			if !errors.Is(err, tc.kind) || !errors.As(err, &e) {
				t.Fatalf("err %v, want %v", err, tc.kind)
			}
			if tc.line != 0 && e.Line != tc.line {
				t.Fatalf("line %d, want %d (%v)", e.Line, tc.line, err)
			}
		})
	}
	var many strings.Builder
	many.WriteString(`{"cases": [`)
	for i := range MaxCases + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`{"principal":"a","action":"start_server","server":"s","expect":"deny"}`)
	}
	many.WriteString("]}")
	if _, err := ParseCases([]byte(many.String())); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("%d cases: %v", MaxCases+1, err)
	}
}
