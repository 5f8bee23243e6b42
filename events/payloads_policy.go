package events

import "strconv"

// ---- policy: who may do what, and what decided it ----

// Kinds of access policy.
const (
	// KindPolicyLoaded is the kind of [PolicyLoaded].
	KindPolicyLoaded Kind = "policy.loaded"
	// KindAccessDecided is the kind of [AccessDecided].
	KindAccessDecided Kind = "access.decided"
)

// Policy bounds.
const (
	// MaxDecidingPolicies bounds the policy ids one decision records; a
	// decision with more records the first ones (in policy-set order) and
	// how many it left out (PoliciesOmitted).
	MaxDecidingPolicies = 16
	// MaxPolicies bounds the policies of one policy set.
	MaxPolicies = 1 << 16
)

// PolicyLoaded records the access policy put in force: at a host's start
// and at every reload that loaded. With a policy set (mode enforced) its
// digest is the SHA-256 of the policy files' text as the policy package
// defines it, so an auditor holding the files can tie every decision
// (call.admitted, call.refused, access.decided, each naming the digest it
// was decided under) to the exact text in force. Without one (mode
// allow_all) every valid principal may do everything, and that default is
// recorded too. A reload that failed to load records nothing: the previous
// policy stays in force.
type PolicyLoaded struct {
	Trigger ConfigTrigger `json:"trigger"` // start, reload
	Mode    PolicyMode    `json:"mode"`
	// Digest of the policy set, 64 lowercase hex; enforced only.
	Digest string `json:"digest,omitempty"`
	// Policies is the number of policies in the set (0 for allow_all).
	Policies int `json:"policies"`
}

// Kind implements [Payload].
func (*PolicyLoaded) Kind() Kind { return KindPolicyLoaded }

// Validate implements [Payload].
func (p *PolicyLoaded) Validate() error {
	c := checks{member("trigger", p.Trigger), member("mode", p.Mode),
		between("policies", int64(p.Policies), 0, MaxPolicies)}
	switch p.Mode {
	case PolicyEnforced:
		c = append(c, digest("digest", p.Digest))
	case PolicyAllowAll:
		if p.Digest != "" {
			c = append(c, invalid("digest", "must be absent for mode allow_all"))
		}
		if p.Policies != 0 {
			c = append(c, invalid("policies", "must be 0 for mode allow_all"))
		}
	}
	return c.first()
}

// AccessDecided records one decision of the access policy other than a
// tool call's (a call's decision is in its call.admitted or call.refused):
// starting a server for a session, reading or subscribing a resource,
// getting a prompt, completing, and answering a server's sampling,
// elicitation or roots request on the session's client. The envelope names
// the session and the server (and the activation when a lease is
// involved). Names and URIs are recorded only as their SHA-256, never in
// clear. A denied action was not performed: nothing was sent.
type AccessDecided struct {
	Action AccessAction `json:"action"`
	// TargetSHA256 is the SHA-256 of the prompt name or resource URI the
	// action names; omitted for actions on the server itself.
	TargetSHA256 string `json:"target_sha256,omitempty"`
	Allowed      bool   `json:"allowed"`
	// Policies are the ids of the deciding policies: the permits that
	// allowed it, or the forbids that denied it (none: no permit applied).
	Policies []string `json:"policies,omitempty"`
	// PoliciesOmitted counts deciding policies beyond MaxDecidingPolicies.
	PoliciesOmitted int `json:"policies_omitted,omitempty"`
	// PolicyDigest is the digest of the policy set that decided
	// (policy.loaded).
	PolicyDigest string `json:"policy_digest"`
}

// Kind implements [Payload].
func (*AccessDecided) Kind() Kind { return KindAccessDecided }

// Validate implements [Payload].
func (p *AccessDecided) Validate() error {
	return checks{member("action", p.Action), optDigest("target_sha256", p.TargetSHA256),
		policyIDs("policies", p.Policies), between("policies_omitted", int64(p.PoliciesOmitted), 0, MaxPolicies),
		digest("policy_digest", p.PolicyDigest)}.first()
}

// policyIDs validates the deciding policies of a decision: each an id
// (IDRule), at most MaxDecidingPolicies.
func policyIDs(field string, ids []string) error {
	if len(ids) > MaxDecidingPolicies {
		return invalid(field, "more than MaxDecidingPolicies="+strconv.Itoa(MaxDecidingPolicies))
	}
	for _, v := range ids {
		if err := id(field, v); err != nil {
			return err
		}
	}
	return nil
}

// PolicyMode is how access is decided.
type PolicyMode string

// PolicyMode values.
const (
	// PolicyEnforced: a policy set decides every action.
	PolicyEnforced PolicyMode = "enforced"
	// PolicyAllowAll: no policy set; every valid principal may do
	// everything.
	PolicyAllowAll PolicyMode = "allow_all"
)

// Valid reports whether v is one of the PolicyMode values.
func (v PolicyMode) Valid() bool { return v == PolicyEnforced || v == PolicyAllowAll }

// values lists the PolicyMode values in catalogue order.
func (PolicyMode) values() []PolicyMode { return []PolicyMode{PolicyEnforced, PolicyAllowAll} }

// AccessAction is what a principal asks to do, as the access policy names
// it.
type AccessAction string

// AccessAction values.
const (
	// AccessStartServer: use a server (acquire a lease of it for the session).
	AccessStartServer AccessAction = "start_server"
	// AccessCallTool: call a tool (recorded in call.admitted/call.refused).
	AccessCallTool AccessAction = "call_tool"
	// AccessReadResource: read a resource.
	AccessReadResource AccessAction = "read_resource"
	// AccessSubscribeResource: subscribe to a resource's updates.
	AccessSubscribeResource AccessAction = "subscribe_resource"
	// AccessGetPrompt: get a prompt.
	AccessGetPrompt AccessAction = "get_prompt"
	// AccessComplete: ask for completions of a prompt's or a resource
	// template's argument.
	AccessComplete AccessAction = "complete"
	// AccessAnswerSampling: relay a server's sampling request to the
	// session's client.
	AccessAnswerSampling AccessAction = "answer_sampling"
	// AccessAnswerElicitation: relay a server's elicitation request to the
	// session's client.
	AccessAnswerElicitation AccessAction = "answer_elicitation"
	// AccessAnswerRoots: relay a server's roots request to the session's
	// client.
	AccessAnswerRoots AccessAction = "answer_roots"
)

// Valid reports whether v is one of the AccessAction values.
func (v AccessAction) Valid() bool {
	switch v {
	case AccessStartServer, AccessCallTool, AccessReadResource, AccessSubscribeResource, AccessGetPrompt,
		AccessComplete, AccessAnswerSampling, AccessAnswerElicitation, AccessAnswerRoots:
		return true
	}
	return false
}

// values lists the AccessAction values in catalogue order.
func (AccessAction) values() []AccessAction {
	return []AccessAction{AccessStartServer, AccessCallTool, AccessReadResource, AccessSubscribeResource,
		AccessGetPrompt, AccessComplete, AccessAnswerSampling, AccessAnswerElicitation, AccessAnswerRoots}
}

// AccessActions lists every AccessAction, in catalogue order.
func AccessActions() []AccessAction { return AccessAction("").values() }
