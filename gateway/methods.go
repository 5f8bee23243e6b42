package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/debug"
	"sync"

	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// JSON-RPC error codes of gateway errors. Every gateway error carries one
// of these (or, for a server's own error response, that response's code)
// and static text: never text from a server or the client.
const (
	// CodeInvalidParams: an unknown tool, or a cursor the gateway did not
	// issue.
	CodeInvalidParams = jsonrpc.CodeInvalidParams
	// CodeUnknownResource: a URI that is not leaseledger://<server>/<uri>
	// of an exposed server (MCP's resource-not-found code).
	CodeUnknownResource = -32002
	// CodeServerUnavailable: the server could not be started or listed
	// (spawn, initialize, listing, lease cap, config).
	CodeServerUnavailable = -32010
	// CodeRequestFailed: the request failed at the transport level or
	// the server's answer broke the result envelope.
	CodeRequestFailed = -32011
	// CodeListingChanged: the server's listing no longer matches the one
	// the session was shown; its lease was poisoned and nothing was sent.
	CodeListingChanged = -32012
	// CodeRefused: the server's lease was revoked, poisoned or denied for
	// this session.
	CodeRefused = -32013
	// CodeSessionEnded: the session ended (or the gateway closed).
	CodeSessionEnded = -32014
	// CodeCancelled: the request was cancelled before it completed.
	CodeCancelled = -32015
	// CodeRequestTimeout: the resource request's or the tool call's budget
	// expired (the server was told to cancel).
	CodeRequestTimeout = -32016
	// CodeInternal: the ledger could not record the request (nothing was
	// sent) or another local failure.
	CodeInternal = jsonrpc.CodeInternalError
)

// Static messages of the errors above.
const (
	msgUnknownTool     = "gateway: unknown tool"
	msgInvalidCursor   = "gateway: invalid cursor"
	msgUnknownResource = "gateway: unknown resource"
	msgUnavailable     = "gateway: server unavailable"
	msgFailed          = "gateway: request to the server failed"
	msgRemote          = "gateway: the server answered with an error"
	msgChanged         = "gateway: the server's tool listing changed; lease ended"
	msgRefused         = "gateway: server refused for this session"
	msgEnded           = "gateway: session ended"
	msgCancelled       = "gateway: request cancelled"
	msgTimeout         = "gateway: request budget expired"
	msgInternal        = "gateway: request could not be recorded"
)

func codeError(code int64, msg string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: code, Message: msg}
}

// rpcError maps a runtime error of a request to a gateway JSON-RPC error.
// CodeCancelled only when the request's own ctx ended (the client's
// cancellation, the session's end): a runtime error that wraps a context
// error of the runtime's own (an acquisition past its AcquireTimeout is
// ErrInitialize or ErrListing wrapping DeadlineExceeded) is reported by
// its sentinel.
func rpcError(ctx context.Context, err error) *jsonrpc.Error {
	var le *runtime.LeaseError
	switch {
	case ctx.Err() != nil:
		return codeError(CodeCancelled, msgCancelled)
	case errors.Is(err, runtime.ErrRemote) && errors.As(err, &le) && le.Code != 0:
		return codeError(le.Code, msgRemote)
	case errors.Is(err, runtime.ErrNameMismatch), errors.Is(err, runtime.ErrDigestMismatch):
		return codeError(CodeListingChanged, msgChanged)
	case errors.Is(err, runtime.ErrRevoked), errors.Is(err, runtime.ErrPoisoned), errors.Is(err, runtime.ErrDenied):
		return codeError(CodeRefused, msgRefused)
	case errors.Is(err, runtime.ErrSessionEnded), errors.Is(err, runtime.ErrClosed),
		errors.Is(err, runtime.ErrOwnerEnded), errors.Is(err, runtime.ErrSessionOpen):
		return codeError(CodeSessionEnded, msgEnded)
	case errors.Is(err, runtime.ErrRequestTimeout), errors.Is(err, runtime.ErrCallTimeout):
		return codeError(CodeRequestTimeout, msgTimeout)
	case errors.Is(err, runtime.ErrCallFailed), errors.Is(err, runtime.ErrRequestFailed),
		errors.Is(err, runtime.ErrEnvelope), errors.Is(err, runtime.ErrRemote):
		return codeError(CodeRequestFailed, msgFailed)
	case errors.Is(err, runtime.ErrLedger), errors.Is(err, runtime.ErrRegisterTimeout):
		return codeError(CodeInternal, msgInternal)
	case errors.Is(err, runtime.ErrHandleSettled), errors.Is(err, runtime.ErrAwaitTimeout):
		return codeError(CodeCancelled, msgCancelled)
	}
	// Config, spawn, initialize, listing, lease cap, terminated, one-shot,
	// and a context error of the runtime's own.
	return codeError(CodeServerUnavailable, msgUnavailable)
}

