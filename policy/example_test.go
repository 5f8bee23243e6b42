package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/policy"
)

// A research principal may start one server and call only its read-only
// tools; nobody in the group readers may call a destructive tool.
const examplePolicy = `
@id("research-docs")
permit(principal == Leaseledger::Principal::"research", action == Leaseledger::Action::"start_server",
       resource == Leaseledger::Server::"docs");

@id("research-read-only")
permit(principal == Leaseledger::Principal::"research", action == Leaseledger::Action::"call_tool",
       resource in Leaseledger::Server::"docs")
when { context.read_only };

@id("readers-no-destructive")
forbid(principal in Leaseledger::Group::"readers", action == Leaseledger::Action::"call_tool", resource)
when { context.destructive };
`

const exampleEntities = `[
  {"uid": {"type": "Leaseledger::Principal", "id": "research"}, "attrs": {},
   "parents": [{"type": "Leaseledger::Group", "id": "readers"}]}
]`

func ExampleParse() {
	set, err := policy.Parse("policy.cedar", []byte(examplePolicy), "entities.json", []byte(exampleEntities))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(set.Len(), set.IDs())

	// A tool that declares itself read-only and not destructive.
	hints := policy.DefaultHints()
	hints.ReadOnly, hints.Destructive = true, false
	d := set.Decide(policy.Request{Principal: "research", Action: events.AccessCallTool, Server: "docs",
		Target: "search", Session: "s-1", Time: time.Now(), Hints: hints})
	fmt.Println(d.Allowed, d.Policies)

	// A tool without annotations: MCP's defaults say destructive.
	d = set.Decide(policy.Request{Principal: "research", Action: events.AccessCallTool, Server: "docs",
		Target: "edit", Session: "s-1", Time: time.Now(), Hints: policy.DefaultHints()})
	fmt.Println(d.Allowed, d.Policies)
	// Output:
	// 3 [research-docs research-read-only readers-no-destructive]
	// true [research-read-only]
	// false [readers-no-destructive]
}

// Parse errors name the file, the line and column, and the policy.
func ExampleParse_error() {
	_, err := policy.Parse("policy.cedar", []byte(`
@id("readers-read-only")
permit(principal, action == Leaseledger::Action::"start_server", resource)
when { context.read_only };`), "", nil)
	fmt.Println(err)
	// Output:
	// policy.cedar:2:1: policy readers-read-only: does not validate against the schema: attribute `read_only` in context for Leaseledger::Action::"start_server" not found
}

func ExampleEngine_Session() {
	set, err := policy.Parse("policy.cedar", []byte(examplePolicy), "entities.json", []byte(exampleEntities))
	if err != nil {
		fmt.Println(err)
		return
	}
	engine := policy.NewEngine(set)
	access := engine.Session("research", "s-1", netip.MustParseAddr("10.0.0.7"))

	d, digest := access.Decide(events.AccessStartServer, "docs", "", "", policy.ToolHints{})
	fmt.Println(d.Allowed, d.Policies, digest == set.Digest())
	// Asked again: answered from the session's cache.
	d, _ = access.Decide(events.AccessStartServer, "docs", "", "", policy.ToolHints{})
	fmt.Println(d.Allowed)

	// A reload without a policy: everything is allowed, no digest.
	engine.Swap(nil)
	d, digest = access.Decide(events.AccessStartServer, "github", "", "", policy.ToolHints{})
	fmt.Printf("%v %q\n", d.Allowed, digest)
	// Output:
	// true [research-docs] true
	// true
	// true ""
}

func ExampleSet_Test() {
	set, err := policy.Parse("policy.cedar", []byte(examplePolicy), "entities.json", []byte(exampleEntities))
	if err != nil {
		fmt.Println(err)
		return
	}
	cases, err := policy.ParseCases([]byte(`{"cases": [
	  {"name": "research searches", "principal": "research", "action": "call_tool", "server": "docs",
	   "target": "search", "hints": {"read_only": true, "destructive": false}, "expect": "allow"},
	  {"name": "research deletes", "principal": "research", "action": "call_tool", "server": "docs",
	   "target": "delete", "expect": "allow"}
	]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range set.Test(cases) {
		if !r.Passed {
			fmt.Println(r.Label()+":", r.Problem)
		}
	}
	// Output:
	// research deletes: want allow, got deny (readers-no-destructive)
}

func ExampleLoad() {
	dir, err := os.MkdirTemp("", "policy-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	pol := filepath.Join(dir, "policy.cedar")
	if err := os.WriteFile(pol, []byte(examplePolicy), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	set, err := policy.Load(pol, "") // no entities file: research is in no group
	if err != nil {
		fmt.Println(err)
		return
	}
	d := set.Decide(policy.Request{Principal: "research", Action: events.AccessCallTool, Server: "docs",
		Target: "edit", Time: time.Now(), Hints: policy.DefaultHints()})
	fmt.Println(set.Len(), d.Allowed, d.Policies)

	_, err = policy.Load(filepath.Join(dir, "missing.cedar"), "")
	fmt.Println(errors.Is(err, policy.ErrRead))
	// Output:
	// 3 false []
	// true
}

// The digest is defined on the files' bytes; this is its whole
// definition.
func ExampleDigest() {
	pol, ent := []byte("permit(principal, action, resource);\n"), []byte("[]\n")
	sum := sha256.Sum256([]byte(fmt.Sprintf("leaseledger-policy-v1\n%d\n%s%d\n%s", len(pol), pol, len(ent), ent)))
	fmt.Println(policy.Digest(pol, ent) == hex.EncodeToString(sum[:]))

	set, err := policy.Parse("policy.cedar", pol, "entities.json", ent)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(set.Digest() == policy.Digest(pol, ent))
	// Output:
	// true
	// true
}

func ExampleSchema() {
	fmt.Println(strings.Contains(policy.Schema(), "namespace Leaseledger"))
	// Output:
	// true
}

// A question the schema does not have is refused by Validate and denied
// by Decide.
func ExampleRequest_Validate() {
	r := policy.Request{Principal: "bob", Action: events.AccessComplete, Server: "docs", Target: "summarize"}
	fmt.Println(errors.Is(r.Validate(), policy.ErrRequest))
	r.Ref = events.RefPrompt // a prompt's argument
	fmt.Println(r.Validate())
	// Output:
	// true
	// <nil>
}
