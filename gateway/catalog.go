package gateway

import (
	"context"
	"strings"

	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/yosida95/uritemplate/v3"
)

// A session's catalog of prompts and resources: which server an exposed
// prompt name, resource URI or template belongs to, learnt from what the
// session was shown (listings are paged, so the catalog fills page by
// page). Namespaced URIs (leaseledger://<server>/…) and names whose prefix
// only one server has route without it; the catalog is what routes the
// rest — the own names and URIs of servers exposed with the prefix "" —
// and what remembers a name two servers expose (a collision: left out of
// later pages, refused; an earlier page may already have shown it).

// itemRef is one catalogued item: its server and the server's own name
// (or URI, or template).
type itemRef struct{ server, original string }

// catalog is the prompts and resources a session was shown. Guarded by
// session.mu.
type catalog struct {
	prompts   map[string]itemRef // exposed name → prompt
	uris      map[string]itemRef // exposed URI → resource
	templates map[string]itemRef // exposed template → template
	clashes   map[string][]string
	// learnt: the servers whose prompts (resp. resources and templates)
	// were listed to the end for this session, keyed by kind+server.
	learnt map[string]bool
	gen    uint64 // the server list generation the catalog is of
}

// MaxCatalogPages bounds the pages of one server a lookup lists to find
// a name it was not shown.
const MaxCatalogPages = 16

func (s *session) initCatalog() {
	s.cat = catalog{prompts: map[string]itemRef{}, uris: map[string]itemRef{}, templates: map[string]itemRef{},
		clashes: map[string][]string{}, learnt: map[string]bool{}}
}

// catalogLocked returns the catalog, emptied when the server list changed
// since it was filled (prefixes may have changed with it).
func (s *session) catalogLocked(list *serverList) *catalog {
	if s.cat.gen != list.gen {
		s.initCatalog()
		s.cat.gen = list.gen
	}
	return &s.cat
}

// note records that exposed (a name, URI or template, in table m of kind)
// is server's original, and reports whether it may be shown: false when
// another server already exposes it (a collision, logged and remembered).
func (s *session) note(list *serverList, kind string, pick func(*catalog) map[string]itemRef, exposed, server, original string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.catalogLocked(list)
	m := pick(c)
	key := kind + "\x00" + exposed
	if o, clash := c.clashes[key]; clash {
		if !strings.Contains(strings.Join(o, "\x00"), server) {
			c.clashes[key] = append(o, server)
		}
		return false
	}
	if prev, ok := m[exposed]; ok && prev.server != server {
		delete(m, exposed)
		c.clashes[key] = []string{prev.server, server}
		s.g.opts.Logger.Warn("gateway: "+kind+" collides between servers; left out", "session", s.id, "servers", c.clashes[key])
		return false
	}
	m[exposed] = itemRef{server: server, original: original}
	return true
}

// lookup returns the catalogued item exposed of kind, whether it clashes.
func (s *session) lookup(list *serverList, kind string, pick func(*catalog) map[string]itemRef, exposed string) (itemRef, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.catalogLocked(list)
	if _, clash := c.clashes[kind+"\x00"+exposed]; clash {
		return itemRef{}, true, true
	}
	r, ok := pick(c)[exposed]
	return r, ok, false
}

func pickPrompts(c *catalog) map[string]itemRef   { return c.prompts }
func pickURIs(c *catalog) map[string]itemRef      { return c.uris }
func pickTemplates(c *catalog) map[string]itemRef { return c.templates }

// Catalog kinds (also in collision log records).
const (
	kindPrompt   = "prompt name"
	kindURI      = "resource URI"
	kindTemplate = "resource template"
)

// resolvePrompt returns the server and original name of an exposed
// prompt name: from the catalog, or, when only one server's prefix starts
// it, that server; otherwise the candidate servers' prompts are listed
// (up to MaxCatalogPages each) and the catalog consulted again.
func (s *session) resolvePrompt(ctx context.Context, name string) (itemRef, *jsonrpc.Error) {
	list := s.g.list.Load()
	if r, ok, clash := s.lookup(list, kindPrompt, pickPrompts, name); clash {
		return itemRef{}, codeError(CodeNameCollision, msgCollision)
	} else if ok {
		return r, nil
	}
	cands := list.candidates(name)
	switch len(cands) {
	case 0:
		return itemRef{}, codeError(CodeUnknownPrompt, msgUnknownPrompt)
	case 1:
		return itemRef{server: cands[0], original: name[len(list.prefix[cands[0]]):]}, nil
	}
	for _, server := range cands {
		s.learn(ctx, list, "prompts", server)
	}
	if err := ctx.Err(); err != nil {
		return itemRef{}, rpcError(ctx, err)
	}
	if r, ok, clash := s.lookup(list, kindPrompt, pickPrompts, name); clash {
		return itemRef{}, codeError(CodeNameCollision, msgCollision)
	} else if ok {
		return r, nil
	}
	return itemRef{}, codeError(CodeUnknownPrompt, msgUnknownPrompt)
}