// middleware serves the per-session methods from the runtime; everything
// else (ping, notifications) is the go-sdk's.
func (g *Gateway) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		// The go-sdk runs handlers on goroutines of its own without a
		// recover: a bug in one request would end the whole process and
		// every session with it. It is logged and answered as internal.
		defer func() {
			if v := recover(); v != nil {
				g.opts.Logger.Error("gateway: request handler panicked", "method", method, "panic", v, "stack", string(debug.Stack()))
				res, err = nil, codeError(CodeInternal, msgInternal)
			}
		}()
		switch method {
		case "initialize":
			return g.initialize(ctx, next, method, req)
		case "tools/list", "tools/call", "resources/list", "resources/templates/list", "resources/read":
		default:
			return next(ctx, method, req)
		}
		s := g.sessionOf(req)
		if s == nil {
			return nil, codeError(CodeSessionEnded, msgEnded)
		}
		ctx, done := s.bind(ctx)
		defer done()
		// A request without "params" arrives as a typed nil pointer: the
		// list methods take it as no cursor (the official TypeScript client
		// sends resources/list so), the others are invalid.
		switch p := req.GetParams().(type) {
		case *mcp.ListToolsParams:
			res, err = s.listTools(ctx, p)
		case *mcp.CallToolParamsRaw:
			if p == nil {
				return nil, codeError(CodeInvalidParams, "gateway: invalid params")
			}
			res, err = s.callTool(ctx, p)
		case *mcp.ListResourcesParams:
			if p == nil {
				p = &mcp.ListResourcesParams{}
			}
			res, err = s.listResources(ctx, p)
		case *mcp.ListResourceTemplatesParams:
			if p == nil {
				p = &mcp.ListResourceTemplatesParams{}
			}
			res, err = s.listTemplates(ctx, p)
		case *mcp.ReadResourceParams:
			if p == nil {
				return nil, codeError(CodeInvalidParams, "gateway: invalid params")
			}
			res, err = s.readResource(ctx, p)
		default:
			return nil, codeError(CodeInvalidParams, "gateway: invalid params")
		}
		if err != nil {
			if s.ctx.Err() != nil { // the session ended under the request
				return nil, codeError(CodeSessionEnded, msgEnded)
			}
			return nil, err
		}
		return res, nil
	}
}

// sessionOf returns the live session of req.
func (g *Gateway) sessionOf(req mcp.Request) *session {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if ss == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[ss.ID()]
	if s == nil || s.ss != ss {
		return nil
	}
	return s
}

// listTools acquires every server's lease for this session (in parallel,
// at most MaxParallelListings at a time) and lists their pinned tools
// under <server>__<tool>. A server that fails to start is left out.
func (s *session) listTools(ctx context.Context, p *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	if p != nil && p.Cursor != "" { // one page: the gateway issues no cursor
		return nil, codeError(CodeInvalidParams, msgInvalidCursor)
	}
	servers := s.g.list.Load().names
	lists := make([][]runtime.PinnedTool, len(servers))
	sem := make(chan struct{}, MaxParallelListings)
	var wg sync.WaitGroup
	for i, server := range servers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			tools, err := s.capa.Tools(ctx, server)
			if err != nil {
				s.g.opts.Logger.Warn("gateway: server left out of the listing", "session", s.id, "server", server, "err", err)
				return
			}
			lists[i] = tools
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, rpcError(ctx, err)
	}
	out := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, server := range servers {
		if lists[i] == nil {
			continue
		}
		s.pinLocked(server, lists[i])
		for _, pt := range lists[i] {
			t := *pt.Tool
			t.Name = ToolName(server, pt.Name)
			out.Tools = append(out.Tools, &t)
		}
	}
	return out, nil
}

