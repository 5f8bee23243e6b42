package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/spf13/cobra"
)

func init() { extraCommands = append(extraCommands, newAuditCmd) }

// exitUnconfirmed is the exit status of an audit whose verdict (or any
// verdict, with --all) is unconfirmed.
const exitUnconfirmed = 2

func newAuditCmd(a *app) *cobra.Command {
	var (
		asJSON   bool
		all      bool
		timeline int
		limit    int
		bundle   string
		vkey     string
		trusted  []string
	)
	cmd := &cobra.Command{
		Use:   "audit <activation> | audit --all",
		Short: "Reconstruct cleanup evidence and verdicts from the log alone",
		Long: `audit rebuilds the projector's state from the events in --data-dir (no
snapshot is used) and reports cleanup evidence.

With an activation, it prints the activation's timeline, every tracked
resource with its status and facts, the recent confirmed receipts and the
aggregate resources, the connection and its close report, the access
policy's decisions naming it (by action and outcome and by deciding
policy) and what it denied with the deciding policies, the resource
request timelines, the HTTP request timelines (each redirect hop with its
origins and barriers, completions, barriers, worker ends, lost evidence),
and the verdict (confirmed / unconfirmed) with every reason it is not
confirmed. Every event of the activation is decoded strictly
(events.Decode). --json prints the same as one JSON object (its shape is
documented in package projector/audit).

With --all, it replays the whole log (with a progress bar on stderr) and
prints the host the chain is bound to (host.bound, when there is one), the
access policy in force (the last policy.loaded: enforced with its digest,
or allow_all) with every decision's totals, the number of activations by
verdict and the unconfirmed ones.

With --bundle FILE --vkey KEY it needs no data directory: it reads an
evidence bundle (from 'bundle'), verifies every event in it as 'verify
--bundle' does, and rebuilds the verdicts from the bundle's events alone,
printed as above. With no activation it audits the bundle's activation (an
activation bundle) or summarises every activation of the bundle's range.
With --checkpoint FILE (repeatable) the bundle must also prove that its
history extends that signed checkpoint, as 'verify --bundle' does.

The hash chain is not checked here: run 'leaseledger verify' first.
Exit status: 0 when confirmed (every activation, with --all), 2 when
unconfirmed, 1 on errors.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if bundle != "" && !all && len(args) <= 1 {
				return nil // the activation may come from the bundle
			}
			if all && len(args) != 0 {
				return errors.New("--all takes no activation")
			}
			if !all && len(args) != 1 {
				return errors.New("give one activation, or --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(trusted) > 0 && bundle == "" {
				return errors.New("--checkpoint is for --bundle (verify checks a data directory against checkpoints)")
			}
			if bundle != "" {
				return auditBundle(cmd, a, bundle, vkey, trusted, args, all, asJSON, timeline, limit)
			}
			l, err := openReadOnly(a)
			if err != nil {
				return err
			}
			defer l.Close()
			if all {
				return auditAll(cmd, a, l, asJSON, limit)
			}
			return auditOne(cmd, a, l, args[0], asJSON, timeline)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON instead of text")
	f.BoolVar(&all, "all", false, "summarise every activation")
	f.IntVar(&timeline, "timeline", audit.DefaultTimeline, "print at most the last N events of the timeline (0: all)")
	f.IntVar(&limit, "limit", audit.DefaultUnconfirmed, "with --all, list at most N unconfirmed activations (0: all)")
	f.StringVar(&bundle, "bundle", "", "audit the events of this evidence bundle (from 'bundle') instead of --data-dir, after verifying it")
	f.StringVar(&vkey, "vkey", "", "verifier key for --bundle (from 'checkpoint keygen')")
	f.StringArrayVar(&trusted, "checkpoint", nil, "with --bundle, a signed checkpoint file (from 'checkpoint', or a witness's state) the bundle must prove it extends (repeatable)")
	return cmd
}

func auditOne(cmd *cobra.Command, a *app, l *ledger.Ledger, id string, asJSON bool, keep int) error {
	if !events.ValidID(id) {
		return &exitError{code: 1, err: errors.New("activation: want " + events.IDRule)}
	}
	if keep <= 0 {
		keep = audit.All
	}
	f := audit.NewFold(id, audit.Options{Timeline: keep})
	err := l.Scan(cmd.Context(), ledger.Query{Activation: id}, func(seq ledger.Seq, raw []byte) error {
		if err := f.AddRaw(raw); err != nil {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return printActivation(a, f, id, asJSON)
}

// printActivation prints the audit folded in f (text or JSON) and gives
// the exit status of its verdict.
func printActivation(a *app, f *audit.Fold, id string, asJSON bool) error {
	out, err := f.Result()
	if errors.Is(err, audit.ErrNoEvents) {
		return &exitError{code: 1, err: fmt.Errorf("no events for activation %s", id)}
	}
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		printReport(a.stdout, &out)
	}
	if out.Report.Verdict == projector.ResultUnconfirmed {
		return &exitError{code: exitUnconfirmed, err: fmt.Errorf("activation %s: unconfirmed", id)}
	}
	return nil
}

func factsJSON(f projector.Facts) string {
	b, _ := json.Marshal(f)
	return string(b)
}

func printReport(w io.Writer, out *audit.Activation) {
	r := &out.Report
	fmt.Fprintf(w, "activation %s (session %s, server %s)\n", r.Activation, orNone(r.Session), orNone(r.Server))
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
	if len(r.Reasons) > 0 {
		fmt.Fprintln(w, "reasons:")
		for _, why := range r.Reasons {
			fmt.Fprintf(w, "  - %s\n", why)
		}
		if r.ReasonsOmitted > 0 {
			fmt.Fprintf(w, "  - … and %d more\n", r.ReasonsOmitted)
		}
	}
	fmt.Fprintf(w, "events: %d (seq %d..%d)\n", r.Events, r.FirstSeq, r.LastSeq)
	if af := out.AcquireFailed; af != nil {
		fmt.Fprintf(w, "acquisition failed at seq %d: %s%s\n", af.Seq, af.Reason, acquireCauseText(af))
	}
	c := r.Connection
	if c.Opened {
		fmt.Fprintf(w, "connection: transport=%s cleanup=%s one_shot=%t phase=%s\n", c.Transport, c.Cleanup, c.OneShot, c.Phase)
	} else {
		fmt.Fprintf(w, "connection: not opened in this log (phase %s)\n", c.Phase)
	}
	if rep := c.Report; rep != nil {
		fmt.Fprintf(w, "close report (version %d): %s, closed at seq %d (%s), elapsed %dns, close calls %d, retained %t\n",
			rep.Version, rep.Result, rep.ClosedSeq, rep.ClosedAt.UTC().Format(events.TimeLayout), rep.ElapsedNS, rep.CloseCalls, rep.Retained)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, o := range rep.Obligations {
			fmt.Fprintf(tw, "  %s\t%s\t%s\tlast barrier: %s\n", o.Name, o.Status, orNone(o.Reason), orNone(string(o.Last.Outcome)))
		}
		tw.Flush()
	} else {
		fmt.Fprintln(w, "close report: none retained")
	}
	n := r.Counts
	fmt.Fprintf(w, "resources: %d (confirmed %d = %d recent + %d aggregated; pending %d, missing %d, unsupported %d, lost %d)\n",
		n.Resources, n.Confirmed, n.Recent, n.Aggregated, n.Pending, n.Missing, n.Unsupported, n.Lost)
	if r.Frozen {
		fmt.Fprintf(w, "evidence frozen at close; %d late event(s) recorded without effect\n", r.LateEvents)
	}
	if r.Anomalies > 0 {
		fmt.Fprintf(w, "evidence anomalies: %d\n", r.Anomalies)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if len(r.Resources) > 0 {
		fmt.Fprintln(tw, "tracked resources:")
		for _, x := range r.Resources {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s (%s)\t%s\n", x.ID, x.Kind, x.Scope, x.Status, orNone(x.Reason), factsJSON(x.Facts))
		}
	}
	if len(r.Recent) > 0 {
		fmt.Fprintln(tw, "recent confirmed receipts (oldest first):")
		for _, x := range r.Recent {
			fmt.Fprintf(tw, "  %s\t%s\t%s\tconfirmed at seq %d\t%s\n", x.ID, x.Kind, x.Scope, x.ConfirmedSeq, factsJSON(x.Facts))
		}
	}
	if len(r.Aggregates) > 0 {
		fmt.Fprintln(tw, "aggregate resources:")
		for _, x := range r.Aggregates {
			fmt.Fprintf(tw, "  %s\taggregate=%t\tconfirmed_count=%d\n", x.ID, x.Evidence.Aggregate, x.Evidence.ConfirmedCount)
		}
	}
	tw.Flush()
	if ls := r.Lease; ls != nil {
		fmt.Fprintf(w, "lease %s/%s: state %s, fingerprint %s, listing %s, calls in flight %d, admitted %d, refused %d, gate violations %d\n",
			ls.KeySession, ls.Server, ls.State, ls.Fingerprint, orNone(ls.ListingDigest), ls.CallsInFlight, ls.CallsAdmitted, ls.CallsRefused, ls.GateViolations)
	}
	if rc := r.Relays; rc != nil {
		fmt.Fprintf(w, "relays: %d (accepted %d, declined %d, cancelled %d, error %d, timed_out %d, refused %d)\n",
			rc.Total(), rc.Accepted, rc.Declined, rc.Cancelled, rc.Error, rc.TimedOut, rc.Refused)
	}
	printActivity(w, r)
	if r.Access != nil {
		printAccess(w, r.Access)
	}
	printDenials(w, out)
	if len(out.Requests) > 0 {
		printListHeader(w, "requests", len(out.Requests), out.RequestsOmitted)
		for _, r := range out.Requests {
			fmt.Fprintf(w, "  %s owner %s %s, wire ids [%s]\n", r.Handle, orNone(r.Owner), orNone(string(r.Method)), strings.Join(r.WireIDs, " "))
			printSteps(w, r.Steps, r.StepsOmitted)
		}
	}
	printHTTP(w, out)
	printUnknownCalls(w, out)
	fmt.Fprintf(w, "timeline (%d event(s)", len(out.Timeline))
	if out.TimelineOmitted > 0 {
		fmt.Fprintf(w, ", %d earlier omitted", out.TimelineOmitted)
	}
	fmt.Fprintln(w, "):")
	for _, e := range out.Timeline {
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\n", e.Seq, e.Time.UTC().Format(events.TimeLayout), e.Kind, e.Data)
	}
}

// printActivity prints, next to the relays, the activation's
// subscriptions (started, ended by reason, open: a subscription ends with
// its session or lease, so one open is reported, never a failure), list
// changes and request handles by method, each only when it had some.
func printActivity(w io.Writer, r *projector.ActivationReport) {
	if sc := r.Subscriptions; sc != nil {
		fmt.Fprintf(w, "subscriptions: %d started, %d ended (unsubscribed %d, session_ended %d, lease_ended %d), %d open",
			sc.Started, sc.Ended(), sc.Unsubscribed, sc.SessionEnded, sc.LeaseEnded, sc.Open)
		if sc.Unmatched > 0 {
			fmt.Fprintf(w, ", %d unmatched", sc.Unmatched)
		}
		fmt.Fprintln(w)
	}
	if lc := r.ListChanges; lc != nil {
		fmt.Fprintf(w, "list changes: %d (tools %d, prompts %d, resources %d)\n", lc.Total(), lc.Tools, lc.Prompts, lc.Resources)
	}
	if len(r.RequestMethods) > 0 {
		fmt.Fprintln(w, "requests by method:")
		for _, m := range slices.Sorted(maps.Keys(r.RequestMethods)) {
			c := r.RequestMethods[m]
			fmt.Fprintf(w, "  %s: %d registered (ok %d, error %d, timeout %d, cancelled %d)\n", m, c.Registered, c.OK, c.Error, c.Timeout, c.Cancelled)
		}
	}
}

// printAccess prints decisions of the access policy: the totals, by
// action (in the catalogue's order) and by deciding policy (in id order,
// the labels of decisions naming no policy first).
func printAccess(w io.Writer, c *projector.AccessCounts) {
	fmt.Fprintf(w, "access: %d decision(s) (%d allowed, %d denied)\n", c.Total(), c.Allowed, c.Denied)
	for _, act := range events.AccessActions() {
		if o, ok := c.Actions[act]; ok {
			fmt.Fprintf(w, "  %s: %d allowed, %d denied\n", act, o.Allowed, o.Denied)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.Policies)) {
		o := c.Policies[id]
		note := ""
		switch id {
		case projector.PolicyNoPermit:
			note = " (no permit applied)"
		case projector.PolicyOther:
			note = fmt.Sprintf(" (the ids past the first %d, counted together)", projector.MaxAccessPolicies)
		}
		fmt.Fprintf(w, "  policy %s: %d allowed, %d denied%s\n", id, o.Allowed, o.Denied, note)
	}
	if c.PoliciesOmitted > 0 {
		fmt.Fprintf(w, "  deciding policies the records left out: %d\n", c.PoliciesOmitted)
	}
}

// printDenials prints what the access policy denied the activation, with
// the deciding policies (none: no permit applied) and the policy set.
func printDenials(w io.Writer, out *audit.Activation) {
	if len(out.AccessDenied) == 0 && out.AccessDeniedOmitted == 0 {
		return
	}
	printListHeader(w, "access denied", len(out.AccessDenied), out.AccessDeniedOmitted)
	for _, x := range out.AccessDenied {
		fmt.Fprintf(w, "  seq %d %s (session %s)", x.Seq, x.Action, orNone(x.Session))
		if x.CallID != "" {
			fmt.Fprintf(w, " call %s tool %s", x.CallID, x.Tool)
		}
		if x.TargetSHA256 != "" {
			fmt.Fprintf(w, " target %s", short(x.TargetSHA256))
		}
		if len(x.Policies) == 0 && x.PoliciesOmitted == 0 {
			fmt.Fprint(w, ": no permit applied")
		} else {
			fmt.Fprintf(w, ": policies %s", strings.Join(x.Policies, " "))
			if x.PoliciesOmitted > 0 {
				fmt.Fprintf(w, " (+%d left out)", x.PoliciesOmitted)
			}
		}
		fmt.Fprintf(w, "; policy set %s\n", short(x.PolicyDigest))
	}
}

// printPolicy prints the access policy in force (the last policy.loaded)
// and every decision's totals.
func printPolicy(w io.Writer, p *projector.PolicyReport) {
	loads := fmt.Sprintf("%d load(s)", p.Loads)
	if p.LoadsOmitted > 0 {
		loads += fmt.Sprintf(", the last %d kept", len(p.Recent))
	}
	switch in := p.InForce; {
	case in == nil:
		fmt.Fprintln(w, "policy: none recorded (no policy.loaded in the log)")
	case in.Mode == events.PolicyEnforced:
		fmt.Fprintf(w, "policy: enforced %s (%d policies, loaded at seq %d; %s)\n", short(in.Digest), in.Policies, in.Seq, loads)
	default:
		fmt.Fprintf(w, "policy: %s (default), loaded at seq %d; %s\n", in.Mode, in.Seq, loads)
	}
	if p.Decisions != nil {
		printAccess(w, p.Decisions)
	}
}

// acquireCauseText is a failed acquisition's cause as " (cause …, target
// host:port, http status …, exit code …, signal …)", or "" without one.
func acquireCauseText(af *audit.AcquireFailure) string {
	if af.Cause == "" {
		return ""
	}
	s := " (cause " + string(af.Cause)
	if af.Target != "" {
		s += ", target " + af.Target
	}
	if af.HTTPStatus != 0 {
		s += fmt.Sprintf(", http status %d", af.HTTPStatus)
	}
	if af.ExitCode != nil {
		s += fmt.Sprintf(", exit code %d", *af.ExitCode)
	}
	if af.Signal != "" {
		s += ", signal " + af.Signal
	}
	return s + ")"
}

// printListHeader prints a bounded list's title line: "title (n):", or
// "title (n, m more omitted):" when the list was cut.
func printListHeader(w io.Writer, title string, n, omitted int) {
	fmt.Fprintf(w, "%s (%d", title, n)
	if omitted > 0 {
		fmt.Fprintf(w, ", %d more omitted", omitted)
	}
	fmt.Fprintln(w, "):")
}

// printUnknownCalls prints the admitted calls whose outcome the log does
// not hold (running: the lease may still finish them; lost: it ended
// without their call.finished).
func printUnknownCalls(w io.Writer, out *audit.Activation) {
	if len(out.CallsOutcomeUnknown) == 0 && out.CallsOutcomeUnknownOmitted == 0 {
		return
	}
	printListHeader(w, "calls with unknown outcome", len(out.CallsOutcomeUnknown), out.CallsOutcomeUnknownOmitted)
	for _, c := range out.CallsOutcomeUnknown {
		fmt.Fprintf(w, "  %s\t%s\ttool %s\tsession %s\tadmitted at seq %d\n", c.CallID, c.State, c.Tool, orNone(c.Session), c.AdmittedSeq)
	}
}

// printHTTP prints the HTTP request timelines: per request its status,
// each redirect hop with its origins, status and barriers, then its steps.
func printHTTP(w io.Writer, out *audit.Activation) {
	if len(out.HTTPRequests) == 0 && out.HTTPRequestsOmitted == 0 {
		return
	}
	printListHeader(w, "http requests", len(out.HTTPRequests), out.HTTPRequestsOmitted)
	for _, r := range out.HTTPRequests {
		fmt.Fprintf(w, "  %s %s %s (scope %s): %s, barriers [%s]", r.Ref, orNone(string(r.Method)), orNone(r.Origin), orNone(r.Scope),
			statusText(r.Status, r.Reason), barriersText(r.Barriers, r.BarriersOmitted))
		if c := r.Completed; c != nil {
			fmt.Fprintf(w, ", completed %s %d", c.Outcome, c.Status)
			if c.Detail != "" {
				fmt.Fprintf(w, " (%s)", c.Detail)
			}
		}
		if wd := r.WorkerDown; wd != nil {
			fmt.Fprintf(w, ", worker %s down (%s)", wd.Worker, wd.Reason)
		}
		if r.Lost != nil {
			fmt.Fprintf(w, ", lost (%s)", r.Lost.Reason)
		}
		fmt.Fprintln(w)
		for _, h := range r.Hops {
			same := "cross origin"
			if h.SameOrigin {
				same = "same origin"
			}
			fmt.Fprintf(w, "    hop %d %s: %d %s → %s (%s): %s, barriers [%s]", h.Hop, h.Ref, h.RedirectStatus, orNone(h.FromOrigin), h.ToOrigin, same,
				statusText(h.Status, h.Reason), barriersText(h.Barriers, h.BarriersOmitted))
			if h.Lost != nil {
				fmt.Fprintf(w, ", lost (%s)", h.Lost.Reason)
			}
			fmt.Fprintln(w)
		}
		if r.HopsOmitted > 0 {
			fmt.Fprintf(w, "    … and %d more hop(s)\n", r.HopsOmitted)
		}
		printSteps(w, r.Steps, r.StepsOmitted)
	}
}

func statusText(st projector.Status, reason string) string {
	if reason == "" {
		return orNone(string(st))
	}
	return fmt.Sprintf("%s (%s)", orNone(string(st)), reason)
}

func barriersText(bs []audit.HTTPBarrier, omitted int) string {
	var parts []string
	for _, b := range bs {
		t := string(b.Outcome)
		if b.Late {
			t += " (late)"
		}
		parts = append(parts, t)
	}
	if omitted > 0 {
		parts = append(parts, fmt.Sprintf("… %d more", omitted))
	}
	return strings.Join(parts, " ")
}

// printSteps prints a timeline entry's steps and how many were left out.
func printSteps(w io.Writer, steps []string, omitted int) {
	for _, st := range steps {
		fmt.Fprintf(w, "    %s\n", st)
	}
	if omitted > 0 {
		fmt.Fprintf(w, "    … and %d more step(s)\n", omitted)
	}
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// auditAll replays the whole log through an audit stream (live.Stream,
// which settles retired activations as it goes, so memory follows live
// state and the activations listed, not history) and prints the summary of
// every activation, with the chain's bound host (TestAuditAllHost) and a
// progress bar on stderr.
func auditAll(cmd *cobra.Command, a *app, l *ledger.Ledger, asJSON bool, limit int) error {
	if limit <= 0 {
		limit = audit.All
	}
	pb := newProgress(a.stderr, "audit")
	s := live.NewStream(live.StreamOptions{Audit: true, Limit: limit, Progress: pb.update})
	if err := s.Scan(cmd.Context(), l); err != nil {
		return err
	}
	pb.finish()
	sum, err := s.Summary()
	if err != nil {
		return err
	}
	return printSummaryOut(a, sum, asJSON)
}

// printSummaryOut prints a summary (text or JSON) and gives the exit
// status of its verdicts.
func printSummaryOut(a *app, out audit.Summary, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		if out.Host != "" {
			fmt.Fprintf(a.stdout, "host: %s\n", out.Host)
		}
		fmt.Fprintf(a.stdout, "events: %d\nactivations: %d\nconfirmed: %d\nunconfirmed: %d (not closed: %d)\nnever started: %d\n",
			out.Events, out.Activations, out.Verdicts[projector.ResultConfirmed], out.Verdicts[projector.ResultUnconfirmed], out.NotClosed,
			out.Verdicts[projector.ResultNeverStarted])
		if n := out.Verdicts[projector.ResultUnverified]; n > 0 {
			// Direct children ("cleanup": "direct"): closed as the host
			// observed, with nothing to vouch for their release. No failure.
			fmt.Fprintf(a.stdout, "unverified: %d (direct children: the host saw them exit; release not verified)\n", n)
		}
		printPolicy(a.stdout, &out.Policy)
		if an := out.Anomalies; an != (projector.Anomalies{}) {
			fmt.Fprintf(a.stdout, "anomalies: unattributed %d, orphan lease events %d, orphan request events %d, unknown %d\n",
				an.Unattributed, an.OrphanLease, an.OrphanRequest, an.Unknown)
		}
		for _, u := range out.Unconfirmed {
			first := ""
			if len(u.Reasons) > 0 {
				first = u.Reasons[0]
			}
			fmt.Fprintf(a.stdout, "  %s\t%s\n", u.Activation, strings.TrimSpace(first))
		}
		if out.Omitted > 0 {
			fmt.Fprintf(a.stdout, "  … and %d more unconfirmed (raise --limit)\n", out.Omitted)
		}
	}
	if out.Verdicts[projector.ResultUnconfirmed] > 0 {
		return &exitError{code: exitUnconfirmed, err: fmt.Errorf("%d of %d activations unconfirmed", out.Verdicts[projector.ResultUnconfirmed], out.Activations)}
	}
	return nil
}
