package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/policy"
)

func init() { extraCommands = append(extraCommands, newPolicyCmd) }

// Exit statuses of policy check and policy test.
const (
	// exitDenied is policy check's status for a deny: the question was
	// answered, and the answer is no (1 stays for errors, so a script
	// tells a refusal from a broken invocation).
	exitDenied = 2
	// exitCasesFailed is policy test's status when a case failed.
	exitCasesFailed = 1
)

func newPolicyCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check and test Cedar access policies (serve --policy FILE)",
		Long: `policy works on the access policy serve enforces: a Cedar policy file and
an optional entities file (group memberships), validated against leaseledger's
Cedar schema. See docs/policy.md.

  policy schema   print the Cedar schema
  policy check    decide one question, optionally under the policy in force
                  in a ledger
  policy test     run a file of expectations against a policy`,
	}
	cmd.AddCommand(newPolicySchemaCmd(a), newPolicyCheckCmd(a), newPolicyTestCmd(a))
	return cmd
}

func newPolicySchemaCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the Cedar schema policies are validated against",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(a.stdout, policy.Schema())
			return err
		},
	}
}

// policyFiles are the --policy and --entities flags of check and test.
type policyFiles struct{ policy, entities string }

func (f *policyFiles) register(c *cobra.Command) {
	c.Flags().StringVar(&f.policy, "policy", "", "the Cedar policy file (required)")
	c.Flags().StringVar(&f.entities, "entities", "", "the entities file (Cedar JSON entities: principals and groups)")
	_ = c.MarkFlagRequired("policy")
}

func (f *policyFiles) load() (*policy.Set, error) { return policy.Load(f.policy, f.entities) }

// checkFlags is one question of policy check.
type checkFlags struct {
	principal, action, server string
	tool, prompt, resource    string
	session, clientAddr, at   string
	readOnly, destructive     bool
	idempotent, openWorld     bool
}

