package runtime

import (
	"context"
	"sync"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Access decides what a session's principal may do: the access policy of
// one session (SessionOptions.Access). The runtime asks it at each gate —
// before a lease is acquired for the session (start_server), at the call
// gate (call_tool, with the pinned listing's tool), before a request
// handle is registered (read_resource, subscribe_resource, get_prompt,
// complete) and before a server's request is relayed to the session's
// client (answer_sampling, answer_elicitation, answer_roots) — and records
// each decision (call.admitted / call.refused for calls, access.decided
// for the rest). A denied action is not performed: nothing is sent.
//
// Decide runs on every call's path, under the lease's gate lock, so it
// must be cheap (a cached decision) and safe for concurrent use; it must
// not block. gateway builds one per MCP session from package policy.
type Access interface {
	Decide(AccessRequest) AccessDecision
}

// AccessRequest is one question to an Access.
type AccessRequest struct {
	Action events.AccessAction
	// Server is the config name of the server acted on.
	Server string
	// Target is the tool name (call_tool), prompt name (get_prompt, a
	// prompt's completion) or resource URI (read_resource,
	// subscribe_resource, a resource template's completion); "" for
	// actions on the server itself.
	Target string
	// Ref is the completion reference's type (complete only).
	Ref events.CompletionRef
	// Tool is the pinned listing's tool (call_tool only): its annotations
	// are part of the question. Provider content: never recorded.
	Tool *mcp.Tool
}

// AccessDecision is an Access's answer.
type AccessDecision struct {
	Allowed bool
	// Policies are the ids of the deciding policies (permits when
	// allowed, forbids when denied; none when denied for lack of a
	// permit), each an events.IDRule identifier (otherwise the record
	// fails, and so does an allowed action). Recorded: at most
	// events.MaxDecidingPolicies of them, the rest counted.
	Policies []string
	// Digest is the digest of the policy set that decided
	// (policy.loaded); "" when no policy set is in force, in which case a
	// decision must allow and nothing about it is recorded.
	Digest string
}

// recorded splits d's policies into those recorded and the count left out.
func (d AccessDecision) recorded() ([]string, int) {
	if len(d.Policies) > events.MaxDecidingPolicies {
		return d.Policies[:events.MaxDecidingPolicies], len(d.Policies) - events.MaxDecidingPolicies
	}
	return d.Policies, 0
}

// sessionAccess is a session's Access and what of its decisions was
// recorded already.
type sessionAccess struct {
	a Access
	// mu guards started: the servers whose start_server allowance was
	// recorded, with the digest it was decided under. An allowed start is
	// recorded once per server and policy set, not on every call that
	// reuses the lease (each call records its own decision); a denial is
	// recorded every time.
	mu      sync.Mutex
	started map[string]string
}

// decide asks st's Access; enforced false when there is no decision to
// record: no Access, no policy set in force, or no session (nil st).
func (st *sessionState) decide(req AccessRequest) (d AccessDecision, enforced bool) {
	if st == nil || st.access == nil {
		return AccessDecision{Allowed: true}, false
	}
	d = st.access.a.Decide(req)
	if d.Digest == "" {
		// No policy set in force: allowed whatever the answer said, and
		// not recorded (policy.loaded{allow_all} records the default).
		return AccessDecision{Allowed: true}, false
	}
	return d, true
}

// allowStart decides whether st may use server (start_server): before any
// lease of it is acquired or reused for st. A denial is recorded
// (access.decided) and returned as ErrAccessDenied; nothing is started.
func (m *Manager) allowStart(ctx context.Context, st *sessionState, server string) error {
	d, enforced := st.decide(AccessRequest{Action: events.AccessStartServer, Server: server})
	if !enforced {
		return nil
	}
	if d.Allowed {
		a := st.access
		a.mu.Lock()
		seen := a.started[server] == d.Digest
		if !seen {
			if a.started == nil {
				a.started = map[string]string{}
			}
			a.started[server] = d.Digest
		}
		a.mu.Unlock()
		if seen {
			return nil
		}
	}
	return m.recordAccess(ctx, st, AccessRequest{Action: events.AccessStartServer, Server: server}, d, "")
}

// allowAction decides a non-call action of st on server (read, subscribe,
// prompt, completion): recorded either way, before anything is sent. A
// denial is returned as ErrAccessDenied.
func (m *Manager) allowAction(ctx context.Context, st *sessionState, req AccessRequest) error {
	d, enforced := st.decide(req)
	if !enforced {
		return nil
	}
	return m.recordAccess(ctx, st, req, d, "")
}

// recordAccess appends d as access.decided (durably: a denial is proven
// before it is returned, an allowance before the action runs; activation
// names the lease involved, "" when none is yet) and returns
// ErrAccessDenied for a denial. A failed append fails the action: it is
// not performed unrecorded.
func (m *Manager) recordAccess(ctx context.Context, st *sessionState, req AccessRequest, d AccessDecision, activation string) error {
	ids, omitted := d.recorded()
	p := &events.AccessDecided{Action: req.Action, Allowed: d.Allowed, Policies: ids, PoliciesOmitted: omitted,
		PolicyDigest: d.Digest}
	if req.Target != "" {
		p.TargetSHA256 = sha256Hex(req.Target)
	}
	id, _ := ServerID(req.Server)
	err := m.emitFact(ctx, events.Draft{Activation: activation, Session: st.id, Server: id, Payload: p})
	if !d.Allowed {
		// Denied whether or not the record succeeded; a failed record is
		// the error's cause.
		return newErr("access", &leaseKey{st.id, id}, ErrAccessDenied, err)
	}
	return err
}

// requestAction is the access action of a request handle's method, and
// its target; ok false for methods the policy does not decide (listings,
// which the gateway filters; unsubscribe, which only ends what was
// allowed).
func (s *requestSpec) requestAction(server string) (AccessRequest, bool) {
	r := AccessRequest{Server: server, Target: s.arg}
	switch s.method {
	case events.MethodReadResource:
		r.Action = events.AccessReadResource
	case events.MethodSubscribe:
		r.Action = events.AccessSubscribeResource
	case events.MethodGetPrompt:
		r.Action = events.AccessGetPrompt
	case events.MethodComplete:
		r.Action = events.AccessComplete
		r.Ref = events.CompletionRef(s.complete.Ref.Type)
		r.Target = s.complete.Ref.Name
		if r.Ref == events.RefResource {
			r.Target = s.complete.Ref.URI
		}
	default:
		return AccessRequest{}, false
	}
	return r, true
}
