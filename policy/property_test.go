package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"pgregory.net/rapid"

	"github.com/leaseledger/leaseledger/events"
)

// The twin of the cached fast path: for random principals, groups,
// policy sets (from templates), questions and swaps, SessionAccess.Decide
// (cached, asked repeatedly, interleaved with Swap) answers as Set.Decide
// of the set in force, and both answer as cedar.Authorize called on a
// request and entities this test builds on its own.
func TestPropertyCachedEqualsUncached(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u := genUniverse(t)
		sets := make([]*Set, 0, 3)
		twins := make([]*cedar.PolicySet, 0, 3)
		for i := range rapid.IntRange(1, 3).Draw(t, "sets") {
			text, ids := genPolicies(t, u, fmt.Sprint("set", i))
			s, err := Parse("p.cedar", []byte(text), "e.json", []byte(u.entitiesJSON()))
			if err != nil {
				t.Fatalf("generated policy does not parse: %v\n%s", err, text)
			}
			sets = append(sets, s)
			twins = append(twins, twinSet(t, text, ids))
		}
		current := rapid.IntRange(-1, len(sets)-1).Draw(t, "initial") // -1: allow all
		setAt := func(i int) *Set {
			if i < 0 {
				return nil
			}
			return sets[i]
		}
		e := NewEngine(setAt(current))
		type sess struct {
			principal, id string
			addr          netip.Addr
			a             *SessionAccess
		}
		var sessions []sess
		for i := range rapid.IntRange(1, 3).Draw(t, "sessions") {
			s := sess{principal: rapid.SampledFrom(u.principals).Draw(t, "principal"), id: fmt.Sprint("sess", i),
				addr: rapid.SampledFrom([]netip.Addr{{}, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("::1")}).Draw(t, "addr")}
			s.a = e.Session(s.principal, s.id, s.addr)
			sessions = append(sessions, s)
		}
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			if rapid.IntRange(0, 9).Draw(t, "swap?") == 0 {
				current = rapid.IntRange(-1, len(sets)-1).Draw(t, "swap")
				e.Swap(setAt(current))
				continue
			}
			s := rapid.SampledFrom(sessions).Draw(t, "session")
			q := genQuestion(t, u)
			for repeat := range 2 { // the second answer comes from the cache
				got, digest := s.a.Decide(q.action, q.server, q.target, q.ref, q.hints)
				set := e.Current()
				if digest != set.Digest() {
					t.Fatalf("step %d: digest %q, set in force %q", step, digest, set.Digest())
				}
				r := Request{Principal: s.principal, Action: q.action, Server: q.server, Target: q.target, Ref: q.ref,
					Session: s.id, ClientAddr: s.addr, Time: time.Now(), Hints: q.hints}
				want := set.Decide(r)
				if got.Allowed != want.Allowed || !slices.Equal(got.Policies, want.Policies) || got.Errors != want.Errors {
					t.Fatalf("step %d repeat %d: cached %+v, Set.Decide %+v for %+v", step, repeat, got, want, q)
				}
				if set == nil {
					if !got.Allowed {
						t.Fatal("allow all denied")
					}
					continue
				}
				allowed, ids, errs := u.authorize(twins[current], s.principal, s.id, s.addr, q)
				if allowed != want.Allowed || !slices.Equal(ids, sorted(want.Policies)) || errs != want.Errors {
					t.Fatalf("step %d: Set.Decide %+v, cedar.Authorize allowed=%v ids=%v errors=%d for %+v",
						step, want, allowed, ids, errs, q)
				}
			}
		}
	})
}

// universe is the random world of one property run.
type universe struct {
	principals []string
	groups     []string
	parents    map[string][]string // principal or group → its groups
	servers    []string
	targets    []string
}

func genUniverse(t *rapid.T) *universe {
	u := &universe{principals: []string{"", "p0", "p1", "p2"}, groups: []string{"g0", "g1", "g2"},
		parents: map[string][]string{}, servers: []string{"s0", "s1"},
		targets: []string{"t0", "t1", "file:///a", "mem://b/{x}"}}
	for _, p := range u.principals[1:] {
		for _, g := range u.groups {
			if rapid.Bool().Draw(t, "member") {
				u.parents["P:"+p] = append(u.parents["P:"+p], g)
			}
		}
	}
	for i, g := range u.groups {
		for _, h := range u.groups[i+1:] { // groups in later groups: no cycles
			if rapid.IntRange(0, 2).Draw(t, "nested") == 0 {
				u.parents["G:"+g] = append(u.parents["G:"+g], h)
			}
		}
	}
	return u
}

