package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Remote MCP servers over Streamable HTTP. An entry with "url" has no
// process: its "child" is the HTTP session (httpChild). Every request the
// go-sdk's StreamableClientTransport makes (the POSTs, a GET resuming a
// call's event stream, the session DELETE) goes through the manager's one private HTTP boundary
// (httpBoundary): its own http.Transport, never http.DefaultClient or
// http.DefaultTransport, and redirects followed by us (leaseRoundTripper).

// Bounds of the HTTP boundary.
const (
	// MaxRedirectHops is how many 307 hops one request may follow; a
	// further redirect is ErrHTTPTooManyRedirects before any request is
	// sent to it.
	MaxRedirectHops = events.MaxRedirectHops
	// httpMaxIdlePerHost is the least bound on the idle connections the
	// boundary keeps per host (16 concurrent calls reuse their
	// connections); a manager raises it to its lease bound (keepIdle).
	httpMaxIdlePerHost = 32
	// httpIdleTimeout closes a pooled connection idle this long.
	httpIdleTimeout = 90 * time.Second
	// MaxHTTPResponseBytes bounds one POST or DELETE response body (an MCP
	// response stream): beyond it the request is aborted with
	// ErrHTTPResponseTooLarge. The GET stream is bounded per event instead
	// (MaxMessageBytes, go-sdk's MaxEventSize): it is long-lived.
	MaxHTTPResponseBytes = 2 * MaxMessageBytes
	// maxRedirectDrainBytes bounds what of a followed redirect's body is
	// read so its connection can be reused; beyond it (or past the receive
	// timeout) the connection is closed instead. A refused redirect's
	// body is not read at all.
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
	// host, port) than the configured URL's, and not to one of the entry's
	// allowRedirectOrigins.
	ErrHTTPCrossOrigin = errors.New("runtime: http redirect to another origin refused")
	// ErrHTTPOtherOrigin: a request (not a hop) was addressed to another
	// origin than the configured URL's and not to one of the entry's
	// allowRedirectOrigins — a legacy SSE server's message endpoint
	// elsewhere. It is refused before anything is sent.
	ErrHTTPOtherOrigin = errors.New("runtime: http request to another origin than the configured url's refused")
	// ErrHTTPBadLocation: a redirect had no usable Location (missing,
	// malformed, not http(s)).
	ErrHTTPBadLocation = errors.New("runtime: http redirect location invalid")
	// ErrHTTPBodyNotReplayable: a redirected request's body cannot be sent
	// again (no GetBody).
	ErrHTTPBodyNotReplayable = errors.New("runtime: http request body cannot be replayed on redirect")
	// ErrHTTPDetached: the request was aborted (or refused before anything
	// was registered or sent) because its lease is ending: its owner was
	// lost (session end, revocation, reaping, poisoning, TerminateAll, a
	// lost remote session) or its connection closed.
	ErrHTTPDetached = errors.New("runtime: http request aborted: its lease is ending")
	// ErrHTTPConnectTimeout: dialing (TCP and TLS) took longer than the
	// connect timeout.
	ErrHTTPConnectTimeout = errors.New("runtime: http connect timeout")
	// ErrHTTPReceiveTimeout: no response (first byte) or, for POST and
	// DELETE, no body bytes within the receive timeout.
	ErrHTTPReceiveTimeout = errors.New("runtime: http receive timeout")
	// ErrHTTPRequestTimeout: a POST or DELETE outlived the whole-request
	// timeout (registration to body close).
	ErrHTTPRequestTimeout = errors.New("runtime: http request timeout")
	// ErrHTTPNotRecorded: the request's registration could not be
	// recorded (or its method is not recordable); nothing was sent.
	ErrHTTPNotRecorded = errors.New("runtime: http request not registered; nothing sent")
	// ErrHTTPResponseTooLarge: a POST or DELETE response body exceeded
	// MaxHTTPResponseBytes; the request was aborted.
	ErrHTTPResponseTooLarge = errors.New("runtime: http response exceeds MaxHTTPResponseBytes")
)

