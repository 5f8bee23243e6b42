package gateway

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/policy"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"
)

// Bounds and defaults.
const (
	// DefaultMaxSessions caps the live MCP sessions of a gateway when
	// Options.MaxSessions is zero; a new session beyond it is refused with
	// 503 and nothing is started.
	DefaultMaxSessions = 128
	// DefaultMaxSessionsPerToken caps the live sessions one token opened
	// when Options.MaxSessionsPerToken is zero; beyond it 429, nothing
	// started. Without tokens only the global cap applies.
	DefaultMaxSessionsPerToken = 32
	// DefaultSessionIdleTimeout ends a session that received no POST or
	// DELETE for this long (and has none in flight) when
	// Options.SessionIdleTimeout is zero.
	DefaultSessionIdleTimeout = 30 * time.Minute
	// MaxServers bounds Options.Servers.
	MaxServers = 64
	// MaxParallelListings bounds the servers one tools/list acquires at
	// the same time.
	MaxParallelListings = 8
	// MaxRequestBodyBytes bounds one HTTP request body (413 beyond it).
	MaxRequestBodyBytes = 4 << 20
	// SessionEndTimeout bounds ending one session (its handlers, request
	// handles, then the runtime scope), detached from the caller's
	// cancellation: an end once begun always completes.
	SessionEndTimeout = 2 * time.Minute
	// SessionIDPrefix starts every MCP session id; the rest is a ULID, so
	// the id follows events.IDRule and is also the runtime session id.
	SessionIDPrefix = "mcp-"
)

// Options configures a Gateway.
type Options struct {
	// Manager runs the servers; required. The gateway never closes it.
	Manager *runtime.Manager
	// Servers are the config names exposed, in listing order; each must
	// satisfy ValidServerName (ErrServerName), at most MaxServers.
	Servers []string
	// Prefixes maps a server to the prefix of its tool and prompt names
	// (runtime.ValidPrefix); a server absent
	// from it is exposed under DefaultPrefix and its resources under
	// leaseledger://<server>/ (URIScheme). The prefix "" exposes the
	// server's own tool names, prompt names and resource URIs unchanged;
	// names that then collide between servers are left out of listings
	// and refused (CodeNameCollision).
	Prefixes map[string]string
	// Tokens, when set, are required on every request (401 otherwise).
	// Nil: no bearer tokens, and requests arriving on a non-loopback local
	// address are refused (403).
	Tokens *Tokens
	// AllowedOrigins are Origin header values accepted (scheme://host[:port]),
	// besides requests without an Origin header and, on a loopback
	// listener, loopback origins. Any other Origin is refused (403).
	AllowedOrigins []string
	// MaxSessions and MaxSessionsPerToken cap live sessions; the Default…
	// constants when zero.
	MaxSessions, MaxSessionsPerToken int
	// SessionIdleTimeout ends idle sessions; DefaultSessionIdleTimeout
	// when zero.
	SessionIdleTimeout time.Duration
	// BodyReadTimeout bounds reading one POST body (408 beyond it);
	// DefaultBodyReadTimeout when zero.
	BodyReadTimeout time.Duration
	// RequestBudget is the budget of each resource request handle;
	// runtime.DefaultRequestBudget when zero, at most
	// runtime.MaxRequestBudget.
	RequestBudget time.Duration
	// Policy decides what each session's principal may do (docs/policy.md):
	// the runtime enforces and records it at its gates, and the gateway
	// lists only what a session may use. Swap its set to reload. Nil:
	// everything is allowed to any valid principal, nothing decided or
	// recorded per action (serve records that default as
	// policy.loaded{allow_all}).
	Policy *policy.Engine
	// Logger receives the gateway's own records (session ids, server
	// names, static error text); discarded when nil.
	Logger *slog.Logger
}

// SessionInfo describes one live MCP session.
type SessionInfo struct {
	// ID is the MCP session id, also the runtime session id.
	ID string
	// Principal is the name of the token that opened it ("" without tokens).
	Principal string
	Opened    time.Time
}

// Gateway is the Streamable HTTP MCP endpoint over one runtime.Manager.
// It is safe for concurrent use.
type Gateway struct {
	opts    Options
	list    atomic.Pointer[serverList]
	origins []string
	srv     *mcp.Server
	handler http.Handler
	unsub   func()

	mu       sync.Mutex
	sessions map[string]*session
	slots    map[string]int // sessions and reservations per principal
	total    int
	closed   bool
	// ending holds the ends in progress, so Close waits for them.
	wg sync.WaitGroup
}

