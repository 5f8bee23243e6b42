package projector

import (
	"maps"

	"github.com/leaseledger/leaseledger/events"
)

// Bounds of the access evidence.
const (
	// MaxAccessPolicies bounds the policy ids one activation's, one
	// session's or the whole state's access counts keep one by one: the
	// decisions of any further id are counted under PolicyOther, so a
	// policy set of thousands of policies costs each scope no more than
	// this many entries.
	MaxAccessPolicies = 64
	// MaxPolicyLoads bounds the policy loads the state keeps, the last
	// ones; PolicyReport.Loads counts every one and LoadsOmitted the
	// ones no longer kept.
	MaxPolicyLoads = 16
)

// Keys of AccessCounts.Policies that are not policy ids. A policy id
// matches events.IDRule, which has neither parentheses nor spaces, so no
// label is ever taken for an id.
const (
	// PolicyNoPermit counts the denials that name no policy: no permit
	// applied, so the policy set's default (deny) decided.
	PolicyNoPermit = "(no permit)"
	// PolicyUnnamed counts the allowed decisions that name no policy.
	// The runtime records the permits that allowed a decision, so none is
	// expected; one is counted rather than dropped.
	PolicyUnnamed = "(unnamed)"
	// PolicyOther counts the decisions of the policy ids met after
	// MaxAccessPolicies others were kept one by one.
	PolicyOther = "(other)"
)

// refusedAccessDenied is Activation.Refused for an activation whose
// start the access policy denied (access.decided start_server, not
// allowed) before anything of it started.
const refusedAccessDenied = "access_denied"

// AccessOutcomes counts decisions by outcome.
type AccessOutcomes struct {
	Allowed uint64 `json:"allowed,omitempty"`
	Denied  uint64 `json:"denied,omitempty"`
}

func (o *AccessOutcomes) add(allowed bool) {
	if allowed {
		o.Allowed++
	} else {
		o.Denied++
	}
}

// AccessCounts counts the decisions of the access policy of one scope
// (an activation, a session, or every one): access.decided, and the tool
// calls decided under a policy set (call.admitted with a policy_digest,
// call.refused reason policy) as action call_tool. A call admitted with no
// policy set in force (mode allow_all) was decided by no policy and is
// not counted. Only the decisions are here: the log holds each one with
// its digest.
type AccessCounts struct {
	// Allowed and Denied count every decision; Actions counts them by
	// action, and sums to them.
	Allowed uint64                                 `json:"allowed"`
	Denied  uint64                                 `json:"denied"`
	Actions map[events.AccessAction]AccessOutcomes `json:"actions"`
	// Policies counts decisions by deciding policy id: a decision counts
	// once under each policy it names (the permits that allowed it, or
	// the forbids that denied it), a denial naming none under
	// PolicyNoPermit, an allowed decision naming none under
	// PolicyUnnamed, and the ids past MaxAccessPolicies under PolicyOther.
	Policies map[string]AccessOutcomes `json:"policies"`
	// PoliciesOmitted sums the deciding policies the decisions left out
	// of their record (past events.MaxDecidingPolicies): named nowhere,
	// so counted under no id.
	PoliciesOmitted uint64 `json:"policies_omitted,omitempty"`
}

// Total is the number of decisions counted.
func (c *AccessCounts) Total() uint64 {
	if c == nil {
		return 0
	}
	return c.Allowed + c.Denied
}

// DeniedCount is c.Denied, 0 for nil.
func (c *AccessCounts) DeniedCount() uint64 {
	if c == nil {
		return 0
	}
	return c.Denied
}

