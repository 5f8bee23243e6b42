package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/debug"
	"sync"

	"github.com/leaseledger/leaseledger/events"
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
	// CodeUnknownPrompt: a prompt name no exposed server offers under it
	// (invalid params, as MCP servers answer an unknown prompt).
	CodeUnknownPrompt = jsonrpc.CodeInvalidParams
	// CodeServerUnavailable: the server could not be started or listed
	// (spawn, initialize, listing, lease cap, config).
	CodeServerUnavailable = -32010
	// CodeRequestFailed: the request failed at the transport level or
	// the server's answer broke the result envelope.
	CodeRequestFailed = -32011
	// CodeListingChanged: the server's tool listing changed since the
	// session was shown it (list again), or no longer matches it at all
	// (the lease was poisoned); nothing was sent.
	CodeListingChanged = -32012
	// CodeRefused: the server's lease was revoked, poisoned or denied for
	// this session, or the session holds runtime.MaxSubscriptionsPerSession.
	CodeRefused = -32013
	// CodeSessionEnded: the session ended (or the gateway closed).
	CodeSessionEnded = -32014
	// CodeCancelled: the request was cancelled before it completed.
	CodeCancelled = -32015
	// CodeRequestTimeout: the resource request's or the tool call's budget
	// expired (the server was told to cancel).
	CodeRequestTimeout = -32016
	// CodeNameCollision: the name (a tool's, a prompt's) or resource URI
	// is exposed by two servers (both with that prefix, "" included): it
	// is left out of listings and never routed.
	CodeNameCollision = -32017
	// CodeAccessDenied: the access policy (Options.Policy) does not let
	// the session's principal do this; nothing was started or sent, and
	// the decision was recorded with the deciding policies.
	CodeAccessDenied = -32018
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
	msgCollision       = "gateway: the name is exposed by more than one server"
	msgUnknownPrompt   = "gateway: unknown prompt"
	msgAccessDenied    = "gateway: denied by the access policy"
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
	case errors.Is(err, runtime.ErrAccessDenied):
		return codeError(CodeAccessDenied, msgAccessDenied)
	case errors.Is(err, runtime.ErrNameMismatch), errors.Is(err, runtime.ErrDigestMismatch), errors.Is(err, runtime.ErrListingChanged):
		return codeError(CodeListingChanged, msgChanged)
	case errors.Is(err, runtime.ErrRevoked), errors.Is(err, runtime.ErrPoisoned), errors.Is(err, runtime.ErrDenied),
		errors.Is(err, runtime.ErrTooManySubscriptions):
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
		case "tools/list", "tools/call", "resources/list", "resources/templates/list", "resources/read",
			"prompts/list", "prompts/get", "completion/complete", "resources/subscribe", "resources/unsubscribe",
			"logging/setLevel":
		default:
			return next(ctx, method, req)
		}
		growHandlerStack() // once, shallow, rather than deep and repeatedly (stack.go)
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
				return nil, codeError(CodeInvalidParams, msgInvalidParams)
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
				return nil, codeError(CodeInvalidParams, msgInvalidParams)
			}
			res, err = s.readResource(ctx, p)
		case *mcp.ListPromptsParams:
			if p == nil {
				p = &mcp.ListPromptsParams{}
			}
			res, err = s.listPrompts(ctx, p)
		case *mcp.GetPromptParams:
			if p == nil {
				return nil, codeError(CodeInvalidParams, msgInvalidParams)
			}
			res, err = s.getPrompt(ctx, p)
		case *mcp.CompleteParams:
			if p == nil {
				return nil, codeError(CodeInvalidParams, msgInvalidParams)
			}
			res, err = s.complete(ctx, p)
		case *mcp.SubscribeParams:
			if p == nil {
				return nil, codeError(CodeInvalidParams, msgInvalidParams)
			}
			res, err = s.subscribe(ctx, p)
		case *mcp.UnsubscribeParams:
			if p == nil {
				return nil, codeError(CodeInvalidParams, msgInvalidParams)
			}
			res, err = s.unsubscribe(ctx, p)
		case *mcp.SetLoggingLevelParams:
			if p == nil {
				return nil, codeError(CodeInvalidParams, msgInvalidParams)
			}
			if err = s.setLevel(ctx, p); err == nil {
				// The go-sdk keeps the level too and answers.
				res, err = next(ctx, method, req)
			}
		default:
			return nil, codeError(CodeInvalidParams, msgInvalidParams)
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
// under their exposed names (the server's prefix and the tool's name). A
// server that fails to start is left out; a name two servers expose is
// left out and logged (callTool refuses it with CodeNameCollision).
func (s *session) listTools(ctx context.Context, p *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	if p != nil && p.Cursor != "" { // one page: the gateway issues no cursor
		return nil, codeError(CodeInvalidParams, msgInvalidCursor)
	}
	list := s.g.list.Load()
	if _, err := s.fetchTools(ctx, list, list.names); err != nil {
		return nil, err
	}
	out := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, server := range list.names {
		if !s.pol.allows(events.AccessStartServer, server, "", nil) {
			continue // shown before the policy denied it
		}
		for _, pt := range s.shown[server] {
			name := list.exposedName(server, pt.Name)
			if ref, ok := s.tools[name]; !ok || ref.server != server {
				continue // a collision, or a server left out
			}
			if !s.pol.allows(events.AccessCallTool, server, pt.Name, pt.Tool) {
				continue // not the session's to use
			}
			t := *pt.Tool
			t.Name = name
			out.Tools = append(out.Tools, &t)
		}
	}
	return out, nil
}

