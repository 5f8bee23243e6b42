package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Remote MCP servers over Streamable HTTP. An entry with "url" has no
// process: its "child" is the HTTP session (httpChild). Every request the
// go-sdk's StreamableClientTransport makes (the POSTs, the GET stream, the
// session DELETE) goes through the manager's one private HTTP boundary
// (httpBoundary): its own http.Transport, never http.DefaultClient or
// http.DefaultTransport, and redirects followed by us (leaseRoundTripper).

// Bounds of the HTTP boundary.
const (
	// MaxRedirectHops is how many 307 hops one request may follow; a
	// further redirect is ErrHTTPTooManyRedirects before any request is
	// sent to it.
	MaxRedirectHops = events.MaxRedirectHops
	// HTTPConnectTimeout bounds dialing one connection (TCP and TLS).
	HTTPConnectTimeout = 10 * time.Second
	// httpMaxIdlePerHost bounds the idle connections the boundary keeps per
	// host (16 concurrent calls reuse their connections).
	httpMaxIdlePerHost = 32
	// httpIdleTimeout closes a pooled connection idle this long.
	httpIdleTimeout = 90 * time.Second
	// maxRedirectDrainBytes bounds what of a redirect response's body is
	// read so its connection can be reused; beyond it the connection is
	// closed instead.
	maxRedirectDrainBytes = 64 << 10
)

// Errors of the HTTP boundary. Their text is static; a failed request's
// error matches one of them with errors.Is.
var (
	// ErrHTTPRedirect: a redirect other than 307 (301, 302, 303, 308, …).
	// 308 is refused too: it is permanent, and following it silently would
	// make every later request depend on an answer that rewrote the
	// configured endpoint, whose URL is pinned by the fingerprint.
	ErrHTTPRedirect = errors.New("runtime: http redirect status refused (only 307 is followed)")
	// ErrHTTPTooManyRedirects: a request was redirected more than
	// MaxRedirectHops times (a loop included).
	ErrHTTPTooManyRedirects = errors.New("runtime: http redirect hops exceed MaxRedirectHops")
	// ErrHTTPCrossOrigin: a redirect pointed to another origin (scheme,
	// host, port) than the configured URL's.
	ErrHTTPCrossOrigin = errors.New("runtime: http redirect to another origin refused")
	// ErrHTTPBadLocation: a redirect had no usable Location (missing,
	// malformed, not http(s)).
	ErrHTTPBadLocation = errors.New("runtime: http redirect location invalid")
	// ErrHTTPBodyNotReplayable: a redirected request's body cannot be sent
	// again (no GetBody).
	ErrHTTPBodyNotReplayable = errors.New("runtime: http request body cannot be replayed on redirect")
	// ErrHTTPDetached: the request was aborted because its lease's
	// connection was closed.
	ErrHTTPDetached = errors.New("runtime: http request aborted by connection close")
)

// errEndpoint is why a configured url is refused (config errors keep it as
// their cause; it is our own text).
var errEndpoint = errors.New("has a url that is not an absolute http(s) URL with a host")

// checkEndpoint parses a configured url: absolute, http or https, a host,
// no user info (credentials go in headers, where the origin rule guards
// them) and no fragment.
func checkEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil, errEndpoint
	}
	return u, nil
}

// origin is a URL's origin as recorded (scheme://host[:port], lowercase).
func origin(u *url.URL) string {
	return u.Scheme + "://" + u.Host
}