// Default timeouts of HTTP requests (Options.HTTPConnectTimeout,
// HTTPReceiveTimeout, HTTPRequestTimeout when zero). Each is bounded by the
// enclosing deadline (the call's or the acquisition's context).
const (
	// DefaultHTTPConnectTimeout bounds dialing one connection (TCP and TLS).
	DefaultHTTPConnectTimeout = 10 * time.Second
	// DefaultHTTPReceiveTimeout bounds the wait for a response's first byte
	// (its headers), counted from when the request has been written (the
	// dial before it is the connect timeout's), and, for POST and DELETE, the gap between two reads of
	// its body. The standalone GET stream has no gap bound: an idle SSE
	// stream is legitimate (go-sdk reconnects it).
	DefaultHTTPReceiveTimeout = 2 * time.Minute
	// DefaultHTTPRequestTimeout bounds a POST or DELETE from its
	// registration to its body's close (not the GET stream).
	DefaultHTTPRequestTimeout = 10 * time.Minute
)

// httpTimeouts are one boundary's three timeouts.
type httpTimeouts struct{ connect, receive, request time.Duration }

// httpBoundary is the manager's one private HTTP client: built in one
// place (newHTTPBoundary) with its own transport and pool, used for every
// HTTP request of every HTTP lease. Each lease's go-sdk transport gets a
// client value that routes through this transport with the lease's
// redirect, header, timeout and evidence policy (clientFor); the pool
// stays this one.
type httpBoundary struct {
	transport *http.Transport
	client    *http.Client
	timeouts  httpTimeouts
	// dial opens one connection; tests replace it before first use.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newHTTPBoundary(to httpTimeouts) *httpBoundary {
	b := &httpBoundary{timeouts: to}
	b.dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	t := &http.Transport{
		Proxy:               nil, // no environment proxy: requests go where the config says
		DialContext:         b.dialContext,
		TLSHandshakeTimeout: to.connect,
		MaxIdleConnsPerHost: httpMaxIdlePerHost,
		IdleConnTimeout:     httpIdleTimeout,
		ForceAttemptHTTP2:   true,
	}
	b.transport = t
	b.client = &http.Client{Transport: t, CheckRedirect: refuseRedirect}
	return b
}

// dialContext dials under the connect timeout; its firing is
// ErrHTTPConnectTimeout.
func (b *httpBoundary) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, b.timeouts.connect, ErrHTTPConnectTimeout)
	defer cancel()
	c, err := b.dial(ctx, network, addr)
	if err != nil && errors.Is(context.Cause(ctx), ErrHTTPConnectTimeout) {
		return nil, ErrHTTPConnectTimeout
	}
	return c, err
}

// keepIdle raises the idle connections kept per host to n (at least
// httpMaxIdlePerHost), before the boundary's first request: a manager of
// n live leases, each with a call in flight to one upstream, then finds
// every call's connection in the pool for the next call instead of
// dialing, say, 32 of 64 again.
func (b *httpBoundary) keepIdle(n int) {
	b.transport.MaxIdleConnsPerHost = max(httpMaxIdlePerHost, n)
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
// (307 only, at most MaxRedirectHops, to the configured origin or one the
// entry allows) followed here, the three timeouts, every request recorded
// (ev, when set) and aborted when the lease ends, and the remote session's
// loss reported (lost, when set).
type leaseRoundTripper struct {
	base     http.RoundTripper
	endpoint *url.URL
	headers  map[string]string
	// allowed are the entry's allowRedirectOrigins: origins a 307 hop may
	// go to besides the configured one (never with the configured headers).
	allowed []*url.URL
	// ownOrigins: a request (not only a hop) must be addressed to the
	// configured origin or an allowed one (ErrHTTPOtherOrigin): set for a
	// legacy SSE lease, whose server names the URL its messages go to.
	ownOrigins bool
	to         httpTimeouts
	ev         *httpEvidence // nil: nothing recorded (boundary tests)
	// lost is told when a response proves the remote session or endpoint
	// gone (see lostSignal); nil in boundary tests.
	lost func(reason string)

	mu sync.Mutex
	// abort is the context whose cancellation aborts the requests started
	// under it (detach swaps it, so later requests — the session DELETE —
	// still run).
	abort       context.Context
	abortCancel context.CancelFunc
	// probe is the loss probe in flight (see probeLost), nil when none.
	probe *lossProbe
}

func newLeaseRoundTripper(b *httpBoundary, endpoint *url.URL, headers map[string]string, ev *httpEvidence) *leaseRoundTripper {
	rt := &leaseRoundTripper{base: b.transport, endpoint: endpoint, headers: headers, to: b.timeouts, ev: ev}
	ctx, cancel := context.WithCancelCause(context.Background())
	rt.abort, rt.abortCancel = ctx, func() { cancel(ErrHTTPDetached) }
	return rt
}

// detach cancels every request in flight now, at once (the backstop
// behind the cleanup worker's abort); requests started later run.
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

// hopAllowed reports whether a redirect may go to u: the configured
// origin, or one of the entry's allowRedirectOrigins.
func (rt *leaseRoundTripper) hopAllowed(u *url.URL) bool {
	if sameOrigin(u, rt.endpoint) {
		return true
	}
	for _, a := range rt.allowed {
		if sameOrigin(u, a) {
			return true
		}
	}
	return false
}

// typedErr returns the boundary's own error for a failure: the cause the
// request's context was cancelled with (a timeout, the detach), the
// connect timeout, else err.
func typedErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil && c != context.Canceled && c != context.DeadlineExceeded {
			for _, e := range boundaryErrs {
				if errors.Is(c, e) {
					return e
				}
			}
		}
	}
	for _, e := range boundaryErrs {
		if errors.Is(err, e) {
			return e
		}
	}
	return err
}