// entitiesJSON writes the universe's memberships as an entities file.
func (u *universe) entitiesJSON() string {
	var items []string
	add := func(typ, id string, parents []string) {
		var ps []string
		for _, g := range parents {
			ps = append(ps, fmt.Sprintf(`{"type":"Leaseledger::Group","id":%q}`, g))
		}
		items = append(items, fmt.Sprintf(`{"uid":{"type":"Leaseledger::%s","id":%q},"attrs":{},"parents":[%s]}`, typ, id, strings.Join(ps, ",")))
	}
	for _, p := range u.principals[1:] {
		add("Principal", p, u.parents["P:"+p])
	}
	for _, g := range u.groups {
		add("Group", g, u.parents["G:"+g])
	}
	return "[\n" + strings.Join(items, ",\n") + "\n]"
}

// genPolicies draws a small policy set from templates and returns its
// text and the id each policy must get.
func genPolicies(t *rapid.T, u *universe, label string) (string, []string) {
	actions := events.AccessActions()
	A := func(a events.AccessAction) string { return `Leaseledger::Action::"` + string(a) + `"` }
	templates := []func() string{
		func() string {
			return fmt.Sprintf(`permit(principal == Leaseledger::Principal::%q, action == %s, resource);`,
				rapid.SampledFrom(u.principals).Draw(t, "p"), A(rapid.SampledFrom(actions).Draw(t, "a")))
		},
		func() string {
			return fmt.Sprintf(`permit(principal in Leaseledger::Group::%q, action, resource in Leaseledger::Server::%q);`,
				rapid.SampledFrom(u.groups).Draw(t, "g"), rapid.SampledFrom(u.servers).Draw(t, "s"))
		},
		func() string {
			return `forbid(principal, action == Leaseledger::Action::"call_tool", resource) when { context.destructive };`
		},
		func() string {
			return fmt.Sprintf(`permit(principal, action == Leaseledger::Action::"call_tool", resource) when { context.read_only && resource.server == %q };`,
				rapid.SampledFrom(u.servers).Draw(t, "s"))
		},
		func() string {
			return fmt.Sprintf(`permit(principal in Leaseledger::Group::%q, action in [Leaseledger::Action::"read_resource", Leaseledger::Action::"subscribe_resource"], resource) when { resource.uri like "file://*" };`,
				rapid.SampledFrom(u.groups).Draw(t, "g"))
		},
		func() string {
			return fmt.Sprintf(`forbid(principal in Leaseledger::Group::%q, action, resource) unless { context has client_address && context.client_address.isLoopback() };`,
				rapid.SampledFrom(u.groups).Draw(t, "g"))
		},
		func() string {
			return `permit(principal, action, resource) when { context.time > datetime("2000-01-01") };`
		},
		func() string {
			return fmt.Sprintf(`permit(principal, action == Leaseledger::Action::"get_prompt", resource == Leaseledger::Prompt::"%s/%s");`,
				rapid.SampledFrom(u.servers).Draw(t, "s"), rapid.SampledFrom(u.targets).Draw(t, "t"))
		},
		func() string {
			return fmt.Sprintf(`permit(principal, action == Leaseledger::Action::"complete", resource is Leaseledger::Resource) when { resource.server == %q };`,
				rapid.SampledFrom(u.servers).Draw(t, "s"))
		},
		func() string {
			return fmt.Sprintf(`forbid(principal == Leaseledger::Principal::%q, action, resource is Leaseledger::Tool) when { context.idempotent || !context.open_world };`,
				rapid.SampledFrom(u.principals).Draw(t, "p"))
		},
		func() string {
			return `permit(principal, action, resource) when { context.session == "sess1" };`
		},
		func() string {
			return `permit(principal, action, resource) when { context.time.offset(duration("9223372036854775807ms")) > context.time };`
		},
	}
	n := rapid.IntRange(0, 6).Draw(t, "policies")
	var b strings.Builder
	ids := make([]string, n)
	for i := range n {
		ids[i] = "policy" + itoa(i)
		if rapid.Bool().Draw(t, "named") {
			ids[i] = label + "-rule" + itoa(i)
			b.WriteString(`@id("` + ids[i] + `")` + "\n")
		}
		b.WriteString(rapid.SampledFrom(templates).Draw(t, "template")() + "\n")
	}
	return b.String(), ids
}

