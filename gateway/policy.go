package gateway

import (
	"net/http"
	"net/netip"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/policy"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Access policy (Options.Policy): each session decides through its
// principal's policy.SessionAccess. The runtime enforces it at the gates
// (runtime.Access: calls, reads, prompts, completions, subscriptions,
// relays, starting a server) and records every decision; the gateway
// filters what it lists by the same decisions, without recording them
// (a listing is not an action): a session is shown only the servers,
// tools, prompts, resources and templates it may use. A name it was not
// shown but asks for anyway still routes to its server, so that the
// refusal is the runtime's, recorded with the deciding policies.

// headerClientAddress carries the client's address from the HTTP request
// that opens a session to its initialize handler (the go-sdk passes
// request headers through, not the connection). serveSession sets it from
// the connection and drops any value the client sent.
const headerClientAddress = "Leaseledger-Client-Address"

// setClientAddress replaces r's client address header with the address of
// its connection.
func setClientAddress(r *http.Request) {
	r.Header.Del(headerClientAddress)
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		r.Header.Set(headerClientAddress, ap.Addr().String())
	}
}

// clientAddress reads the header setClientAddress set (zero: unknown).
func clientAddress(h http.Header) netip.Addr {
	a, _ := netip.ParseAddr(h.Get(headerClientAddress))
	return a
}

// sessionPolicy is a session's decisions: runtime.Access for the gates,
// and the filter of the gateway's listings. The zero value (no
// Options.Policy) allows everything.
type sessionPolicy struct {
	sa *policy.SessionAccess
}

// Decide implements runtime.Access.
func (p sessionPolicy) Decide(r runtime.AccessRequest) runtime.AccessDecision {
	d, digest := p.sa.Decide(r.Action, r.Server, r.Target, r.Ref, hintsOf(r.Tool))
	return runtime.AccessDecision{Allowed: d.Allowed, Policies: d.Policies, Digest: digest}
}

// allows reports whether the session may do action on server's target;
// everything without a policy. Not recorded: it filters listings.
func (p sessionPolicy) allows(action events.AccessAction, server, target string, tool *mcp.Tool) bool {
	if p.sa == nil {
		return true
	}
	d, digest := p.sa.Decide(action, server, target, "", hintsOf(tool))
	return digest == "" || d.Allowed
}

// hintsOf returns a tool's annotations as the policy's context carries
// them, MCP's defaults for the hints the server left out.
func hintsOf(t *mcp.Tool) policy.ToolHints {
	h := policy.DefaultHints()
	if t == nil || t.Annotations == nil {
		return h
	}
	a := t.Annotations
	h.ReadOnly = a.ReadOnlyHint
	h.Idempotent = a.IdempotentHint
	if a.DestructiveHint != nil {
		h.Destructive = *a.DestructiveHint
	}
	if a.OpenWorldHint != nil {
		h.OpenWorld = *a.OpenWorldHint
	}
	return h
}

// PolicyChanged tells every session that what it may use may have
// changed (the host swapped Options.Policy's set): each client is sent
// the tools, prompts and resources list_changed notifications, so that it
// lists again and is shown what the new set allows. Decisions change at
// the swap itself; this only updates what clients were shown.
func (g *Gateway) PolicyChanged() {
	g.mu.Lock()
	sessions := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		sessions = append(sessions, s)
	}
	g.mu.Unlock()
	for _, s := range sessions {
		if s.ctx.Err() != nil {
			continue
		}
		for _, note := range []*rawNote{
			{method: string(runtime.NotifyToolsChanged), params: &mcp.ToolListChangedParams{}},
			{method: string(runtime.NotifyPromptsChanged), params: &mcp.PromptListChangedParams{}},
			{method: string(runtime.NotifyResourcesChanged), params: &mcp.ResourceListChangedParams{}},
		} {
			s.sendNote(s.ctx, note)
		}
	}
}