// resolveURI returns the server and original URI of an exposed resource
// URI: a namespaced URI of a namespaced server directly; a URI the
// session was shown from the catalog; with one server exposed with the
// prefix "", that server; otherwise the own-URI servers' resources and
// templates are listed and the URI looked up, then matched against their
// templates (a URI two servers' templates match is a collision).
func (s *session) resolveURI(ctx context.Context, uri string) (itemRef, *jsonrpc.Error) {
	list := s.g.list.Load()
	if server, original, ok := SplitResourceURI(uri); ok && list.set[server] && !list.bare[server] {
		return itemRef{server: server, original: original}, nil
	}
	if len(list.bare) == 0 {
		return itemRef{}, codeError(CodeUnknownResource, msgUnknownResource)
	}
	if r, ok, clash := s.lookup(list, kindURI, pickURIs, uri); clash {
		return itemRef{}, codeError(CodeNameCollision, msgCollision)
	} else if ok {
		return r, nil
	}
	bare := list.bareNames()
	if len(bare) == 1 {
		return itemRef{server: bare[0], original: uri}, nil
	}
	for _, server := range bare {
		s.learn(ctx, list, "resources", server)
		s.learn(ctx, list, "templates", server)
	}
	if err := ctx.Err(); err != nil {
		return itemRef{}, rpcError(ctx, err)
	}
	if r, ok, clash := s.lookup(list, kindURI, pickURIs, uri); clash {
		return itemRef{}, codeError(CodeNameCollision, msgCollision)
	} else if ok {
		return r, nil
	}
	var matched []itemRef
	s.mu.Lock()
	for exposed, r := range s.catalogLocked(list).templates {
		if !list.bare[r.server] {
			continue
		}
		if t, err := uritemplate.New(exposed); err == nil && t.Regexp().MatchString(uri) {
			if len(matched) == 0 || matched[0].server != r.server {
				matched = append(matched, itemRef{server: r.server, original: uri})
			}
		}
	}
	s.mu.Unlock()
	switch len(matched) {
	case 1:
		return matched[0], nil
	case 0:
		return itemRef{}, codeError(CodeUnknownResource, msgUnknownResource)
	}
	return itemRef{}, codeError(CodeNameCollision, msgCollision)
}

// resolveTemplate returns the server and original template of an exposed
// resource template (a completion's ref/resource).
func (s *session) resolveTemplate(ctx context.Context, tmpl string) (itemRef, *jsonrpc.Error) {
	list := s.g.list.Load()
	if server, original, ok := SplitResourceURI(tmpl); ok && list.set[server] && !list.bare[server] {
		return itemRef{server: server, original: original}, nil
	}
	if len(list.bare) == 0 {
		return itemRef{}, codeError(CodeUnknownResource, msgUnknownResource)
	}
	for _, pick := range []struct {
		kind string
		pick func(*catalog) map[string]itemRef
	}{{kindTemplate, pickTemplates}, {kindURI, pickURIs}} {
		if r, ok, clash := s.lookup(list, pick.kind, pick.pick, tmpl); clash {
			return itemRef{}, codeError(CodeNameCollision, msgCollision)
		} else if ok {
			return r, nil
		}
	}
	bare := list.bareNames()
	if len(bare) == 1 {
		return itemRef{server: bare[0], original: tmpl}, nil
	}
	for _, server := range bare {
		s.learn(ctx, list, "templates", server)
	}
	if r, ok, clash := s.lookup(list, kindTemplate, pickTemplates, tmpl); clash {
		return itemRef{}, codeError(CodeNameCollision, msgCollision)
	} else if ok {
		return r, nil
	}
	return itemRef{}, codeError(CodeUnknownResource, msgUnknownResource)
}

// learn lists server's prompts, resources or templates (what) to the end,
// up to MaxCatalogPages pages, once per session and server list, into
// the catalog. Failures leave the catalog as it is (logged at debug
// level: a server without prompts answers with an error).
func (s *session) learn(ctx context.Context, list *serverList, what, server string) {
	s.mu.Lock()
	c := s.catalogLocked(list)
	key := what + "\x00" + server
	done := c.learnt[key]
	c.learnt[key] = true
	s.mu.Unlock()
	if done {
		return
	}
	cursor := ""
	for range MaxCatalogPages {
		var h *runtime.ResourceHandle
		var err error
		switch what {
		case "prompts":
			h, err = s.capa.ListPrompts(ctx, s.owner, server, cursor, s.requestOptions())
		case "resources":
			h, err = s.capa.ListResources(ctx, s.owner, server, cursor, s.requestOptions())
		default:
			h, err = s.capa.ListResourceTemplates(ctx, s.owner, server, cursor, s.requestOptions())
		}
		var res *runtime.ResourceResult
		if err == nil {
			res, err = s.await(ctx, h, nil)
		}
		if err != nil {
			s.g.opts.Logger.Debug("gateway: server not catalogued", "session", s.id, "server", server, "err", err)
			return
		}
		switch {
		case res.Prompts != nil:
			for _, p := range res.Prompts.Prompts {
				s.note(list, kindPrompt, pickPrompts, list.exposedName(server, p.Name), server, p.Name)
			}
			cursor = res.Prompts.NextCursor
		case res.Resources != nil:
			for _, r := range res.Resources.Resources {
				s.note(list, kindURI, pickURIs, list.exposedURI(server, r.URI), server, r.URI)
			}
			cursor = res.Resources.NextCursor
		case res.Templates != nil:
			for _, t := range res.Templates.ResourceTemplates {
				s.note(list, kindTemplate, pickTemplates, list.exposedURI(server, t.URITemplate), server, t.URITemplate)
			}
			cursor = res.Templates.NextCursor
		}
		if cursor == "" {
			return
		}
	}
}