// twinSet parses the same text into a cedar.PolicySet with the expected
// ids, without package policy.
func twinSet(t *rapid.T, text string, ids []string) *cedar.PolicySet {
	list, err := cedar.NewPolicyListFromBytes("twin", []byte(text))
	if err != nil || len(list) != len(ids) {
		t.Fatalf("twin parse: %v (%d policies, %d ids)", err, len(list), len(ids))
	}
	ps := cedar.NewPolicySet()
	for i, p := range list {
		ps.Add(cedar.PolicyID(ids[i]), p)
	}
	return ps
}

// question is one random access question.
type question struct {
	action events.AccessAction
	server string
	target string
	ref    events.CompletionRef
	hints  ToolHints
}

func genQuestion(t *rapid.T, u *universe) question {
	q := question{action: rapid.SampledFrom(events.AccessActions()).Draw(t, "action"),
		server: rapid.SampledFrom(u.servers).Draw(t, "server"),
		target: rapid.SampledFrom(u.targets).Draw(t, "target"),
		ref:    rapid.SampledFrom([]events.CompletionRef{"", events.RefPrompt, events.RefResource}).Draw(t, "ref"),
		hints: ToolHints{ReadOnly: rapid.Bool().Draw(t, "ro"), Destructive: rapid.Bool().Draw(t, "de"),
			Idempotent: rapid.Bool().Draw(t, "id"), OpenWorld: rapid.Bool().Draw(t, "ow")}}
	return q
}

// authorize decides q with cedar.Authorize on a request and entities
// built here from the schema's definition (docs/policy.md), not by the
// package: the ids come back sorted (a PolicySet is a map).
func (u *universe) authorize(ps *cedar.PolicySet, principal, session string, addr netip.Addr, q question) (bool, []string, int) {
	uid := func(typ, id string) types.EntityUID {
		return types.NewEntityUID(types.EntityType("Leaseledger::"+typ), types.String(id))
	}
	ents := types.EntityMap{}
	groups := func(key string) types.EntityUIDSet {
		var ps []types.EntityUID
		for _, g := range u.parents[key] {
			ps = append(ps, uid("Group", g))
		}
		return types.NewEntityUIDSet(ps...)
	}
	for _, p := range u.principals[1:] {
		ents[uid("Principal", p)] = types.Entity{UID: uid("Principal", p), Parents: groups("P:" + p)}
	}
	for _, g := range u.groups {
		ents[uid("Group", g)] = types.Entity{UID: uid("Group", g), Parents: groups("G:" + g)}
	}
	server := uid("Server", q.server)
	ents[server] = types.Entity{UID: server}
	var resource types.EntityUID
	ctx := types.RecordMap{"session": types.String(session), "time": types.NewDatetime(time.Now())}
	if addr.IsValid() {
		ip, _ := types.ParseIPAddr(addr.String())
		ctx["client_address"] = ip
	}
	target := func(typ, key string) types.EntityUID {
		id := uid(typ, q.server+"/"+q.target)
		ents[id] = types.Entity{UID: id, Parents: types.NewEntityUIDSet(server),
			Attributes: types.NewRecord(types.RecordMap{types.String(key): types.String(q.target), "server": types.String(q.server)})}
		return id
	}
	switch q.action {
	case events.AccessStartServer, events.AccessAnswerSampling, events.AccessAnswerElicitation, events.AccessAnswerRoots:
		resource = server
	case events.AccessCallTool:
		resource = target("Tool", "name")
		ctx["read_only"], ctx["destructive"] = types.Boolean(q.hints.ReadOnly), types.Boolean(q.hints.Destructive)
		ctx["idempotent"], ctx["open_world"] = types.Boolean(q.hints.Idempotent), types.Boolean(q.hints.OpenWorld)
	case events.AccessReadResource, events.AccessSubscribeResource:
		resource = target("Resource", "uri")
	case events.AccessGetPrompt:
		resource = target("Prompt", "name")
	case events.AccessComplete:
		switch q.ref {
		case events.RefPrompt:
			resource = target("Prompt", "name")
		case events.RefResource:
			resource = target("Resource", "uri")
		default:
			return false, nil, 0 // the schema has no such question: denied
		}
	}
	d, diag := cedar.Authorize(ps, ents, cedar.Request{Principal: uid("Principal", principal),
		Action: uid("Action", string(q.action)), Resource: resource, Context: types.NewRecord(ctx)})
	var ids []string
	for _, r := range diag.Reasons {
		ids = append(ids, string(r.PolicyID))
	}
	return d == cedar.Allow, sorted(ids), len(diag.Errors)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