// New validates opts and returns a gateway. It starts no goroutine: each
// session has its own, ended with it.
func New(opts Options) (*Gateway, error) {
	bad := func(kind error, server string) error { return &Error{Op: "new", Server: server, Err: kind} }
	switch {
	case opts.Manager == nil, len(opts.Servers) > MaxServers,
		opts.MaxSessions < 0, opts.MaxSessionsPerToken < 0, opts.SessionIdleTimeout < 0, opts.BodyReadTimeout < 0,
		opts.RequestBudget < 0, opts.RequestBudget > runtime.MaxRequestBudget:
		return nil, bad(ErrInvalidOptions, "")
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxSessionsPerToken == 0 {
		opts.MaxSessionsPerToken = DefaultMaxSessionsPerToken
	}
	if opts.SessionIdleTimeout == 0 {
		opts.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	if opts.RequestBudget == 0 {
		opts.RequestBudget = runtime.DefaultRequestBudget
	}
	if opts.BodyReadTimeout == 0 {
		opts.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{opts: opts, sessions: map[string]*session{}, slots: map[string]int{}}
	list, err := newServerList(opts.Servers, opts.Prefixes, 0)
	if err != nil {
		return nil, &Error{Op: "new", Server: err.server, Err: ErrServerName}
	}
	g.list.Store(list)
	for _, o := range opts.AllowedOrigins {
		n, ok := normalizeOrigin(o)
		if !ok {
			return nil, bad(ErrInvalidOptions, "")
		}
		g.origins = append(g.origins, n)
	}
	g.srv = mcp.NewServer(&mcp.Implementation{Name: "leaseledger", Version: "0.1.0"}, &mcp.ServerOptions{
		// All of MCP's server features: each session's servers' list
		// changes are forwarded (a session's listing stays pinned until it
		// lists again), resource subscriptions and the log level are
		// routed to the servers.
		Capabilities: &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{ListChanged: true},
			Resources:   &mcp.ResourceCapabilities{Subscribe: true, ListChanged: true},
			Prompts:     &mcp.PromptCapabilities{ListChanged: true},
			Completions: &mcp.CompletionCapabilities{},
			Logging:     &mcp.LoggingCapabilities{},
		},
		GetSessionID: newSessionID,
		// Only protocol versions that have sessions: each MCP session is
		// a runtime session.
		SupportedProtocolVersions: sessionVersions(),
	})
	g.srv.AddReceivingMiddleware(g.middleware)
	g.srv.AddSendingMiddleware(sendingMiddleware)
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.srv },
		&mcp.StreamableHTTPOptions{MaxRequestBodyBytes: MaxRequestBodyBytes})
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serveSession(w, r, inner) })
	if opts.Tokens != nil {
		h = auth.RequireBearerToken(g.verifyToken, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
		g.unsub = opts.Tokens.subscribe(g.tokensReloaded)
	}
	g.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := &answerWriter{ResponseWriter: w}
		defer a.finish()
		g.serveAccess(a, r, h)
	})
	return g, nil
}

// newSessionID returns SessionIDPrefix and a ULID whose 80 bits of
// entropy come from crypto/rand for every id: a session id is a bearer
// of the session for whoever holds the token, so it must not be
// guessable from another one (ulid.Make's monotonic entropy increments
// within a millisecond).
func newSessionID() string {
	return SessionIDPrefix + ulid.MustNew(ulid.Now(), rand.Reader).String()
}

// sessionVersions returns the go-sdk's protocol versions that have
// sessions (before the sessionless 2026-07-28), newest first.
func sessionVersions() []string {
	return slices.DeleteFunc(mcp.SupportedProtocolVersions(), func(v string) bool { return v >= "2026-07-28" })
}

// normalizeOrigin returns an origin as browsers send it (lowercase
// scheme and host, no path), and whether o is one.
func normalizeOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", false
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), true
}

// Handler returns the Streamable HTTP MCP endpoint (serve mounts it at /mcp).
func (g *Gateway) Handler() http.Handler { return g.handler }

// Servers returns the exposed server names, in listing order.
func (g *Gateway) Servers() []string { return slices.Clone(g.list.Load().names) }

// serverList is the servers a gateway offers, in listing order. SetServers
// replaces it whole and never changes one in place, so each request reads
// one consistent list.
type serverList struct {
	names []string
	set   map[string]bool
	// prefix is every server's effective name prefix; bare the servers
	// whose resources keep their own URIs (prefix "").
	prefix map[string]string
	bare   map[string]bool
	// gen counts the lists before this one: list cursors carry it, so a
	// cursor issued under another list is refused rather than resumed at
	// another server.
	gen uint64
}

// serverNameError names the server that broke the rules ("" when the
// name itself is not shown: it is not a valid name).
type serverNameError struct{ server string }