func newPolicyCheckCmd(a *app) *cobra.Command {
	var files policyFiles
	var q checkFlags
	def := policy.DefaultHints()
	cmd := &cobra.Command{
		Use:   "check --policy FILE [--entities FILE] --principal P --action A --server S [--tool T | --prompt N | --resource URI]",
		Short: "Decide whether a principal may do an action, and which policies decide it",
		Long: `check loads the policy (and entities) file, decides one question and prints
"allow" or "deny", the deciding policies (the permits that allowed, or the
forbids that denied; none when no permit applied) and the policy digest.

The resource is the server itself (start_server, answer_sampling,
answer_elicitation, answer_roots), a tool (call_tool: --tool), a resource
(read_resource, subscribe_resource: --resource URI) or a prompt (get_prompt:
--prompt); complete takes --prompt (a prompt's argument) or --resource (a
resource template). call_tool's hints default to MCP's defaults for a tool
without annotations: --read-only=false --destructive=true --idempotent=false
--open-world=true. --principal "" is the principal of a gateway without
tokens.

With --data-dir DIR given on the command line (LEASELEDGER_DATA alone does
not count), check also answers the auditor's question — may P do A on R under
the policy that was in force: it opens the ledger read-only, finds the
policy.loaded events that put this file pair's digest in force and prints
when (seq, time, until the next load); if none did, it refuses with exit
status 1 and decides nothing.

Exit status: 0 allow, 2 deny, 1 errors (including a digest never in force).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := q.request()
			if err != nil {
				return err
			}
			set, err := files.load()
			if err != nil {
				return err
			}
			if f := cmd.Flag("data-dir"); f != nil && f.Changed {
				if err := printInForce(cmd, a, set.Digest()); err != nil {
					return err
				}
			}
			d := set.Decide(r)
			verdict := "deny"
			if d.Allowed {
				verdict = "allow"
			}
			fmt.Fprintln(a.stdout, verdict)
			if len(d.Policies) > 0 {
				fmt.Fprintln(a.stdout, "deciding policies:", strings.Join(d.Policies, ", "))
			} else if !d.Allowed {
				fmt.Fprintln(a.stdout, "deciding policies: none (no permit applies)")
			}
			if d.Errors > 0 {
				fmt.Fprintf(a.stdout, "policies that failed to evaluate (skipped): %d\n", d.Errors)
			}
			fmt.Fprintln(a.stdout, "policy digest:", set.Digest())
			if !d.Allowed {
				return &exitError{code: exitDenied, err: errors.New("denied")}
			}
			return nil
		},
	}
	files.register(cmd)
	f := cmd.Flags()
	f.StringVar(&q.principal, "principal", "", `the principal: a token name ("" without tokens; required)`)
	f.StringVar(&q.action, "action", "", "the action: "+actionList()+" (required)")
	f.StringVar(&q.server, "server", "", "the server's name (required)")
	f.StringVar(&q.tool, "tool", "", "the tool (call_tool)")
	f.StringVar(&q.prompt, "prompt", "", "the prompt (get_prompt, complete)")
	f.StringVar(&q.resource, "resource", "", "the resource URI (read_resource, subscribe_resource) or template (complete)")
	f.StringVar(&q.session, "session", "", "context.session")
	f.StringVar(&q.clientAddr, "client-address", "", "context.client_address (absent when not given)")
	f.StringVar(&q.at, "time", "", "context.time, RFC 3339 (default: now)")
	f.BoolVar(&q.readOnly, "read-only", def.ReadOnly, "call_tool: the tool's readOnlyHint")
	f.BoolVar(&q.destructive, "destructive", def.Destructive, "call_tool: the tool's destructiveHint")
	f.BoolVar(&q.idempotent, "idempotent", def.Idempotent, "call_tool: the tool's idempotentHint")
	f.BoolVar(&q.openWorld, "open-world", def.OpenWorld, "call_tool: the tool's openWorldHint")
	for _, n := range []string{"principal", "action", "server"} {
		_ = cmd.MarkFlagRequired(n)
	}
	cmd.MarkFlagsMutuallyExclusive("tool", "prompt", "resource")
	return cmd
}

func actionList() string {
	var s []string
	for _, x := range events.AccessActions() {
		s = append(s, string(x))
	}
	return strings.Join(s, ", ")
}

// request turns the flags into a policy.Request, refusing a question the
// schema does not have (a tool for start_server, no target, …).
func (q *checkFlags) request() (policy.Request, error) {
	r := policy.Request{Principal: q.principal, Action: events.AccessAction(q.action), Server: q.server,
		Session: q.session, Time: time.Now(),
		Hints: policy.ToolHints{ReadOnly: q.readOnly, Destructive: q.destructive, Idempotent: q.idempotent, OpenWorld: q.openWorld}}
	if !r.Action.Valid() {
		return r, fmt.Errorf("--action: want one of %s", actionList())
	}
	var want string // the target flag the action takes
	switch r.Action {
	case events.AccessCallTool:
		want, r.Target = "--tool", q.tool
	case events.AccessGetPrompt:
		want, r.Target = "--prompt", q.prompt
	case events.AccessReadResource, events.AccessSubscribeResource:
		want, r.Target = "--resource", q.resource
	case events.AccessComplete:
		want = "--prompt or --resource"
		r.Target, r.Ref = q.prompt, events.RefPrompt
		if q.resource != "" {
			r.Target, r.Ref = q.resource, events.RefResource
		}
	}
	given := q.tool + q.prompt + q.resource
	switch {
	case want == "" && given != "":
		return r, fmt.Errorf("%s acts on the server itself: give no --tool, --prompt or --resource", r.Action)
	case want != "" && r.Target == "":
		return r, fmt.Errorf("%s needs %s", r.Action, want)
	}
	if q.clientAddr != "" {
		addr, err := netip.ParseAddr(q.clientAddr)
		if err != nil {
			return r, fmt.Errorf("--client-address: %w", err)
		}
		r.ClientAddr = addr
	}
	if q.at != "" {
		t, err := time.Parse(time.RFC3339Nano, q.at)
		if err != nil {
			return r, fmt.Errorf("--time: %w", err)
		}
		r.Time = t
	}
	return r, r.Validate()
}

// policyLoad is one policy.loaded event of a ledger.
type policyLoad struct {
	seq  ledger.Seq
	at   time.Time
	load *events.PolicyLoaded
}

// printInForce prints when the policy with digest was in force in the
// ledger of --data-dir, or refuses when it never was.
func printInForce(cmd *cobra.Command, a *app, digest string) error {
	l, err := openReadOnly(a)
	if err != nil {
		return err
	}
	defer l.Close()
	var loads []policyLoad
	for x, err := range l.Events(cmd.Context(), ledger.Query{Kind: events.KindPolicyLoaded}) {
		if err != nil {
			return err
		}
		p, err := x.Payload()
		if err != nil {
			return fmt.Errorf("seq %d: %w", x.Seq, err)
		}
		loads = append(loads, policyLoad{seq: ledger.Seq(x.Seq), at: x.Time, load: p.(*events.PolicyLoaded)})
	}
	found := false
	for i, x := range loads {
		if x.load.Mode != events.PolicyEnforced || x.load.Digest != digest {
			continue
		}
		found = true
		until := "still in force at the end of the ledger"
		if i+1 < len(loads) {
			n := loads[i+1]
			until = fmt.Sprintf("until seq %d (%s, %s %s)", n.seq, n.at.UTC().Format(time.RFC3339Nano), n.load.Trigger, n.load.Mode)
		}
		fmt.Fprintf(a.stdout, "in force from seq %d (%s, %s) %s\n", x.seq, x.at.UTC().Format(time.RFC3339Nano), x.load.Trigger, until)
	}
	if !found {
		return &exitError{code: 1, err: fmt.Errorf("policy digest %s was never in force in %s (no policy.loaded records it, among %d loads): this is not the policy that decided there", digest, a.dataDir, len(loads))}
	}
	return nil
}

func newPolicyTestCmd(a *app) *cobra.Command {
	var files policyFiles
	cmd := &cobra.Command{
		Use:   "test --policy FILE [--entities FILE] CASES.json",
		Short: "Run a file of expectations against a policy",
		Long: `test loads the policy (and entities) file and decides every case of
CASES.json, a JSON object {"cases": [...]}: each case names a principal, an
action, a server, a target ("target": tool, prompt or resource URI; "ref":
"ref/prompt" or "ref/resource" for complete), optionally "hints" (absent
members take MCP's defaults), "client_address", "session", "time", and
"expect": "allow" or "deny", with optionally "policies": the deciding policies
expected (in any order; [] expects none). Unknown fields are refused.

It prints one line per failing case and a summary "N cases, M failed".
Exit status: 0 when every case passed, 1 when one failed or on errors.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := files.load()
			if err != nil {
				return err
			}
			cases, err := readCases(args[0])
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range set.Test(cases) {
				if !r.Passed {
					failed++
					fmt.Fprintf(a.stdout, "FAIL %s: %s\n", r.Label(), r.Problem)
				}
			}
			fmt.Fprintf(a.stdout, "%d cases, %d failed\n", len(cases), failed)
			if failed > 0 {
				return &exitError{code: exitCasesFailed, err: fmt.Errorf("%d of %d cases failed", failed, len(cases))}
			}
			return nil
		},
	}
	files.register(cmd)
	return cmd
}

// readCases reads and parses an expectations file, bounded; errors name
// the file.
func readCases(path string) ([]policy.Case, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, policy.MaxCasesFileBytes+1))
	if err != nil {
		return nil, err
	}
	cases, err := policy.ParseCases(b)
	if e := (*policy.Error)(nil); errors.As(err, &e) {
		e.File = path
	}
	return cases, err
}
