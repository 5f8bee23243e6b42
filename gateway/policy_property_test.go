//go:build linux

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/policy"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"pgregory.net/rapid"
)

// The gate is the engine, end to end: for random policy sets (permits
// and forbids over principals, groups, actions, servers, tools and tool
// hints), random principals and random requests through the gateway —
// calls of a read-only and of an unannotated tool, resource reads, on two
// servers — each request is refused with CodeAccessDenied exactly when the
// policy engine (policy.Set.Decide, asked for start_server and for the
// action) denies it, and the servers' own logs hold exactly the requests
// allowed: a denied one never reached a server. Sets are swapped under
// live sessions, so cached decisions must follow the set in force.
func TestPolicyGateEqualsEngine(t *testing.T) {
	dir := t.TempDir()
	logs := map[string][2]string{} // server → calls, reads
	var servers []server
	for _, name := range []string{"a", "b"} {
		calls, reads := filepath.Join(dir, name+"-calls"), filepath.Join(dir, name+"-reads")
		logs[name] = [2]string{calls, reads}
		servers = append(servers, server{name, testServer(map[string]string{"TESTSERVER_CALLS": calls, "TESTSERVER_READS": reads})})
	}
	principals := []string{"p0", "p1", "p2"}
	engine := policy.NewEngine(nil)
	e := newEnv(t, servers, principals, func(o *Options, _ *runtime.Options) { o.Policy = engine })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sessions := map[string]*mcp.ClientSession{}
	for _, p := range principals {
		cs := e.mustConnect(ctx, e.plain[p], nil)
		defer cs.Close()
		sessions[p] = cs
	}
	seen := map[string]int{} // log file → lines seen so far
	outcomes := map[bool]int{}

	rapid.Check(t, func(rt *rapid.T) {
		text, entities := genPolicy(rt, principals)
		set, err := policy.Parse("gen.cedar", []byte(text), "gen.json", entities)
		if err != nil {
			rt.Fatalf("generated policy does not parse: %v\n%s", err, text)
		}
		engine.Swap(set)
		for range rapid.IntRange(1, 6).Draw(rt, "requests") {
			p := rapid.SampledFrom(principals).Draw(rt, "principal")
			srv := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "server")
			kind := rapid.SampledFrom([]string{"echo", "fail", "read"}).Draw(rt, "request")
			want := engineAllows(set, p, srv, kind)
			var err error
			log := logs[srv][0]
			switch kind {
			case "read":
				log = logs[srv][1]
				_, err = sessions[p].ReadResource(ctx, &mcp.ReadResourceParams{URI: "leaseledger://" + srv + "/test://text"})
			default:
				_, err = sessions[p].CallTool(ctx, &mcp.CallToolParams{Name: srv + "__" + kind, Arguments: map[string]any{"text": "x"}})
			}
			var je *jsonrpc.Error
			denied := errors.As(err, &je) && je.Code == CodeAccessDenied
			if err != nil && !denied {
				rt.Fatalf("%s %s on %s: %v", p, kind, srv, err)
			}
			if denied == want {
				rt.Fatalf("%s %s on %s: gateway denied=%v, engine allows=%v\n%s", p, kind, srv, denied, want, text)
			}
			outcomes[want]++
			n := len(readLines(t, log))
			grew := n - seen[log]
			seen[log] = n
			if want && grew != 1 || !want && grew != 0 {
				rt.Fatalf("%s %s on %s (allowed %v): the server logged %d new requests", p, kind, srv, want, grew)
			}
		}
	})
	// Both outcomes were exercised, many times.
	if outcomes[true] < 20 || outcomes[false] < 20 {
		t.Fatalf("allowed %d, denied %d requests: the generator does not cover both", outcomes[true], outcomes[false])
	}
	t.Logf("allowed %d, denied %d requests", outcomes[true], outcomes[false])
}

// engineAllows asks the policy engine itself, as the gateway's caller
// would expect: the principal may start the server and may do the action
// (the test server's echo says readOnlyHint, fail says nothing).
func engineAllows(set *policy.Set, principal, server, kind string) bool {
	start := set.Decide(policy.Request{Principal: principal, Action: events.AccessStartServer, Server: server, Time: time.Now()})
	if !start.Allowed {
		return false
	}
	r := policy.Request{Principal: principal, Server: server, Time: time.Now(), Hints: policy.DefaultHints()}
	switch kind {
	case "read":
		r.Action, r.Target = events.AccessReadResource, "test://text"
	default:
		r.Action, r.Target = events.AccessCallTool, kind
		if kind == "echo" {
			r.Hints.ReadOnly = true
		}
	}
	return set.Decide(r).Allowed
}

// genPolicy draws a policy set of 1 to 6 permits and forbids, and the
// groups g0 and g1 with random members.
func genPolicy(t *rapid.T, principals []string) (string, []byte) {
	var b strings.Builder
	for i := range rapid.IntRange(1, 6).Draw(t, "policies") {
		effect := rapid.SampledFrom([]string{"permit", "permit", "forbid"}).Draw(t, "effect")
		who := rapid.SampledFrom(append([]string{"principal", `principal in Leaseledger::Group::"g0"`, `principal in Leaseledger::Group::"g1"`},
			`principal == Leaseledger::Principal::"`+rapid.SampledFrom(principals).Draw(t, "who")+`"`)).Draw(t, "principal")
		server := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "on")
		var what, res, when string
		switch rapid.IntRange(0, 3).Draw(t, "action") {
		case 0:
			what, res = `action == Leaseledger::Action::"start_server"`, `resource == Leaseledger::Server::"`+server+`"`
		case 1:
			what, res = `action == Leaseledger::Action::"call_tool"`, `resource in Leaseledger::Server::"`+server+`"`
			if rapid.Bool().Draw(t, "hint") {
				when = " when { context.read_only }"
			}
		case 2:
			what = `action == Leaseledger::Action::"call_tool"`
			res = `resource == Leaseledger::Tool::"` + server + "/" + rapid.SampledFrom([]string{"echo", "fail"}).Draw(t, "tool") + `"`
		default:
			what, res = `action == Leaseledger::Action::"read_resource"`, `resource in Leaseledger::Server::"`+server+`"`
		}
		if rapid.IntRange(0, 5).Draw(t, "anything") == 0 {
			what, res, when = "action", "resource", ""
		}
		fmt.Fprintf(&b, "@id(\"r%d\")\n%s (%s, %s, %s)%s;\n", i, effect, who, what, res, when)
	}
	type uid struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	type entity struct {
		UID     uid            `json:"uid"`
		Parents []uid          `json:"parents"`
		Attrs   map[string]any `json:"attrs"`
	}
	ents := []entity{{UID: uid{"Leaseledger::Group", "g0"}, Parents: []uid{}, Attrs: map[string]any{}},
		{UID: uid{"Leaseledger::Group", "g1"}, Parents: []uid{}, Attrs: map[string]any{}}}
	for _, p := range principals {
		parents := []uid{}
		for _, g := range []string{"g0", "g1"} {
			if rapid.Bool().Draw(t, p+"-in-"+g) {
				parents = append(parents, uid{"Leaseledger::Group", g})
			}
		}
		ents = append(ents, entity{UID: uid{"Leaseledger::Principal", p}, Parents: parents, Attrs: map[string]any{}})
	}
	js, _ := json.Marshal(ents)
	return b.String(), js
}
