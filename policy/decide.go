package policy

import (
	"errors"
	"net/netip"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"

	"github.com/leaseledger/leaseledger/events"
)

// ErrRequest: a Request the schema has no question for (see
// Request.Validate). Decide denies such a request.
var ErrRequest = errors.New("policy: request invalid")

// ToolHints are a tool's MCP annotations as call_tool's context carries
// them (read_only, destructive, idempotent, open_world). The caller fills
// them from the tool's annotations as the server listed them, and takes
// DefaultHints' value for each hint the server left out: MCP's hints are
// optional and their absence has a meaning.
type ToolHints struct {
	ReadOnly    bool `json:"read_only"`
	Destructive bool `json:"destructive"`
	Idempotent  bool `json:"idempotent"`
	OpenWorld   bool `json:"open_world"`
}

// DefaultHints returns MCP's defaults of absent hints: not read-only,
// destructive, not idempotent, open world — a tool that says nothing is
// assumed to be the most dangerous kind.
func DefaultHints() ToolHints { return ToolHints{Destructive: true, OpenWorld: true} }

// Request is one access question: may Principal do Action on the
// resource (Server, and Target on it) in this session.
type Request struct {
	// Principal is the name of the session's bearer token, "" for a
	// gateway without tokens (Principal::"" in policies).
	Principal string
	// Action is one of events.AccessActions().
	Action events.AccessAction
	// Server is the server's name; it never contains '/'.
	Server string
	// Target is the tool name (call_tool), prompt name (get_prompt,
	// complete with RefPrompt) or resource URI (read_resource,
	// subscribe_resource, complete with RefResource: the template); ""
	// for the actions on the server itself, which ignore it.
	Target string
	// Ref says what complete refers to: a prompt (events.RefPrompt; the
	// resource is a Prompt) or a resource template (events.RefResource; a
	// Resource whose uri is the template). Ignored by other actions.
	Ref events.CompletionRef
	// Session is the session id (context.session).
	Session string
	// ClientAddr is the client's address (context.client_address); the
	// zero Addr leaves the attribute out (unknown). IPv4-mapped IPv6
	// addresses are unmapped and zones dropped: Cedar's ipaddr has
	// neither.
	ClientAddr netip.Addr
	// Time is when the action is asked (context.time), used as given.
	Time time.Time
	// Hints are the tool's annotations (call_tool only; ignored by other
	// actions).
	Hints ToolHints
}

// Decision is the answer to a Request.
type Decision struct {
	// Allowed is true when a permit applied and no forbid did.
	Allowed bool
	// Policies are the ids of the deciding policies in file order: the
	// permits that applied when allowed, the forbids that applied when
	// denied, none when denied because no permit applied. All of them:
	// the recorder keeps the first events.MaxDecidingPolicies. A decision
	// SessionAccess returns may share this slice with others: read it,
	// never modify it.
	Policies []string
	// Errors counts the policies whose evaluation failed (such a policy
	// is skipped, as Cedar specifies; validation makes it rare — an
	// overflow, say).
	Errors int
}

// resourceType returns the Cedar type of the action's resource, "" when
// the action or ref is not one the schema knows.
func (r *Request) resourceType() types.EntityType {
	switch r.Action {
	case events.AccessStartServer, events.AccessAnswerSampling, events.AccessAnswerElicitation, events.AccessAnswerRoots:
		return typeServer
	case events.AccessCallTool:
		return typeTool
	case events.AccessReadResource, events.AccessSubscribeResource:
		return typeResource
	case events.AccessGetPrompt:
		return typePrompt
	case events.AccessComplete:
		switch r.Ref {
		case events.RefPrompt:
			return typePrompt
		case events.RefResource:
			return typeResource
		}
	}
	return ""
}

// Validate reports whether the schema has a question for r (ErrRequest
// otherwise): a known action, a server name without '/', a target for
// every action on something in a server, a Ref for complete.
func (r Request) Validate() error {
	rt := r.resourceType()
	switch {
	case rt == "":
		return &Error{Err: ErrRequest, cause: errors.New("unknown action, or complete without a ref")}
	case r.Server == "" || strings.Contains(r.Server, "/"):
		return &Error{Err: ErrRequest, cause: errors.New("server name empty or containing '/'")}
	case rt != typeServer && r.Target == "":
		return &Error{Err: ErrRequest, cause: errors.New("no target for an action on a tool, prompt or resource")}
	}
	return nil
}

