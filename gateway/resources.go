package gateway

import (
	"context"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Resources and templates are listed page by page: a gateway page is one
// page of one server (servers in Options.Servers order, empty pages
// skipped), and the gateway cursor says which server and which of its
// cursors comes next. Every request to a server is a runtime request
// handle owned by the session's owner. A page may take several servers'
// handles (those before it empty or failed): their progress goes out
// under the client's one token through one progressRelay, rebased so the
// values keep increasing.

// requestOptions are the bounds of the session's request handles, with
// the client's _meta (its progress token aside: the handle has its own,
// relayed to the client's by the gateway).
func (s *session) requestOptions(meta ...mcp.Meta) runtime.RequestOptions {
	o := runtime.DefaultRequestOptions()
	o.Budget = s.g.opts.RequestBudget
	if len(meta) > 0 && len(meta[0]) > 0 {
		o.Meta = clientMeta(meta[0])
	}
	return o
}

// clientMeta is a request's _meta without its progress token, or nil.
func clientMeta(m mcp.Meta) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != "progressToken" {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// listPage runs one list method over the servers from the cursor on:
// start starts the handle for a server and cursor, take reads the page
// (its item count and next cursor) and keeps its items. A server that
// fails is left out.
func (s *session) listPage(ctx context.Context, cursor string, token any,
	start func(server, cursor string) (*runtime.ResourceHandle, error),
	take func(server string, r *runtime.ResourceResult) (n int, next string)) (string, error) {
	list := s.g.list.Load()
	servers := list.names
	c, ok := decodeCursor(cursor, len(servers), list.gen)
	if !ok {
		return "", codeError(CodeInvalidParams, msgInvalidCursor)
	}
	relay := s.newProgressRelay(ctx, token, false)
	items := 0
	for i := c.Server; i < len(servers); i++ {
		server := servers[i]
		if !s.pol.allows(events.AccessStartServer, server, "", nil) {
			continue // not the session's to use: left out, not started
		}
		sc := ""
		if i == c.Server {
			sc = c.Cursor
		}
		h, err := start(server, sc)
		var res *runtime.ResourceResult
		if err == nil {
			relay.nextPart()
			res, err = s.await(ctx, h, relay)
		}
		if ctx.Err() != nil {
			return "", rpcError(ctx, ctx.Err())
		}
		if err != nil {
			// A server without resources answers with an error: usual, so
			// logged at debug level.
			s.g.opts.Logger.Debug("gateway: server left out of the listing", "session", s.id, "server", server, "err", err)
			continue
		}
		n, next := take(server, res)
		items += n
		if next != "" {
			return encodeCursor(pageCursor{Server: i, Cursor: next, Gen: list.gen}), nil
		}
		if items > 0 && i+1 < len(servers) {
			return encodeCursor(pageCursor{Server: i + 1, Gen: list.gen}), nil
		}
	}
	return "", nil
}

// listResources lists resources under leaseledger://<server>/<uri>, or
// under their own URIs for a server exposed with the prefix "" (a URI two
// such servers list is left out).
func (s *session) listResources(ctx context.Context, p *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	list := s.g.list.Load()
	next, err := s.listPage(ctx, p.Cursor, p.GetProgressToken(),
		func(server, cursor string) (*runtime.ResourceHandle, error) {
			return s.capa.ListResources(ctx, s.owner, server, cursor, s.requestOptions(p.Meta))
		},
		func(server string, r *runtime.ResourceResult) (int, string) {
			for _, x := range r.Resources.Resources {
				y := *x
				y.URI = list.exposedURI(server, x.URI)
				if s.note(list, kindURI, pickURIs, y.URI, server, x.URI) &&
					s.pol.allows(events.AccessReadResource, server, x.URI, nil) {
					out.Resources = append(out.Resources, &y)
				}
			}
			return len(r.Resources.Resources), r.Resources.NextCursor
		})
	if err != nil {
		return nil, err
	}
	out.NextCursor = next
	return out, nil
}

// listTemplates lists resource templates under
// leaseledger://<server>/<template>, or as they are for a server exposed
// with the prefix "".
func (s *session) listTemplates(ctx context.Context, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	out := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}
	list := s.g.list.Load()
	next, err := s.listPage(ctx, p.Cursor, p.GetProgressToken(),
		func(server, cursor string) (*runtime.ResourceHandle, error) {
			return s.capa.ListResourceTemplates(ctx, s.owner, server, cursor, s.requestOptions(p.Meta))
		},
		func(server string, r *runtime.ResourceResult) (int, string) {
			for _, x := range r.Templates.ResourceTemplates {
				y := *x
				y.URITemplate = list.exposedURI(server, x.URITemplate)
				if s.note(list, kindTemplate, pickTemplates, y.URITemplate, server, x.URITemplate) &&
					s.pol.allows(events.AccessReadResource, server, x.URITemplate, nil) {
					out.ResourceTemplates = append(out.ResourceTemplates, &y)
				}
			}
			return len(r.Templates.ResourceTemplates), r.Templates.NextCursor
		})
	if err != nil {
		return nil, err
	}
	out.NextCursor = next
	return out, nil
}

// readResource reads an exposed URI (resolveURI) from its server; the
// contents pass through as the server produced them, their URIs mapped
// back to the exposed ones.
func (s *session) readResource(ctx context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	ref, rerr := s.resolveURI(ctx, p.URI)
	if rerr != nil {
		return nil, rerr
	}
	res, err := s.request(ctx, "resource read", ref.server, p.GetProgressToken(), func() (*runtime.ResourceHandle, error) {
		return s.capa.ReadResource(ctx, s.owner, ref.server, ref.original, s.requestOptions(p.Meta))
	})
	if err != nil {
		return nil, err
	}
	return res.Read, nil
}

// await relays the handle's progress to the client through relay (nil:
// the client sent no progress token) until the handle settles, and returns its result. When
// ctx ends first — the client's notifications/cancelled, or the session's
// end — the handle is cancelled (its cancellation reaches the server).
func (s *session) await(ctx context.Context, h *runtime.ResourceHandle, relay *progressRelay) (*runtime.ResourceResult, error) {
	prog := h.Progress()
	for prog != nil {
		select {
		case p, ok := <-prog:
			if !ok {
				prog = nil
			} else {
				relay.relay(p)
			}
		case <-ctx.Done():
			_, _ = h.Cancel(context.WithoutCancel(ctx))
			return nil, ctx.Err()
		}
	}
	return h.Await(context.WithoutCancel(ctx))
}