var boundaryErrs = []error{ErrHTTPConnectTimeout, ErrHTTPReceiveTimeout, ErrHTTPRequestTimeout, ErrHTTPDetached,
	ErrHTTPRedirect, ErrHTTPTooManyRedirects, ErrHTTPCrossOrigin, ErrHTTPOtherOrigin, ErrHTTPBadLocation, ErrHTTPBodyNotReplayable, ErrHTTPNotRecorded, ErrHTTPResponseTooLarge}

// outcomeOf is how a failed request is recorded.
func outcomeOf(ctx context.Context, err error) (events.HTTPOutcome, string) {
	switch {
	case errors.Is(err, ErrHTTPConnectTimeout):
		return events.HTTPTimeout, "connect_timeout"
	case errors.Is(err, ErrHTTPReceiveTimeout):
		return events.HTTPTimeout, "receive_timeout"
	case errors.Is(err, ErrHTTPRequestTimeout):
		return events.HTTPTimeout, "request_timeout"
	case errors.Is(err, ErrHTTPDetached):
		return events.HTTPAborted, "aborted"
	case errors.Is(err, ErrHTTPRedirect):
		return events.HTTPError, "redirect_refused"
	case errors.Is(err, ErrHTTPTooManyRedirects):
		return events.HTTPError, "too_many_redirects"
	case errors.Is(err, ErrHTTPCrossOrigin), errors.Is(err, ErrHTTPOtherOrigin):
		return events.HTTPError, "cross_origin"
	case errors.Is(err, ErrHTTPBadLocation):
		return events.HTTPError, "bad_location"
	case errors.Is(err, ErrHTTPResponseTooLarge):
		return events.HTTPError, "response_too_large"
	case errors.Is(err, ErrHTTPBodyNotReplayable):
		return events.HTTPError, "body_not_replayable"
	case ctx.Err() != nil:
		return events.HTTPAborted, "cancelled"
	}
	return events.HTTPError, "transport_error"
}