// decide counts one decision in *pc, created at the first.
func decide(pc **AccessCounts, action events.AccessAction, allowed bool, ids []string, omitted int) {
	c := *pc
	if c == nil {
		c = &AccessCounts{Actions: map[events.AccessAction]AccessOutcomes{}, Policies: map[string]AccessOutcomes{}}
		*pc = c
	}
	if allowed {
		c.Allowed++
	} else {
		c.Denied++
	}
	o := c.Actions[action]
	o.add(allowed)
	c.Actions[action] = o
	c.PoliciesOmitted += uint64(omitted)
	if len(ids) == 0 && omitted == 0 {
		label := PolicyNoPermit
		if allowed {
			label = PolicyUnnamed
		}
		c.countPolicy(label, allowed)
		return
	}
	for i, id := range ids {
		if isRepeated(ids[:i], id) {
			continue // one decision counts once under each policy it names
		}
		if _, kept := c.Policies[id]; !kept && c.policyIDs() >= MaxAccessPolicies {
			id = PolicyOther
		}
		c.countPolicy(id, allowed)
	}
}

func (c *AccessCounts) countPolicy(key string, allowed bool) {
	o := c.Policies[key]
	o.add(allowed)
	c.Policies[key] = o
}

// policyIDs is the number of policy ids c.Policies keeps one by one.
func (c *AccessCounts) policyIDs() int {
	n := len(c.Policies)
	for _, label := range [...]string{PolicyNoPermit, PolicyUnnamed, PolicyOther} {
		if _, ok := c.Policies[label]; ok {
			n--
		}
	}
	return n
}

func isRepeated(before []string, id string) bool {
	for _, x := range before {
		if x == id {
			return true
		}
	}
	return false
}

// accessCopy returns a deep copy of c for a report or a snapshot; nil for
// nil.
func accessCopy(c *AccessCounts) *AccessCounts {
	if c == nil {
		return nil
	}
	x := *c
	x.Actions, x.Policies = maps.Clone(c.Actions), maps.Clone(c.Policies)
	return &x
}

// accessValid reports whether c, read from a snapshot, is counts decide
// could have made: nil, or at least one decision, every action known,
// the actions summing to the totals, every policy key an id or a label,
// at most MaxAccessPolicies ids.
func accessValid(c *AccessCounts) bool {
	if c == nil {
		return true
	}
	var allowed, denied uint64
	for k, o := range c.Actions {
		if !k.Valid() {
			return false
		}
		allowed, denied = allowed+o.Allowed, denied+o.Denied
	}
	if allowed != c.Allowed || denied != c.Denied || allowed+denied == 0 || c.Policies == nil {
		return false
	}
	for k := range c.Policies {
		if k != PolicyNoPermit && k != PolicyUnnamed && k != PolicyOther && !events.ValidID(k) {
			return false
		}
	}
	return c.policyIDs() <= MaxAccessPolicies
}

// accessDecided counts one decision of the access policy (access.decided,
// or a tool call's decision as call_tool) in a (the event's activation,
// nil when none), in the open session the event names, and in the
// state's total. A decision naming a session that is not open (never
// recorded opened, or ended) is counted in the rest only: a session's
// counts live as long as its row (Session), an activation's as long as
// the activation.
func (s *State) accessDecided(e *event, a *Activation, action events.AccessAction, allowed bool, ids []string, omitted int) {
	if a != nil {
		decide(&a.Access, action, allowed, ids, omitted)
		if !allowed && action == events.AccessStartServer && !a.Started && a.Refused == "" {
			// Its start was denied before anything started: a refusal with
			// no cleanup obligation, like an acquisition refused by a cap.
			a.Refused = refusedAccessDenied
		}
	}
	if x := s.sessions[e.session]; x != nil && e.session != "" {
		decide(&x.Access, action, allowed, ids, omitted)
	}
	decide(&s.policy.decisions, action, allowed, ids, omitted)
}

// PolicyLoad is one policy.loaded: an access policy put in force.
type PolicyLoad struct {
	Seq     uint64               `json:"seq"`
	At      events.Instant       `json:"at"`
	Trigger events.ConfigTrigger `json:"trigger"`
	Mode    events.PolicyMode    `json:"mode"`
	// Digest is the policy set's SHA-256 (mode enforced only).
	Digest   string `json:"digest,omitempty"`
	Policies int    `json:"policies"`
}