// pinLocked replaces what the session was shown of server's tools.
func (s *session) pinLocked(server string, tools []runtime.PinnedTool) {
	for name, ref := range s.tools {
		if ref.server == server {
			delete(s.tools, name)
		}
	}
	for _, pt := range tools {
		s.tools[ToolName(server, pt.Name)] = toolRef{server: server, tool: pt.Name, digest: pt.Digest}
	}
}

// ref returns the listed tool named name; a server whose tools the
// session was not shown yet is listed first.
func (s *session) ref(ctx context.Context, name string) (toolRef, *jsonrpc.Error) {
	server, _, ok := SplitToolName(name)
	if !ok || !s.g.list.Load().set[server] {
		return toolRef{}, codeError(CodeInvalidParams, msgUnknownTool)
	}
	s.mu.Lock()
	ref, ok := s.tools[name]
	s.mu.Unlock()
	if ok {
		return ref, nil
	}
	tools, err := s.capa.Tools(ctx, server)
	if err != nil {
		s.logFailure("listing", server, err)
		return toolRef{}, rpcError(ctx, err)
	}
	s.mu.Lock()
	s.pinLocked(server, tools)
	ref, ok = s.tools[name]
	s.mu.Unlock()
	if !ok {
		return toolRef{}, codeError(CodeInvalidParams, msgUnknownTool)
	}
	return ref, nil
}

// callTool runs the call through the lease's gate with the digest of the
// listing the session was shown; the result passes through untouched.
func (s *session) callTool(ctx context.Context, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	ref, rerr := s.ref(ctx, p.Name)
	if rerr != nil {
		return nil, rerr
	}
	creq := runtime.CallRequest{Server: ref.server, Tool: ref.tool, Digest: ref.digest}
	if len(p.Arguments) > 0 {
		creq.Arguments = json.RawMessage(p.Arguments)
	}
	s.withCallProgress(ctx, &creq, p.GetProgressToken())
	res, err := s.capa.Call(ctx, creq)
	if err != nil {
		s.logFailure("call", ref.server, err)
		return nil, rpcError(ctx, err)
	}
	return res, nil
}

// logFailure logs a failed request to server at warn level: the runtime's
// errors carry static text and local identities only, never the server's
// text. The operator's account of the failure (runtime.LeaseError's
// Cause, Target, HTTPStatus, Exit: a refused dial to host:port, a DNS or
// TLS failure, a timer, a status, an exit status) is logged as its own
// attributes too; the client's answer stays static (rpcError).
func (s *session) logFailure(what, server string, err error) {
	attrs := []any{"session", s.id, "server", server, "err", err}
	var le *runtime.LeaseError
	if errors.As(err, &le) && le.Cause != "" {
		attrs = append(attrs, "cause", string(le.Cause))
		if le.Target != "" {
			attrs = append(attrs, "target", le.Target)
		}
		if le.HTTPStatus != 0 {
			attrs = append(attrs, "http_status", le.HTTPStatus)
		}
		if le.Exit != nil {
			attrs = append(attrs, "exit_code", le.Exit.Code)
			if le.Exit.Signal != "" {
				attrs = append(attrs, "signal", le.Exit.Signal)
			}
		}
	}
	s.g.opts.Logger.Warn("gateway: "+what+" failed", attrs...)
}

// notifyProgress sends one progress notification for the client's token
// on the request's stream; a failure to deliver does not fail the request.
func (s *session) notifyProgress(ctx context.Context, token any, p runtime.Progress) {
	_ = s.ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
		Progress: p.Progress, Total: p.Total, Message: p.Message})
}