// RoundTrip implements http.RoundTripper. It registers the request
// durably (http.registered) before anything is sent, then sends it (with
// the configured headers when its URL is the configured origin) and
// follows 307 redirects itself: each hop recorded (http.redirect) before
// the next request, the Location resolved against the current URL, the
// same method and body, at most MaxRedirectHops hops, only to the
// configured origin or one of the entry's allowRedirectOrigins. Any other
// redirect status, a fourth hop, a bad Location or another origin is a
// typed error returned before any further request. The completion,
// barrier and worker end are handed to the activation's cleanup worker
// when the body is closed, or when the request fails.
func (rt *leaseRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	abort := rt.abort
	rt.mu.Unlock()
	method, scope := methodOf(req.Method)
	stream := scope == scopeStream
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(abort, func() { cancel(ErrHTTPDetached) })
	var whole *time.Timer
	if !stream && rt.to.request > 0 {
		whole = time.AfterFunc(rt.to.request, func() { cancel(ErrHTTPRequestTimeout) })
	}
	release := func() {
		stop()
		if whole != nil {
			whole.Stop()
		}
		cancel(nil)
	}
	var r *httpReq
	if rt.ev != nil {
		if method == "" {
			release()
			return nil, ErrHTTPNotRecorded
		}
		var err error
		if r, err = rt.ev.register(ctx, method, scope, origin(rt.endpoint), cancel); err != nil {
			release()
			return nil, err
		}
	}
	cur := req.URL
	fail := func(err error, status int) (*http.Response, error) {
		err = typedErr(ctx, err)
		noteHTTPCause(ctx, err)
		noteRequestFailure(ctx, cur, err)
		outcome, detail := outcomeOf(ctx, err)
		release()
		if r != nil {
			rt.ev.settle(r, status, outcome, 0, detail)
		}
		return nil, err
	}
	if rt.ownOrigins && !rt.hopAllowed(cur) {
		return fail(ErrHTTPOtherOrigin, 0)
	}

	for hop := 0; ; hop++ {
		// Each hop has its own context, so a followed hop's body can be
		// abandoned (drainHop) without failing the request.
		hctx, hcancel := context.WithCancelCause(ctx)
		out := req.Clone(hctx)
		out.URL, out.Host = cur, ""
		if hop > 0 && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				hcancel(nil)
				return fail(ErrHTTPBodyNotReplayable, 0)
			}
			out.Body = body
		}
		if sameOrigin(cur, rt.endpoint) {
			for k, v := range rt.headers {
				out.Header.Set(k, v)
			}
		}
		var first firstByteTimer
		if rt.to.receive > 0 {
			// The first-byte wait starts when the request is written, not
			// before: the dial is the connect timeout's (a slow dial is
			// connect_timeout, never receive_timeout).
			first.arm(rt.to.receive, func() { cancel(ErrHTTPReceiveTimeout) })
			out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
				WroteRequest: func(httptrace.WroteRequestInfo) { first.start() },
			}))
		}
		resp, err := rt.base.RoundTrip(out)
		first.stop()
		rt.checkLost(req.Context(), cur, out, resp, err)
		if err != nil {
			hcancel(nil)
			return fail(err, 0)
		}
		if resp.StatusCode < 300 || resp.StatusCode > 399 {
			if resp.StatusCode >= 400 && resp.StatusCode <= 599 {
				noteFailure(ctx, failureInfo{cause: events.CauseHTTPStatus, target: targetOf(cur), httpStatus: resp.StatusCode})
			}
			done := func() { release(); hcancel(nil) }
			tb := &trackedBody{rc: resp.Body, rt: rt, ctx: ctx, cancel: cancel, req: r, status: resp.StatusCode, release: done, url: cur}
			if !stream {
				tb.limit = MaxHTTPResponseBytes
				if rt.to.receive > 0 {
					tb.gap = time.AfterFunc(rt.to.receive, func() { cancel(ErrHTTPReceiveTimeout) })
				}
			}
			resp.Body = tb
			if r != nil {
				rt.ev.attach(r, tb)
			}
			return resp, nil
		}
		// A refused redirect's body is closed unread (its connection is
		// dropped): the refusal never waits on it.
		refuse := func(err error) (*http.Response, error) {
			_ = resp.Body.Close()
			hcancel(nil)
			return fail(err, resp.StatusCode)
		}
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusTemporaryRedirect {
			return refuse(ErrHTTPRedirect)
		}
		if hop+1 > MaxRedirectHops {
			return refuse(ErrHTTPTooManyRedirects)
		}
		next, err := cur.Parse(loc)
		if loc == "" || err != nil || (next.Scheme != "http" && next.Scheme != "https") || next.Host == "" {
			return refuse(ErrHTTPBadLocation)
		}
		if !rt.hopAllowed(next) {
			return refuse(ErrHTTPCrossOrigin)
		}
		if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			return refuse(ErrHTTPBodyNotReplayable)
		}
		rt.drainHop(resp.Body, hcancel)
		if r != nil {
			h, err := rt.ev.redirect(ctx, r, hop+1, resp.StatusCode, origin(next), sameOrigin(next, rt.endpoint))
			if err != nil {
				return fail(err, resp.StatusCode)
			}
			rt.ev.settleHop(h) // its body is drained and closed
		}
		cur = next
	}
}

