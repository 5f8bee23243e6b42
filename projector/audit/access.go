package audit

import (
	"slices"

	"github.com/leaseledger/leaseledger/events"
)

// MaxDenials bounds the denials an activation's audit lists (the first
// ones); the rest are counted in access_denied_omitted. The report's
// access section counts every decision. The bound keeps the listed
// denials well within a reply of the projection API even when each names
// the most policies a decision records, of the longest ids.
const MaxDenials = 50

// Denial is one action of the activation the access policy denied, with
// the policies that decided: a tool call (call.refused reason policy,
// action call_tool) or another action (access.decided not allowed). A
// denied action was not performed.
type Denial struct {
	Seq     uint64              `json:"seq"`
	Action  events.AccessAction `json:"action"`
	Session string              `json:"session,omitempty"`
	// CallID and Tool name the refused call (action call_tool only).
	CallID string `json:"call_id,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// TargetSHA256 is the SHA-256 of the prompt name or resource URI
	// the action named, when it named one.
	TargetSHA256 string `json:"target_sha256,omitempty"`
	// Policies are the forbids that denied it; empty: no permit applied.
	// PoliciesOmitted counts those its record left out.
	Policies        []string `json:"policies"`
	PoliciesOmitted int      `json:"policies_omitted,omitempty"`
	// PolicyDigest is the digest of the policy set that decided
	// (policy.loaded).
	PolicyDigest string `json:"policy_digest"`
}

// denialFold lists an activation's denials in seq order.
type denialFold struct {
	list    []Denial
	omitted int
}

func (f *denialFold) add(seq uint64, session string, p events.Payload) {
	var d Denial
	switch p := p.(type) {
	case *events.CallRefused:
		if p.Reason != events.RefusedPolicy {
			return
		}
		d = Denial{Action: events.AccessCallTool, CallID: p.CallID, Tool: p.Tool,
			Policies: p.Policies, PoliciesOmitted: p.PoliciesOmitted, PolicyDigest: p.PolicyDigest}
	case *events.AccessDecided:
		if p.Allowed {
			return
		}
		d = Denial{Action: p.Action, TargetSHA256: p.TargetSHA256,
			Policies: p.Policies, PoliciesOmitted: p.PoliciesOmitted, PolicyDigest: p.PolicyDigest}
	default:
		return
	}
	if len(f.list) >= MaxDenials {
		f.omitted++
		return
	}
	d.Seq, d.Session = seq, session
	d.Policies = append([]string{}, d.Policies...) // never null; the fold keeps no payload's list
	f.list = append(f.list, d)
}

// result lists the denials (never nil) and the number left out.
func (f *denialFold) result() ([]Denial, int) {
	out := slices.Clone(f.list)
	if out == nil {
		out = []Denial{}
	}
	return out, f.omitted
}