// newServerList validates names (ValidServerName, no duplicates, at most
// MaxServers) and prefixes (runtime.ValidPrefix, only of listed servers).
func newServerList(names []string, prefixes map[string]string, gen uint64) (*serverList, *serverNameError) {
	if len(names) > MaxServers {
		return nil, &serverNameError{}
	}
	l := &serverList{set: make(map[string]bool, len(names)), prefix: make(map[string]string, len(names)),
		bare: map[string]bool{}, gen: gen}
	for _, s := range names {
		if !ValidServerName(s) {
			return nil, &serverNameError{}
		}
		if l.set[s] {
			return nil, &serverNameError{server: s}
		}
		l.set[s] = true
		l.names = append(l.names, s)
		l.prefix[s] = DefaultPrefix(s)
	}
	for s, p := range prefixes {
		if !l.set[s] || !runtime.ValidPrefix(p) {
			return nil, &serverNameError{server: s}
		}
		l.prefix[s] = p
		if p == "" {
			l.bare[s] = true
		}
	}
	return l, nil
}

// candidates returns the servers whose prefix starts name, in listing
// order, with name's rest after the prefix.
func (l *serverList) candidates(name string) []string {
	var out []string
	for _, s := range l.names {
		if strings.HasPrefix(name, l.prefix[s]) && len(name) > len(l.prefix[s]) {
			out = append(out, s)
		}
	}
	return out
}

// bareNames returns the servers exposed with the prefix "", in listing
// order.
func (l *serverList) bareNames() []string {
	var out []string
	for _, s := range l.names {
		if l.bare[s] {
			out = append(out, s)
		}
	}
	return out
}

// exposedName is the name server's item (a tool or a prompt) is listed under.
func (l *serverList) exposedName(server, name string) string { return l.prefix[server] + name }

// exposedURI is the URI (or template) server's resource is listed under.
func (l *serverList) exposedURI(server, uri string) string {
	if l.bare[server] {
		return uri
	}
	return ResourceURI(server, uri)
}

// SetServers replaces the servers the gateway offers and their prefixes
// (a configuration reload; see Options.Servers and Options.Prefixes): each
// name must satisfy ValidServerName, without duplicates, at most
// MaxServers, and each prefix runtime.ValidPrefix (ErrServerName; the servers in
// force are kept). New
// servers appear in each session's next listing. A removed server's tools
// and resources are refused from now on as unknown (its pinned tools
// included); its leases are the host's to end (runtime.Manager.
// TerminateServer). List cursors issued before are refused as invalid.
func (g *Gateway) SetServers(names []string, prefixes map[string]string) error {
	for {
		old := g.list.Load()
		list, err := newServerList(names, prefixes, old.gen+1)
		if err != nil {
			return &Error{Op: "set_servers", Server: err.server, Err: ErrServerName}
		}
		if g.list.CompareAndSwap(old, list) {
			return nil
		}
	}
}

// Sessions returns the live sessions, oldest first.
func (g *Gateway) Sessions() []SessionInfo {
	g.mu.Lock()
	out := make([]SessionInfo, 0, len(g.sessions))
	for _, s := range g.sessions {
		out = append(out, SessionInfo{ID: s.id, Principal: s.principal, Opened: s.opened})
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Opened.Before(out[j].Opened) || out[i].Opened.Equal(out[j].Opened) && out[i].ID < out[j].ID
	})
	return out
}

// EndSession ends the MCP session id: its requests in flight are
// cancelled, its request handles settled, the MCP session closed (the
// client's next request gets 404) and its runtime scope released, which
// ends the session's leases (last-owner end). It returns once that is
// done; when ctx ends first it returns ErrEndPending wrapping ctx's
// error (the end goes on). Its error joins what failed to record.
// ErrUnknownSession when no live session has that id, ErrClosed when
// none has and the gateway was closed.
func (g *Gateway) EndSession(ctx context.Context, id string) error {
	g.mu.Lock()
	s, closed := g.sessions[id], g.closed
	g.mu.Unlock()
	switch {
	case s == nil && closed:
		return &Error{Op: "end_session", Session: id, Err: ErrClosed}
	case s == nil:
		return &Error{Op: "end_session", Session: id, Err: ErrUnknownSession}
	}
	return g.end(ctx, s, endedByHost)
}

// Close refuses new sessions (503), ends every session and waits for
// their ends (ErrEndPending wrapping ctx's error when ctx ends first; the
// ends go on). It is idempotent; the manager stays open. Its error joins
// what of the ends failed to record.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	first := !g.closed
	g.closed = true
	all := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		all = append(all, s)
	}
	g.mu.Unlock()
	if first && g.unsub != nil {
		g.unsub()
	}
	for _, s := range all {
		g.startEnd(s, endedByClose)
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return &Error{Op: "close", Err: ErrEndPending, cause: ctx.Err()}
	}
	var errs []error
	for _, s := range all {
		if s.endErr != nil {
			errs = append(errs, s.endErr)
		}
	}
	return joinErrs(errs)
}
