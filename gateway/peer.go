package gateway

import (
	"context"

	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A session is the runtime.ClientPeer of its runtime session: its servers'
// sampling, elicitation and roots requests are relayed to its MCP client,
// and their notifications delivered to it, on the stream of the related
// client request when the runtime names one (the go-sdk routes a message
// sent under a request handler's context onto that request's stream), on
// the session's standalone stream otherwise.

// Capabilities returns the sampling, elicitation and roots capabilities
// the session's client declared at initialize, and nothing else: a server
// never sees more than the client behind the gateway offers.
func (s *session) Capabilities() *mcp.ClientCapabilities {
	out := &mcp.ClientCapabilities{}
	if s.clientCaps == nil {
		return out
	}
	out.Sampling = s.clientCaps.Sampling
	out.Elicitation = s.clientCaps.Elicitation
	// RootsV2 is the go-sdk's record of a declared "roots" (the
	// deprecated Roots cannot tell an empty {} from none).
	out.Roots, out.RootsV2 = s.clientCaps.Roots, s.clientCaps.RootsV2
	return out
}

// relayContext is the context a relay or notification is sent under,
// ended with ctx (the runtime's: the server's request): the related
// request's context when there is one, so that the go-sdk writes it on
// that request's stream; otherwise the session's own, which carries no
// request, so that it goes out on the session's standalone stream — never
// ctx itself, whose values are the runtime's and may name a request of
// this session that is long over.
func (s *session) relayContext(ctx context.Context, related context.Context) (context.Context, func()) {
	base := related
	if base == nil {
		base = s.ctx
	}
	rctx, cancel := context.WithCancel(base)
	stop := context.AfterFunc(ctx, cancel)
	return rctx, func() { stop(); cancel() }
}

// CreateMessage relays a server's sampling/createMessage to the client.
func (s *session) CreateMessage(ctx context.Context, r runtime.PeerRequest, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
	ctx, done := s.relayContext(ctx, r.Related)
	defer done()
	return s.ss.CreateMessageWithTools(ctx, p)
}

// Elicit relays a server's elicitation/create to the client.
func (s *session) Elicit(ctx context.Context, r runtime.PeerRequest, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	ctx, done := s.relayContext(ctx, r.Related)
	defer done()
	return s.ss.Elicit(ctx, p)
}

// ListRoots relays a server's roots/list to the client.
func (s *session) ListRoots(ctx context.Context, r runtime.PeerRequest, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	ctx, done := s.relayContext(ctx, r.Related)
	defer done()
	return s.ss.ListRoots(ctx, p)
}

// Notify delivers a server's notification to the client: a log message
// with the server named in its logger, a resource update under the URI
// the client knows, a list change as it is. A notification that cannot be
// delivered (the session is ending) is dropped.
func (s *session) Notify(ctx context.Context, n runtime.PeerNotification) {
	if s.ctx.Err() != nil {
		return
	}
	ctx, done := s.relayContext(ctx, n.Related)
	defer done()
	list := s.g.list.Load()
	if !list.set[n.Server] {
		return
	}
	var note *rawNote
	switch n.Kind {
	case runtime.NotifyLog:
		if n.Log == nil {
			return
		}
		p := *n.Log
		p.Logger = loggerName(n.Server, n.Log.Logger)
		note = &rawNote{method: string(n.Kind), params: &p}
	case runtime.NotifyResourceUpdated:
		if n.ResourceUpdated == nil {
			return
		}
		p := *n.ResourceUpdated
		p.URI = list.exposedURI(n.Server, n.ResourceUpdated.URI)
		note = &rawNote{method: string(n.Kind), params: &p}
	case runtime.NotifyToolsChanged:
		note = &rawNote{method: string(n.Kind), params: &mcp.ToolListChangedParams{}}
	case runtime.NotifyPromptsChanged:
		note = &rawNote{method: string(n.Kind), params: &mcp.PromptListChangedParams{}}
	case runtime.NotifyResourcesChanged:
		note = &rawNote{method: string(n.Kind), params: &mcp.ResourceListChangedParams{}}
	default:
		return
	}
	s.sendNote(ctx, note)
}

// loggerName names the server in a relayed log message's logger:
// <server>, or <server>/<logger> when the server named one.
func loggerName(server, logger string) string {
	if logger == "" {
		return server
	}
	return server + "/" + logger
}

// rawNote is a notification the go-sdk's ServerSession has no method of
// its own for (to one session: resources/updated, list changes; a log
// message already filtered by the server). It is sent through the
// session's sending path (sendNote), so that the go-sdk writes it like
// its own: on the related request's stream when ctx carries one.
type rawNote struct {
	method string
	params mcp.Params
}

// rawNoteKey marks the context of a rawNote on its way through
// sendingMiddleware.
type rawNoteKey struct{}

// sendNote sends note to the session: ServerSession.NotifyProgress enters
// the session's sending path, where sendingMiddleware swaps in the note.
func (s *session) sendNote(ctx context.Context, note *rawNote) {
	_ = s.ss.NotifyProgress(context.WithValue(ctx, rawNoteKey{}, note), &mcp.ProgressNotificationParams{})
}

// sendingMiddleware replaces a marked progress notification with the
// rawNote it carries (see sendNote); everything else passes.
func sendingMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		note, ok := ctx.Value(rawNoteKey{}).(*rawNote)
		if !ok || method != "notifications/progress" {
			return next(ctx, method, req)
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if ss == nil {
			return nil, nil
		}
		return next(ctx, note.method, &mcp.ServerRequest[mcp.Params]{Session: ss, Params: note.params})
	}
}
