package runtime

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ClientPeer is the client side of a session as the session's servers may
// reach it: the capabilities its MCP client declared, the server→client
// requests relayed to it (sampling, elicitation, roots) and the
// notifications delivered to it (log messages, resource updates, list
// changes). A host that fronts MCP clients (the gateway) implements one per
// session and passes it in SessionOptions.Client; without one, a session's
// servers see a client with no capabilities and their notifications reach
// no one.
//
// The runtime calls the request methods with a context that carries the
// related client request where there is one (PeerRequest.Related), ended
// when the server's own request is cancelled, and records each relay
// (relay.completed). It calls the notification methods from the lease's
// receive loop: they must not block for long. When Related is nil the
// context's values are not the peer's to read: they may be those of the
// request that started the lease, long over (the go-sdk connection keeps
// them), so a host routes an unrelated message by its own session, as
// the gateway does.
type ClientPeer interface {
	// Capabilities returns what the session's client declared; a lease
	// acquired for the session declares only these (sampling, elicitation,
	// roots) to its server. nil: none.
	Capabilities() *mcp.ClientCapabilities
	// CreateMessage relays a server's sampling/createMessage to the client.
	CreateMessage(ctx context.Context, r PeerRequest, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error)
	// Elicit relays a server's elicitation/create to the client.
	Elicit(ctx context.Context, r PeerRequest, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// ListRoots relays a server's roots/list to the client.
	ListRoots(ctx context.Context, r PeerRequest, p *mcp.ListRootsParams) (*mcp.ListRootsResult, error)
	// Notify delivers a server's notification to the session.
	Notify(ctx context.Context, n PeerNotification)
}

// PeerRequest names where a relayed server request comes from.
type PeerRequest struct {
	// Server is the config name of the server that sent it; Activation its
	// lease's activation.
	Server, Activation string
	// Related is the context of the session's client request the server
	// request belongs to (the ctx the host passed to Call or to a request
	// handle's start), nil when it is tied to none: a host answering on
	// the related request's stream uses its values (the gateway's go-sdk
	// handler context routes the relay onto that request's SSE stream).
	Related context.Context
}

// NotificationKind says which server notification a PeerNotification is.
type NotificationKind string

// NotificationKind values.
const (
	// NotifyLog is notifications/message (Log is set).
	NotifyLog NotificationKind = "notifications/message"
	// NotifyResourceUpdated is notifications/resources/updated
	// (ResourceUpdated is set), delivered only to sessions subscribed to
	// its URI on that server.
	NotifyResourceUpdated NotificationKind = "notifications/resources/updated"
	// NotifyToolsChanged is notifications/tools/list_changed, delivered
	// once the lease has pinned its new listing (LeaseCapability.Tools
	// returns it).
	NotifyToolsChanged NotificationKind = "notifications/tools/list_changed"
	// NotifyPromptsChanged is notifications/prompts/list_changed.
	NotifyPromptsChanged NotificationKind = "notifications/prompts/list_changed"
	// NotifyResourcesChanged is notifications/resources/list_changed.
	NotifyResourcesChanged NotificationKind = "notifications/resources/list_changed"
)

// PeerNotification is one server notification delivered to a session.
type PeerNotification struct {
	Kind               NotificationKind
	Server, Activation string
	// Related is the context of the session's client request the
	// notification belongs to, as in PeerRequest; nil when none.
	Related         context.Context
	Log             *mcp.LoggingMessageParams
	ResourceUpdated *mcp.ResourceUpdatedNotificationParams
}