// fetchTools acquires the listed leases of servers for this session (in
// parallel, at most MaxParallelListings at a time) and makes their pinned
// listings what the session was shown. A server that fails is left out
// (and what the session was shown of it is kept); the error of the first
// that failed is returned beside.
func (s *session) fetchTools(ctx context.Context, list *serverList, servers []string) (failed error, _ *jsonrpc.Error) {
	lists := make([][]runtime.PinnedTool, len(servers))
	errs := make([]error, len(servers))
	sem := make(chan struct{}, MaxParallelListings)
	var wg sync.WaitGroup
	for i, server := range servers {
		wg.Go(func() {
			if !s.pol.allows(events.AccessStartServer, server, "", nil) {
				// Not the session's to use: left out without starting it
				// (and without recording a denial: a listing is no action),
				// and fetched once the policy allows it.
				return
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			tools, err := s.capa.Tools(ctx, server)
			if err != nil {
				s.logFailure("listing", server, err)
				errs[i] = err
				return
			}
			lists[i] = tools
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, rpcError(ctx, err)
	}
	for _, err := range errs {
		if err != nil && failed == nil {
			failed = err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, server := range servers {
		if lists[i] != nil {
			s.shown[server] = lists[i]
		}
	}
	s.reindexLocked(list)
	return failed, nil
}

// reindexLocked rebuilds the exposed-name index of the tools the session
// was shown, under list's prefixes: a name two servers expose goes to
// clashes instead (logged once per rebuild), and servers no longer
// offered are dropped.
func (s *session) reindexLocked(list *serverList) {
	owners := map[string][]string{}
	for server := range s.shown {
		if !list.set[server] {
			delete(s.shown, server)
			continue
		}
	}
	for _, server := range list.names {
		for _, pt := range s.shown[server] {
			name := list.exposedName(server, pt.Name)
			owners[name] = append(owners[name], server)
		}
	}
	clear(s.tools)
	clear(s.toolClashes)
	for _, server := range list.names {
		for _, pt := range s.shown[server] {
			name := list.exposedName(server, pt.Name)
			if o := owners[name]; len(o) > 1 {
				if _, logged := s.toolClashes[name]; !logged {
					s.g.opts.Logger.Warn("gateway: tool name collides between servers; left out", "session", s.id, "servers", o)
				}
				s.toolClashes[name] = o
				continue
			}
			s.tools[name] = toolRef{server: server, tool: pt.Name, digest: pt.Digest}
		}
	}
	s.toolsGen = list.gen
}

// ref returns the listed tool named name. When the session was not shown
// it, the servers whose prefix starts the name and whose tools the
// session was not shown yet are listed first.
func (s *session) ref(ctx context.Context, name string) (toolRef, *jsonrpc.Error) {
	list := s.g.list.Load()
	look := func() (toolRef, *jsonrpc.Error, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.toolsGen != list.gen {
			s.reindexLocked(list)
		}
		if ref, ok := s.tools[name]; ok {
			return ref, nil, true
		}
		if _, ok := s.toolClashes[name]; ok {
			return toolRef{}, codeError(CodeNameCollision, msgCollision), true
		}
		return toolRef{}, nil, false
	}
	if ref, rerr, ok := look(); ok {
		return ref, rerr
	}
	var unseen []string
	s.mu.Lock()
	for _, server := range list.candidates(name) {
		if _, seen := s.shown[server]; !seen {
			unseen = append(unseen, server)
		}
	}
	s.mu.Unlock()
	if len(unseen) > 0 {
		failed, err := s.fetchTools(ctx, list, unseen)
		if err != nil {
			return toolRef{}, err
		}
		if ref, rerr, ok := look(); ok {
			return ref, rerr
		}
		if failed != nil { // the server that might have offered it did not start
			return toolRef{}, rpcError(ctx, failed)
		}
	}
	return toolRef{}, s.deniedServer(ctx, list, name)
}

// deniedServer is the answer to a name no server the session may use
// offers: when a server the policy denies the session could offer it
// (its prefix starts the name), the runtime is asked for that server's
// tools, so the denial is its — recorded with the deciding policies —
// and the answer is CodeAccessDenied; otherwise the name is unknown.
func (s *session) deniedServer(ctx context.Context, list *serverList, name string) *jsonrpc.Error {
	for _, server := range list.candidates(name) {
		if s.pol.allows(events.AccessStartServer, server, "", nil) {
			continue
		}
		if _, err := s.capa.Tools(ctx, server); err != nil {
			return rpcError(ctx, err)
		}
	}
	return codeError(CodeInvalidParams, msgUnknownTool)
}

// callTool runs the call through the lease's gate with the digest of the
// listing the session was shown; the result passes through untouched.
func (s *session) callTool(ctx context.Context, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	ref, rerr := s.ref(ctx, p.Name)
	if rerr != nil {
		return nil, rerr
	}
	creq := runtime.CallRequest{Server: ref.server, Tool: ref.tool, Digest: ref.digest, Meta: clientMeta(p.Meta)}
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
