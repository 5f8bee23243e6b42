package gateway

import (
	"context"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Prompts, completions, subscriptions and the log level: each goes to the
// server that owns the name or URI (see catalog.go), as a request handle
// owned by the session's owner, so it is recorded, bounded by the
// session's request budget and cancelled with the client's request.

// listPrompts lists prompts page by page across servers (like resources),
// each under its exposed name; a name two servers expose is left out.
func (s *session) listPrompts(ctx context.Context, p *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}
	list := s.g.list.Load()
	next, err := s.listPage(ctx, p.Cursor, p.GetProgressToken(),
		func(server, cursor string) (*runtime.ResourceHandle, error) {
			return s.capa.ListPrompts(ctx, s.owner, server, cursor, s.requestOptions(p.Meta))
		},
		func(server string, r *runtime.ResourceResult) (int, string) {
			for _, x := range r.Prompts.Prompts {
				y := *x
				y.Name = list.exposedName(server, x.Name)
				if s.note(list, kindPrompt, pickPrompts, y.Name, server, x.Name) &&
					s.pol.allows(events.AccessGetPrompt, server, x.Name, nil) {
					out.Prompts = append(out.Prompts, &y)
				}
			}
			return len(r.Prompts.Prompts), r.Prompts.NextCursor
		})
	if err != nil {
		return nil, err
	}
	out.NextCursor = next
	return out, nil
}

// getPrompt gets an exposed prompt from its server; the result passes
// through as the server produced it.
func (s *session) getPrompt(ctx context.Context, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	ref, rerr := s.resolvePrompt(ctx, p.Name)
	if rerr != nil {
		return nil, rerr
	}
	q := *p
	q.Name = ref.original
	q.Meta = nil
	res, err := s.request(ctx, "prompt", ref.server, p.GetProgressToken(), func() (*runtime.ResourceHandle, error) {
		return s.capa.GetPrompt(ctx, s.owner, ref.server, &q, s.requestOptions(p.Meta))
	})
	if err != nil {
		return nil, err
	}
	return res.Prompt, nil
}

// request runs one request handle of the session on server (start starts
// it) to its end, relaying its progress to the client's token (nil:
// none), and returns its result; a failure is logged (what it was) and
// answered as a gateway error.
func (s *session) request(ctx context.Context, what, server string, token any, start func() (*runtime.ResourceHandle, error)) (*runtime.ResourceResult, error) {
	h, err := start()
	if err == nil {
		var res *runtime.ResourceResult
		if res, err = s.await(ctx, h, s.newProgressRelay(ctx, token, true)); err == nil {
			return res, nil
		}
	}
	s.logFailure(what, server, err)
	return nil, rpcError(ctx, err)
}

// complete routes completion/complete to the server of the prompt or the
// resource template it refers to.
func (s *session) complete(ctx context.Context, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	if p.Ref == nil {
		return nil, codeError(CodeInvalidParams, msgInvalidParams)
	}
	var ref itemRef
	q := *p
	r := *p.Ref
	q.Ref, q.Meta = &r, nil
	switch r.Type {
	case "ref/prompt":
		x, rerr := s.resolvePrompt(ctx, r.Name)
		if rerr != nil {
			return nil, rerr
		}
		ref, r.Name = x, x.original
	case "ref/resource":
		x, rerr := s.resolveTemplate(ctx, r.URI)
		if rerr != nil {
			return nil, rerr
		}
		ref, r.URI = x, x.original
	default:
		return nil, codeError(CodeInvalidParams, msgInvalidParams)
	}
	res, err := s.request(ctx, "completion", ref.server, nil, func() (*runtime.ResourceHandle, error) {
		return s.capa.Complete(ctx, s.owner, ref.server, &q, s.requestOptions(p.Meta))
	})
	if err != nil {
		return nil, err
	}
	return res.Completion, nil
}

// subscribe subscribes the session to an exposed URI at its server (the
// runtime keeps the subscription as session state); the server's updates
// of it reach the session under that URI (Notify maps it back).
func (s *session) subscribe(ctx context.Context, p *mcp.SubscribeParams) (*emptyResult, error) {
	ref, rerr := s.resolveURI(ctx, p.URI)
	if rerr != nil {
		return nil, rerr
	}
	if _, err := s.request(ctx, "subscribe", ref.server, nil, func() (*runtime.ResourceHandle, error) {
		return s.capa.Subscribe(ctx, s.owner, ref.server, ref.original, s.requestOptions(p.Meta))
	}); err != nil {
		return nil, err
	}
	return &emptyResult{}, nil
}

// unsubscribe ends the session's subscription to an exposed URI.
func (s *session) unsubscribe(ctx context.Context, p *mcp.UnsubscribeParams) (*emptyResult, error) {
	ref, rerr := s.resolveURI(ctx, p.URI)
	if rerr != nil {
		return nil, rerr
	}
	if _, err := s.request(ctx, "unsubscribe", ref.server, nil, func() (*runtime.ResourceHandle, error) {
		return s.capa.Unsubscribe(ctx, s.owner, ref.server, ref.original, s.requestOptions(p.Meta))
	}); err != nil {
		return nil, err
	}
	return &emptyResult{}, nil
}

// setLevel applies the client's log level to each of the session's
// servers, those started later too (the runtime keeps it).
func (s *session) setLevel(ctx context.Context, p *mcp.SetLoggingLevelParams) error {
	if err := s.capa.SetLogLevel(ctx, p.Level); err != nil {
		s.logFailure("log level", "", err)
		return rpcError(ctx, err)
	}
	return nil
}

// emptyResult is the result of a method that returns nothing ({}).
type emptyResult struct{ mcp.ResultBase }
