package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// HTTP refusals: static text, the status says what kind. None of them
// starts anything.
const (
	msgForeignOrigin  = "gateway: origin not allowed"
	msgLoopbackOnly   = "gateway: no tokens configured; loopback clients only"
	msgOtherToken     = "gateway: session opened with another token"
	msgTokenCap       = "gateway: session cap of this token reached"
	msgGlobalCap      = "gateway: session cap reached"
	msgClosed         = "gateway: closed"
	headerSessionID   = "Mcp-Session-Id"
	tokenInfoName     = "leaseledger.principal"
	retryAfterSeconds = "5"
)

// CORS for browsers on allowed origins: what a preflight grants, and how
// long the browser may cache it.
const (
	corsAllowMethods  = "POST, GET, DELETE"
	corsAllowHeaders  = "Authorization, Content-Type, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID"
	corsExposeHeaders = "Mcp-Session-Id"
	corsMaxAgeSeconds = "600"
)

// serveAccess is the outermost layer: Origin validation against DNS
// rebinding (the go-sdk's Host check runs inside), and loopback-only
// access without tokens.
//
// A request from an allowed origin gets CORS headers (that origin allowed,
// Mcp-Session-Id exposed), and its preflight (OPTIONS with
// Access-Control-Request-Method) is answered here, before the token check:
// browsers send preflights without credentials.
func (g *Gateway) serveAccess(w http.ResponseWriter, r *http.Request, next http.Handler) {
	loopback := localLoopback(r)
	o := r.Header.Get("Origin")
	if o != "" && !g.originAllowed(o, loopback) {
		http.Error(w, msgForeignOrigin, http.StatusForbidden)
		return
	}
	if g.opts.Tokens == nil && !loopback {
		http.Error(w, msgLoopbackOnly, http.StatusForbidden)
		return
	}
	if o != "" {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", o)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", corsAllowMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAgeSeconds)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	}
	next.ServeHTTP(w, r)
}

// originAllowed: an allowed origin, or a loopback origin on a loopback
// listener.
func (g *Gateway) originAllowed(origin string, loopback bool) bool {
	n, ok := normalizeOrigin(origin)
	if !ok {
		return false
	}
	if slices.Contains(g.origins, n) {
		return true
	}
	if !loopback {
		return false
	}
	u, err := url.Parse(n)
	return err == nil && loopbackHost(u.Hostname())
}

// localLoopback reports whether the request arrived on a loopback address.
func localLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || a == nil {
		return false
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		host = a.String()
	}
	return loopbackHost(host)
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil && ip.IsLoopback()
}

// verifyToken is the go-sdk auth verifier: the token's hash is its
// session binding (TokenInfo.UserID, which the go-sdk also checks), its
// name the principal.
func (g *Gateway) verifyToken(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	name, hash, ok := g.opts.Tokens.verify(token)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: hash, Extra: map[string]any{tokenInfoName: name}}, nil
}

// principalOf returns the token name and hash of an authenticated request
// (both empty without tokens).
func principalOf(ti *auth.TokenInfo) (name, hash string) {
	if ti == nil {
		return "", ""
	}
	name, _ = ti.Extra[tokenInfoName].(string)
	return name, ti.UserID
}

// serveSession binds requests to their sessions: a session is used only
// with the token that opened it, DELETE ends it here, POSTs keep it from
// idling, and a request opening a session — a whole, valid initialize,
// read within Options.BodyReadTimeout — holds a slot under the caps until the
// session ends (or released at once when none opened).
func (g *Gateway) serveSession(w http.ResponseWriter, r *http.Request, inner http.Handler) {
	setClientAddress(r)
	principal, hash := principalOf(auth.TokenInfoFromContext(r.Context()))
	if r.Method == http.MethodPost {
		// The whole body is read and checked first (screenPost), so that
		// a slot below is taken only for a complete, valid initialize.
		body, ok := screenPost(w, r, g.opts.BodyReadTimeout)
		if !ok {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if id := r.Header.Get(headerSessionID); id != "" {
		g.mu.Lock()
		s := g.sessions[id]
		g.mu.Unlock()
		if s == nil { // unknown or not yet initialized: the go-sdk answers
			inner.ServeHTTP(w, r)
			return
		}
		if s.tokenHash != hash {
			http.Error(w, msgOtherToken, http.StatusForbidden)
			return
		}
		switch r.Method {
		case http.MethodDelete:
			_ = g.end(r.Context(), s, endedByClient)
			w.WriteHeader(http.StatusNoContent)
			return
		case http.MethodPost:
			s.busy()
			defer s.idle()
		}
		inner.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodPost { // the go-sdk refuses it
		inner.ServeHTTP(w, r)
		return
	}
	if status, msg := g.reserve(principal); status != 0 {
		if status != http.StatusServiceUnavailable || msg != msgClosed {
			w.Header().Set("Retry-After", retryAfterSeconds)
		}
		http.Error(w, msg, status)
		return
	}
	inner.ServeHTTP(w, r)
	// The go-sdk set the new session's id on the response; the session
	// exists when initialize opened it (see initialize).
	g.settle(principal, w.Header().Get(headerSessionID))
}

// reserve takes a session slot for principal, or returns the refusal.
func (g *Gateway) reserve(principal string) (int, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return http.StatusServiceUnavailable, msgClosed
	case g.total >= g.opts.MaxSessions:
		return http.StatusServiceUnavailable, msgGlobalCap
	case g.opts.Tokens != nil && g.slots[principal] >= g.opts.MaxSessionsPerToken:
		return http.StatusTooManyRequests, msgTokenCap
	}
	g.total++
	g.slots[principal]++
	return 0, ""
}

// settle hands the slot of a session-opening request to the session it
// opened, or releases it. The session's end releases a slot it holds.
func (g *Gateway) settle(principal, id string) {
	g.mu.Lock()
	s := g.sessions[id]
	if id == "" || s == nil || s.slot {
		g.releaseLocked(principal)
		g.mu.Unlock()
		return
	}
	s.slot = true
	g.mu.Unlock()
	s.idle() // the opening request ended
}

func (g *Gateway) releaseLocked(principal string) {
	g.total--
	if g.slots[principal]--; g.slots[principal] <= 0 {
		delete(g.slots, principal)
	}
}

// tokensReloaded ends the sessions whose token is no longer in force.
func (g *Gateway) tokensReloaded() {
	g.mu.Lock()
	var gone []*session
	for _, s := range g.sessions {
		if !g.opts.Tokens.holds(s.tokenHash) {
			gone = append(gone, s)
		}
	}
	g.mu.Unlock()
	for _, s := range gone {
		g.startEnd(s, endedByRevoke)
	}
}