// normalized clears what the action ignores, so that equal questions are
// equal values (and one cache key).
func (r Request) normalized() Request {
	if r.Action != events.AccessCallTool {
		r.Hints = ToolHints{}
	}
	if r.Action != events.AccessComplete {
		r.Ref = ""
	}
	if r.resourceType() == typeServer {
		r.Target = ""
	}
	return r
}

// Decide answers r under the set: Cedar's authorization of the request
// built from r against the set's policies and entities. It is uncached
// (SessionAccess caches). A nil set allows everything (no Policies). A
// request that fails Validate is denied with no deciding policy.
func (s *Set) Decide(r Request) Decision {
	if s == nil {
		return Decision{Allowed: true}
	}
	r = r.normalized()
	if r.Validate() != nil {
		return Decision{}
	}
	req, ents := s.cedarRequest(&r)
	d, diag := cedar.Authorize(s.policies, ents, req)
	out := Decision{Allowed: d == cedar.Allow, Errors: len(diag.Errors)}
	if len(diag.Reasons) > 0 {
		out.Policies = make([]string, len(diag.Reasons))
		for i, x := range diag.Reasons {
			out.Policies[i] = string(x.PolicyID)
		}
	}
	return out
}

// cedarRequest builds the Cedar request and the entities it is decided
// with: the file's, and the principal, server and target built from r.
func (s *Set) cedarRequest(r *Request) (cedar.Request, *requestEntities) {
	ents := &requestEntities{file: s.entities}
	ents.principal = types.Entity{UID: types.NewEntityUID(typePrincipal, types.String(r.Principal))}
	server := types.NewEntityUID(typeServer, types.String(r.Server))
	ents.server = types.Entity{UID: server}
	resource := server
	if rt := r.resourceType(); rt != typeServer {
		// Server names never contain '/' (Validate), so the first '/'
		// of the id ends the server name: ids are unambiguous.
		resource = types.NewEntityUID(rt, types.String(r.Server+"/"+r.Target))
		key := types.String("name")
		if rt == typeResource {
			key = "uri"
		}
		ents.target = types.Entity{UID: resource, Parents: types.NewEntityUIDSet(server),
			Attributes: types.NewRecord(types.RecordMap{key: types.String(r.Target), "server": types.String(r.Server)})}
		ents.hasTarget = true
	}
	ctx := types.RecordMap{"session": types.String(r.Session), "time": types.NewDatetime(r.Time)}
	if r.ClientAddr.IsValid() {
		a := r.ClientAddr.Unmap().WithZone("")
		ctx["client_address"] = types.IPAddr(netip.PrefixFrom(a, a.BitLen()))
	}
	if r.Action == events.AccessCallTool {
		ctx["read_only"] = types.Boolean(r.Hints.ReadOnly)
		ctx["destructive"] = types.Boolean(r.Hints.Destructive)
		ctx["idempotent"] = types.Boolean(r.Hints.Idempotent)
		ctx["open_world"] = types.Boolean(r.Hints.OpenWorld)
	}
	return cedar.Request{
		Principal: ents.principal.UID,
		Action:    types.NewEntityUID(typeAction, types.String(r.Action)),
		Resource:  resource,
		Context:   types.NewRecord(ctx),
	}, ents
}

// requestEntities is the entity store of one decision: the entities file
// (principals and groups) and the entities built from the request. It
// copies nothing of the file's map.
type requestEntities struct {
	file      types.EntityMap
	principal types.Entity // used when the file does not list the principal
	server    types.Entity
	target    types.Entity
	hasTarget bool
}

// Get implements types.EntityGetter.
func (e *requestEntities) Get(uid types.EntityUID) (types.Entity, bool) {
	if x, ok := e.file[uid]; ok {
		return x, true
	}
	switch {
	case e.hasTarget && uid == e.target.UID:
		return e.target, true
	case uid == e.server.UID:
		return e.server, true
	case uid == e.principal.UID:
		return e.principal, true
	}
	return types.Entity{}, false
}
