// Package gateway is the Streamable HTTP MCP endpoint of leaseledger: any
// MCP client connects to it and uses the servers of mcp.json through the
// runtime's leases. It owns the mapping of an MCP session to a runtime
// session, the names under which tools and resources are exposed, access
// (bearer tokens, Origin validation, session caps) and the session
// lifecycle.
//
// Each MCP session is a runtime session: initialize opens the runtime
// scope under the MCP session id (SessionIDPrefix and a ULID, so it
// follows events.IDRule), recording the token name as its principal; the
// session's end — the client's DELETE, SessionIdleTimeout without a POST,
// EndSession, Close, or its token's removal — cancels its requests in
// flight, settles its resource handles and releases the scope, which ends
// its leases (last-owner end). Only protocol versions with sessions are
// offered (up to 2025-11-25): the sessionless 2026-07-28 protocol would
// have no session to map.
//
// Naming: each server's tools and prompts are listed under its prefix
// (Options.Prefixes, mcp.json's "prefix"; DefaultPrefix <server>__ when
// unset) and its resources and templates as leaseledger://<server>/<uri>
// (URIScheme), the original appended verbatim so templates still expand;
// the prefix "" exposes a server's own names and URIs. A session routes a
// name to the server that listed it (catalog.go); a name two servers
// expose is left out of listings and refused (CodeNameCollision).
// Listing tools acquires the session's lease of every server; a server
// that fails to start is left out of the listing, not fatal. A call goes
// through LeaseCapability.Call with the digest of the listing the session
// was shown, so the runtime's gate and digest check decide it; reads,
// prompts, completions and subscriptions go through request handles owned
// by the session's runtime.Owner. Results pass through as the server
// produced them (isError included); gateway errors are JSON-RPC errors
// with a Code… constant and static text, never server text. The client's
// notifications/cancelled cancels the go-sdk handler's context, which
// cancels the call or the handle; progress notifications are relayed to
// the client's progress token.
//
// Each session is its runtime session's runtime.ClientPeer (peer.go): its
// servers' sampling, elicitation and roots requests are relayed to its
// client, and their log messages, resource updates and list changes
// delivered to it, on the stream of the related client request when
// there is one. logging/setLevel is applied to the session's servers.
//
// One mcp.Server serves every session, with a receiving middleware for
// the methods served from the runtime, rather than one mcp.Server per
// session: the go-sdk's handler consults its getServer callback on every
// HTTP request (not only when a session is created), so per-session
// servers would need their own session lookup in front of it; and tools
// registered with AddTool would be the gateway's, not the lease's pinned
// listing. The middleware answers from the runtime per session, and the
// capabilities (tools, resources with subscriptions, prompts — each with
// list changes — completions, logging) are advertised through
// ServerOptions.Capabilities.
//
// Access, in front of the go-sdk handler: a foreign Origin is refused
// (403; loopback origins are accepted on a loopback listener, others only
// when listed in AllowedOrigins); with Tokens, a request without a valid
// token gets 401 and nothing starts, and a session may only be used with
// the token that opened it (403); without Tokens, only loopback clients
// are served. A request opening a session takes a slot under
// MaxSessionsPerToken (429) and MaxSessions (503) before the go-sdk sees
// it. The go-sdk's own DNS-rebinding protection (Host header on a
// loopback listener) stays on. See docs/gateway.md.
package gateway
