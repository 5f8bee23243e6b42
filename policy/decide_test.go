package policy

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// mustParse parses a policy set or fails the test.
func mustParse(t testing.TB, text, entities string) *Set {
	t.Helper()
	var ent []byte
	if entities != "" {
		ent = []byte(entities)
	}
	s, err := Parse("p.cedar", []byte(text), "e.json", ent)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// A research principal may use one server and only its read-only tools;
// staff may do anything except destructive tools, which nobody in
// readers may call; everything else is denied by default.
const researchPolicy = `
@id("research-server")
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

@id("office-only")
forbid(principal in Leaseledger::Group::"staff", action == Leaseledger::Action::"read_resource", resource)
when { resource.uri like "secret://*" }
unless { context has client_address && context.client_address.isInRange(ip("10.0.0.0/8")) };

@id("prompt-by-name")
permit(principal, action in [Leaseledger::Action::"get_prompt", Leaseledger::Action::"complete"],
       resource is Leaseledger::Prompt)
when { resource.name == "summarize" && resource.server == "docs" };

@id("templates")
permit(principal == Leaseledger::Principal::"", action == Leaseledger::Action::"complete",
       resource is Leaseledger::Resource)
when { resource.uri == "file:///{path}" };
`

func TestDecide(t *testing.T) {
	s := mustParse(t, researchPolicy, groupsJSON)
	ro := ToolHints{ReadOnly: true}
	office := netip.MustParseAddr("10.1.2.3")
	away := netip.MustParseAddr("192.0.2.1")
	mapped := netip.MustParseAddr("::ffff:10.1.2.3")
	for _, tc := range []struct {
		name     string
		r        Request
		allowed  bool
		policies []string
	}{
		{"research starts docs", Request{Principal: "research", Action: events.AccessStartServer, Server: "docs"}, true, []string{"research-server"}},
		{"research may not start github", Request{Principal: "research", Action: events.AccessStartServer, Server: "github"}, false, nil},
		{"research read-only tool", Request{Principal: "research", Action: events.AccessCallTool, Server: "docs", Target: "search", Hints: ro}, true, []string{"research-read-only"}},
		{"research default hints", Request{Principal: "research", Action: events.AccessCallTool, Server: "docs", Target: "search", Hints: DefaultHints()}, false, nil},
		{"research read-only tool elsewhere", Request{Principal: "research", Action: events.AccessCallTool, Server: "github", Target: "search", Hints: ro}, false, nil},
		{"bob in staff", Request{Principal: "bob", Action: events.AccessCallTool, Server: "github", Target: "rm", Hints: DefaultHints()}, true, []string{"staff-all"}},
		{"alice in readers in staff, destructive", Request{Principal: "alice", Action: events.AccessCallTool, Server: "github", Target: "rm", Hints: DefaultHints()}, false, []string{"readers-no-destructive"}},
		{"alice in readers in staff, harmless", Request{Principal: "alice", Action: events.AccessCallTool, Server: "github", Target: "ls", Hints: ro}, true, []string{"staff-all"}},
		{"hints ignored off call_tool", Request{Principal: "alice", Action: events.AccessStartServer, Server: "github", Hints: DefaultHints()}, true, []string{"staff-all"}},
		{"unknown principal", Request{Principal: "mallory", Action: events.AccessStartServer, Server: "docs"}, false, nil},
		{"secret from the office", Request{Principal: "bob", Action: events.AccessReadResource, Server: "vault", Target: "secret://k", ClientAddr: office}, true, []string{"staff-all"}},
		{"secret from a mapped office address", Request{Principal: "bob", Action: events.AccessReadResource, Server: "vault", Target: "secret://k", ClientAddr: mapped}, true, []string{"staff-all"}},
		{"secret from away", Request{Principal: "bob", Action: events.AccessReadResource, Server: "vault", Target: "secret://k", ClientAddr: away}, false, []string{"office-only"}},
		{"secret from nowhere known", Request{Principal: "bob", Action: events.AccessReadResource, Server: "vault", Target: "secret://k"}, false, []string{"office-only"}},
		{"plain resource from away", Request{Principal: "bob", Action: events.AccessReadResource, Server: "vault", Target: "file:///a", ClientAddr: away}, true, []string{"staff-all"}},
		{"prompt by name", Request{Principal: "mallory", Action: events.AccessGetPrompt, Server: "docs", Target: "summarize"}, true, []string{"prompt-by-name"}},
		{"prompt of another server", Request{Principal: "mallory", Action: events.AccessGetPrompt, Server: "github", Target: "summarize"}, false, nil},
		{"complete a prompt", Request{Principal: "mallory", Action: events.AccessComplete, Server: "docs", Target: "summarize", Ref: events.RefPrompt}, true, []string{"prompt-by-name"}},
		{"complete a template named like the prompt", Request{Principal: "mallory", Action: events.AccessComplete, Server: "docs", Target: "summarize", Ref: events.RefResource}, false, nil},
		{"no-token principal completes a template", Request{Principal: "", Action: events.AccessComplete, Server: "fs", Target: "file:///{path}", Ref: events.RefResource}, true, []string{"templates"}},
		{"complete without ref", Request{Principal: "bob", Action: events.AccessComplete, Server: "docs", Target: "summarize"}, false, nil},
		{"unknown action", Request{Principal: "bob", Action: "delete", Server: "docs"}, false, nil},
		{"server with a slash", Request{Principal: "bob", Action: events.AccessStartServer, Server: "a/b"}, false, nil},
		{"tool without a name", Request{Principal: "bob", Action: events.AccessCallTool, Server: "github"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Time = t0
			d := s.Decide(tc.r)
			if d.Allowed != tc.allowed || !slices.Equal(d.Policies, tc.policies) || d.Errors != 0 {
				t.Fatalf("got %+v, want allowed=%v policies=%v", d, tc.allowed, tc.policies)
			}
		})
	}
}

// Deciding policies come in file order, all of them; a nil set allows.
func TestDecideOrderAndNil(t *testing.T) {
	text := ""
	var want []string
	for i := range 40 {
		text += "permit(principal, action, resource);\n"
		want = append(want, "policy"+itoa(i))
	}
	s := mustParse(t, text, "")
	for range 5 { // map order would differ between runs
		d := s.Decide(Request{Principal: "p", Action: events.AccessStartServer, Server: "s", Time: t0})
		if !d.Allowed || !slices.Equal(d.Policies, want) {
			t.Fatalf("%+v", d)
		}
	}
	var none *Set
	if d := none.Decide(Request{Action: "anything"}); !d.Allowed || d.Policies != nil {
		t.Fatalf("nil set: %+v", d)
	}
	if none.Digest() != "" || none.Len() != 0 || none.IDs() != nil || none.ReadsTime() {
		t.Fatal("nil set accessors")
	}
	empty := mustParse(t, "", "")
	if d := empty.Decide(Request{Principal: "p", Action: events.AccessStartServer, Server: "s"}); d.Allowed {
		t.Fatal("an empty policy set allowed")
	}
}

// context.time and context.session reach the policies; an evaluation
// error is counted and the policy skipped.
func TestDecideContext(t *testing.T) {
	s := mustParse(t, `
@id("business-hours")
permit(principal, action, resource) when { context.time.toTime() >= duration("8h") && context.time.toTime() < duration("18h") };
@id("session-a")
permit(principal, action, resource) when { context.session == "a" };
@id("overflows")
permit(principal, action, resource) when { context.time.offset(duration("9223372036854775807ms")) > context.time };
`, "")
	if !s.ReadsTime() {
		t.Fatal("ReadsTime false for a set that reads context.time")
	}
	noon := Request{Principal: "p", Action: events.AccessStartServer, Server: "s", Time: t0}
	if d := s.Decide(noon); !d.Allowed || !slices.Equal(d.Policies, []string{"business-hours"}) || d.Errors != 1 {
		t.Fatalf("noon: %+v", d)
	}
	night := noon
	night.Time = t0.Add(11 * time.Hour)
	if d := s.Decide(night); d.Allowed || d.Errors != 1 {
		t.Fatalf("night: %+v", d)
	}
	night.Session = "a"
	if d := s.Decide(night); !d.Allowed || !slices.Equal(d.Policies, []string{"session-a"}) {
		t.Fatalf("night in session a: %+v", d)
	}
}

// readsTime: only the time (or the whole context) makes a set
// time-dependent.
func TestReadsTime(t *testing.T) {
	for text, want := range map[string]bool{
		`permit(principal, action, resource);`:                                                               false,
		`permit(principal, action, resource) when { context.session == "x" };`:                               false,
		`permit(principal, action, resource) when { context has client_address };`:                           false,
		`permit(principal, action, resource) when { context.time > datetime("2020-01-01") };`:                true,
		`permit(principal, action, resource) when { context["time"] > datetime("2020-01-01") };`:             true,
		`permit(principal, action, resource) unless { context has time };`:                                   true,
		`permit(principal, action, resource) when { context == context };`:                                   true,
		`permit(principal, action, resource) when { if true then {c: context}.c.session == "" else false };`: true,
	} {
		s := mustParse(t, text, "")
		if s.ReadsTime() != want {
			t.Errorf("%s: ReadsTime %v, want %v", text, s.ReadsTime(), want)
		}
	}
}