// sameOrigin compares scheme, host and port (an explicit default port is
// the same origin as none).
func sameOrigin(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && hostPort(a) == hostPort(b)
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// httpBoundary is the manager's one private HTTP client: built in one
// place (newHTTPBoundary) with its own transport and pool, used for every
// HTTP request of every HTTP lease. Each lease's go-sdk transport gets a
// client value that routes through this transport with the lease's
// redirect and header policy (clientFor); the pool stays this one.
type httpBoundary struct {
	transport *http.Transport
	client    *http.Client
}

func newHTTPBoundary() *httpBoundary {
	d := &net.Dialer{Timeout: HTTPConnectTimeout, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:               nil, // no environment proxy: requests go where the config says
		DialContext:         d.DialContext,
		TLSHandshakeTimeout: HTTPConnectTimeout,
		MaxIdleConnsPerHost: httpMaxIdlePerHost,
		IdleConnTimeout:     httpIdleTimeout,
		ForceAttemptHTTP2:   true,
	}
	return &httpBoundary{transport: t, client: &http.Client{Transport: t, CheckRedirect: refuseRedirect}}
}

// refuseRedirect keeps net/http from following any redirect: ours are
// followed by leaseRoundTripper, which checks them first.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// close drops the boundary's idle connections (Manager.Close).
func (b *httpBoundary) close() { b.transport.CloseIdleConnections() }

// clientFor returns the client a lease's go-sdk transport uses: the
// boundary's client with the lease's round tripper in front of the
// boundary's transport.
func (b *httpBoundary) clientFor(rt *leaseRoundTripper) *http.Client {
	c := *b.client
	c.Transport = rt
	return &c
}

// leaseRoundTripper is one HTTP lease's policy over the boundary's
// transport: configured headers only to the configured origin, redirects
// (307 only, at most MaxRedirectHops, same origin) followed here, and every
// request aborted when the connection is detached.
type leaseRoundTripper struct {
	base     http.RoundTripper
	endpoint *url.URL
	headers  map[string]string

	mu sync.Mutex
	// abort is the context whose cancellation aborts the requests started
	// under it (detach swaps it, so later requests — the session DELETE —
	// still run).
	abort       context.Context
	abortCancel context.CancelFunc
}

func newLeaseRoundTripper(base http.RoundTripper, endpoint *url.URL, headers map[string]string) *leaseRoundTripper {
	rt := &leaseRoundTripper{base: base, endpoint: endpoint, headers: headers}
	ctx, cancel := context.WithCancelCause(context.Background())
	rt.abort, rt.abortCancel = ctx, func() { cancel(ErrHTTPDetached) }
	return rt
}

// detach aborts every request in flight now; requests started later run.
// final: later requests are aborted too (the connection is closed).
func (rt *leaseRoundTripper) detach(final bool) {
	rt.mu.Lock()
	cancel := rt.abortCancel
	if !final {
		ctx, c := context.WithCancelCause(context.Background())
		rt.abort, rt.abortCancel = ctx, func() { c(ErrHTTPDetached) }
	}
	rt.mu.Unlock()
	cancel()
}

// RoundTrip implements http.RoundTripper. It sends req (with the
// configured headers when its URL is the configured origin) and follows
// 307 redirects itself: the Location resolved against the current URL,
// the same method and body, at most MaxRedirectHops hops, never to another
// origin. Any other redirect status, a fourth hop, a bad Location or
// another origin is a typed error returned before any further request.
func (rt *leaseRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	abort := rt.abort
	rt.mu.Unlock()
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(abort, func() { cancel(ErrHTTPDetached) })
	release := func() { stop(); cancel(nil) }

	cur := req.URL
	for hop := 0; ; hop++ {
		out := req.Clone(ctx)
		out.URL, out.Host = cur, ""
		if hop > 0 {
			if req.Body != nil && req.Body != http.NoBody {
				body, err := req.GetBody()
				if err != nil {
					release()
					return nil, ErrHTTPBodyNotReplayable
				}
				out.Body = body
			}
		}
		if sameOrigin(cur, rt.endpoint) {
			for k, v := range rt.headers {
				out.Header.Set(k, v)
			}
		}
		resp, err := rt.base.RoundTrip(out)
		if err != nil {
			release()
			if c := context.Cause(ctx); errors.Is(c, ErrHTTPDetached) {
				return nil, ErrHTTPDetached
			}
			return nil, err
		}
		if resp.StatusCode < 300 || resp.StatusCode > 399 {
			resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
			return resp, nil
		}
		loc := resp.Header.Get("Location")
		drain(resp.Body)
		if resp.StatusCode != http.StatusTemporaryRedirect {
			release()
			return nil, ErrHTTPRedirect
		}
		if hop+1 > MaxRedirectHops {
			release()
			return nil, ErrHTTPTooManyRedirects
		}
		next, err := cur.Parse(loc)
		if loc == "" || err != nil || (next.Scheme != "http" && next.Scheme != "https") || next.Host == "" {
			release()
			return nil, ErrHTTPBadLocation
		}
		if !sameOrigin(next, rt.endpoint) {
			release()
			return nil, ErrHTTPCrossOrigin
		}
		if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			release()
			return nil, ErrHTTPBodyNotReplayable
		}
		cur = next
	}
}