// firstByteTimer is a request's wait for its response's first byte: armed
// before the round trip, started when the transport has written the
// request (httptrace WroteRequest, called on the transport's goroutine —
// again if it retries on a fresh connection, which restarts the wait),
// stopped for good when the round trip returns, after which a late start
// is ignored.
type firstByteTimer struct {
	mu      sync.Mutex
	d       time.Duration
	fire    func()
	t       *time.Timer
	stopped bool
}

func (f *firstByteTimer) arm(d time.Duration, fire func()) { f.d, f.fire = d, fire }

func (f *firstByteTimer) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.stopped || f.fire == nil:
	case f.t == nil:
		f.t = time.AfterFunc(f.d, f.fire)
	default:
		f.t.Reset(f.d)
	}
}

func (f *firstByteTimer) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.t != nil {
		f.t.Stop()
	}
}

// trackedBody is a response body under the lease's evidence: reads reset
// the receive (gap) timer; Close releases the request and hands its
// completion to the cleanup worker. The worker's abort may close it while
// the go-sdk reads it (the request's context is cancelled first, so the
// read returns).
type trackedBody struct {
	rc      io.ReadCloser
	rt      *leaseRoundTripper
	ctx     context.Context
	req     *httpReq // nil when nothing is recorded
	status  int
	url     *url.URL // the request's (its hop's) URL, for noteRequestFailure
	release func()
	gap     *time.Timer // nil for the GET stream
	limit   int64       // 0 for the GET stream
	cancel  context.CancelCauseFunc

	n       atomic.Int64
	mu      sync.Mutex
	readErr error
	eof     bool
	closed  bool // the gap timer is stopped for good
	once    sync.Once
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		if total := b.n.Add(int64(n)); b.limit > 0 && total > b.limit {
			b.cancel(ErrHTTPResponseTooLarge)
			n, err = 0, ErrHTTPResponseTooLarge
		}
		if b.gap != nil {
			b.mu.Lock()
			if !b.closed {
				b.gap.Reset(b.rt.to.receive)
			}
			b.mu.Unlock()
		}
	}
	if err != nil {
		b.mu.Lock()
		if err == io.EOF {
			b.eof = true
		} else {
			err = typedErr(b.ctx, err)
			noteHTTPCause(b.ctx, err)
			noteRequestFailure(b.ctx, b.url, err)
			if b.readErr == nil {
				b.readErr = err
			}
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *trackedBody) Close() error {
	err := b.rc.Close()
	b.once.Do(func() {
		b.mu.Lock()
		b.closed = true
		readErr, eof := b.readErr, b.eof
		b.mu.Unlock()
		if b.gap != nil {
			b.gap.Stop()
		}
		outcome, detail := events.HTTPOK, ""
		switch {
		case readErr != nil:
			outcome, detail = outcomeOf(b.ctx, readErr)
		case !eof && b.ctx.Err() != nil:
			outcome, detail = outcomeOf(b.ctx, typedErr(b.ctx, b.ctx.Err()))
		}
		b.release()
		if b.req != nil {
			b.rt.ev.settle(b.req, b.status, outcome, b.n.Load(), detail)
		}
	})
	return err
}

// drainHop reads what is left of a followed redirect's body so its
// connection can be reused — at most maxRedirectDrainBytes, for at most
// the receive timeout (cancelling the hop's own context, not the
// request's) — and closes it. A body past either bound costs only its
// connection: the hop is still followed.
func (rt *leaseRoundTripper) drainHop(b io.ReadCloser, hcancel context.CancelCauseFunc) {
	var t *time.Timer
	if rt.to.receive > 0 {
		t = time.AfterFunc(rt.to.receive, func() { hcancel(ErrHTTPReceiveTimeout) })
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(b, maxRedirectDrainBytes))
	if t != nil {
		t.Stop()
	}
	_ = b.Close()
	hcancel(nil)
}