// PolicyReport is the access policy as the log records it: the policy in
// force, the history of its loads, and the decisions of every scope.
type PolicyReport struct {
	// InForce is the last policy.loaded; absent when none was recorded
	// (a log written before policies were recorded).
	InForce *PolicyLoad `json:"in_force,omitempty"`
	// Loads counts every policy.loaded; Recent holds the last
	// MaxPolicyLoads, oldest first (absent when none), and LoadsOmitted
	// the earlier ones no longer kept.
	Loads        uint64       `json:"loads"`
	Recent       []PolicyLoad `json:"recent,omitempty"`
	LoadsOmitted uint64       `json:"loads_omitted,omitempty"`
	// Decisions counts every decision of the access policy the state
	// applied (access.decided, and the tool calls decided under a policy
	// set); absent when none.
	Decisions *AccessCounts `json:"decisions,omitempty"`
}

// policyState is the state's access policy: the last MaxPolicyLoads loads
// (the last is in force), how many there were, and the decisions of every
// scope.
type policyState struct {
	loads     uint64
	recent    []PolicyLoad
	decisions *AccessCounts
}

// policyLoaded records a policy.loaded: it is in force from now on.
func (s *State) policyLoaded(e *event, p *events.PolicyLoaded) {
	ps := &s.policy
	ps.loads++
	if len(ps.recent) == MaxPolicyLoads {
		copy(ps.recent, ps.recent[1:])
		ps.recent = ps.recent[:MaxPolicyLoads-1]
	}
	ps.recent = append(ps.recent, PolicyLoad{Seq: e.seq, At: events.Instant{Time: e.time}, Trigger: p.Trigger,
		Mode: p.Mode, Digest: p.Digest, Policies: p.Policies})
}

// Policy returns the access policy as the log records it: the policy in
// force, the last loads, the decisions of every scope. It is a copy.
func (s *State) Policy() PolicyReport {
	ps := &s.policy
	r := PolicyReport{Loads: ps.loads, LoadsOmitted: ps.loads - uint64(len(ps.recent)), Decisions: accessCopy(ps.decisions)}
	if len(ps.recent) > 0 {
		r.Recent = append([]PolicyLoad(nil), ps.recent...)
		last := r.Recent[len(r.Recent)-1]
		r.InForce = &last
	}
	return r
}

// policyWire is the snapshot's form of policyState.
type policyWire struct {
	Loads     uint64        `json:"loads"`
	Recent    []PolicyLoad  `json:"recent,omitempty"`
	Decisions *AccessCounts `json:"decisions,omitempty"`
}

// wirePolicy returns ps's snapshot form; nil when nothing was recorded.
func wirePolicy(ps *policyState) *policyWire {
	if ps.loads == 0 && ps.decisions == nil {
		return nil
	}
	return &policyWire{Loads: ps.loads, Recent: ps.recent, Decisions: ps.decisions}
}

// restorePolicy is wirePolicy's inverse; false when w is inconsistent:
// kept loads other than the last min(loads, MaxPolicyLoads), out of seq
// order or of an unknown mode, or counts decide could not have made.
func restorePolicy(w *policyWire) (policyState, bool) {
	if w == nil {
		return policyState{}, true
	}
	if uint64(len(w.Recent)) != min(w.Loads, MaxPolicyLoads) || !accessValid(w.Decisions) || (w.Loads == 0 && w.Decisions == nil) {
		return policyState{}, false
	}
	for i, l := range w.Recent {
		if !l.Mode.Valid() || (i > 0 && l.Seq <= w.Recent[i-1].Seq) {
			return policyState{}, false
		}
	}
	return policyState{loads: w.Loads, recent: w.Recent, decisions: w.Decisions}, true
}