// drain reads what is left of a redirect's body (bounded) and closes it.
func drain(b io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(b, maxRedirectDrainBytes))
	_ = b.Close()
}

// releasingBody releases the request's abort hook when the body is closed.
type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// httpChild is the "child" of an HTTP lease: the remote MCP session. It
// has no process and no guardian. Its stream is a detach handle only (the
// MCP messages travel through the go-sdk's StreamableClientTransport over
// the manager's boundary); closing it aborts the requests in flight.
type httpChild struct {
	rt     *leaseRoundTripper
	client *http.Client
	url    string

	doneOnce sync.Once
	doneCh   chan struct{}
}

// launchHTTP builds the HTTP child of a lease; nothing is sent until the
// MCP initialize.
func (m *Manager) launchHTTP(cfg ServerConfig) (*httpChild, error) {
	u, err := checkEndpoint(cfg.URL)
	if err != nil {
		return nil, err
	}
	headers := make(map[string]string, len(cfg.Headers))
	for k, v := range cfg.Headers {
		headers[k] = v
	}
	rt := newLeaseRoundTripper(m.httpBoundary().transport, u, headers)
	return &httpChild{rt: rt, client: m.httpBoundary().clientFor(rt), url: u.String(), doneCh: make(chan struct{})}, nil
}

// transport is the go-sdk transport of the child's MCP session.
func (h *httpChild) transport() mcp.Transport {
	return &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: h.client}
}

func (h *httpChild) stream() io.ReadWriteCloser { return httpDetach{h} }
func (h *httpChild) done() <-chan struct{}      { return h.doneCh }
func (h *httpChild) facts() childFacts          { return childFacts{} }

// close ends the child: every request still in flight (and any later one)
// is aborted. There is no process, so there is no guardian result.
func (h *httpChild) close(context.Context) guardian.CleanupResult {
	h.rt.detach(true)
	h.doneOnce.Do(func() { close(h.doneCh) })
	return guardian.CleanupResult{}
}

// httpDetach is an HTTP child's stream: no bytes travel through it; Close
// aborts the requests in flight (later ones, like the session DELETE, run).
type httpDetach struct{ h *httpChild }

func (d httpDetach) Read([]byte) (int, error)  { return 0, io.ErrClosedPipe }
func (d httpDetach) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
func (d httpDetach) Close() error              { d.h.rt.detach(false); return nil }

// httpBoundary returns the manager's HTTP boundary, built on first use.
func (m *Manager) httpBoundary() *httpBoundary {
	m.httpOnce.Do(func() { m.http = newHTTPBoundary() })
	return m.http
}

// closeHTTP drops the boundary's idle connections, if it was built.
func (m *Manager) closeHTTP() {
	m.httpOnce.Do(func() {})
	if m.http != nil {
		m.http.close()
	}
}

// observedTransport wraps an HTTP lease's go-sdk transport so its
// connection is observed like a stdio one (wire counts, request handles).
type observedTransport struct {
	inner mcp.Transport
	wire  *wireStats
	reqs  *reqTable
}

// Connect implements mcp.Transport.
func (t *observedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &observedConn{Connection: c, wire: t.wire, reqs: t.reqs}, nil
}
