package runtime

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/guardian"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpChild is the "child" of an HTTP lease: the remote MCP session. It
// has no process and no guardian. Its stream is a detach handle only (the
// MCP messages travel through the go-sdk's StreamableClientTransport over
// the manager's boundary).
//
// Like a stdio child that exits, the remote session can be lost: a dial
// refused, a 404 for the session id, or the go-sdk's connection failing
// for good (its standalone stream could not be resumed, a malformed
// stream) — see lostSignal and httpConn. Then done() is closed, so the
// gate and the acquisition treat the lease as a child that exited
// (child_exited) and the next acquisition starts a new session.
type httpChild struct {
	rt     *leaseRoundTripper
	ev     *httpEvidence
	client *http.Client
	url    string
	// sse: the entry's server speaks the legacy HTTP+SSE transport
	// ("type": "sse"), not Streamable HTTP.
	sse bool

	doneOnce sync.Once
	doneCh   chan struct{}
	lostMu   sync.Mutex
	lostWhy  string // the first loss signal; empty while the session is live

	// readStop ends the session's reads (breakReads): the go-sdk then
	// retires every call still waiting for a response.
	readStop   context.Context
	stopReads  context.CancelFunc
	readsEnded sync.Once
}

// launchHTTP builds the HTTP child of a lease and starts its cleanup
// worker; nothing is sent until the MCP initialize.
func (m *Manager) launchHTTP(l *lease) (*httpChild, error) {
	u, err := checkEndpoint(l.cfg.URL)
	if err != nil {
		return nil, err
	}
	allowed, err := checkAllowOrigins(l.cfg.AllowRedirectOrigins)
	if err != nil {
		return nil, err
	}
	headers := make(map[string]string, len(l.cfg.Headers))
	for k, v := range l.cfg.Headers {
		headers[k] = v
	}
	b := m.httpBoundary()
	ev := newHTTPEvidence(m.emitFact, l.draft)
	if _, ok := m.opts.Ledger.(AsyncAppender); ok {
		ev.deferSettled = m.deferFactsWait
		ev.flushSettled = func() { m.flushDeferred(false) }
	}
	rt := newLeaseRoundTripper(b, u, headers, ev)
	rt.allowed = allowed
	rt.ownOrigins = l.cfg.isSSE()
	h := &httpChild{rt: rt, ev: ev, client: b.clientFor(rt), url: u.String(), sse: l.cfg.isSSE(), doneCh: make(chan struct{})}
	h.readStop, h.stopReads = context.WithCancel(context.Background())
	rt.lost = h.markLost
	return h, nil
}

// observed is the go-sdk transport of the child's MCP session, observed
// like a stdio one (wire counts, request handles) and watched for the
// session's loss.
//
// A legacy HTTP+SSE server ("type": "sse") gets go-sdk's
// SSEClientTransport over the same client (the lease's round tripper:
// redirect policy, headers, timeouts, evidence): its GET stream carries
// every server message, each client message is a POST to the endpoint
// the stream announced (refused unless it is the configured origin or an
// allowed one, ErrHTTPOtherOrigin).
func (h *httpChild) observed(wire *wireStats, reqs *reqTable) mcp.Transport {
	// MaxRetries -1: a broken stream is never reconnected in the
	// background (the go-sdk would retry the standalone GET stream with
	// backoff, keeping a dead server's session looking alive meanwhile);
	// it fails the connection at once, which is the remote session's loss
	// (markLost), and the next call replaces the lease.
	var inner mcp.Transport = &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: h.client, MaxEventSize: MaxMessageBytes, MaxRetries: -1}
	if h.sse {
		inner = &mcp.SSEClientTransport{Endpoint: h.url, HTTPClient: h.client, MaxEventSize: MaxMessageBytes}
	}
	return &observedTransport{inner: inner, wire: wire, reqs: reqs, h: h}
}

func (h *httpChild) stream() io.ReadWriteCloser { return httpDetach{h} }
func (h *httpChild) done() <-chan struct{}      { return h.doneCh }
func (h *httpChild) facts() childFacts          { return childFacts{} }

// markLost records the remote session's loss (the first reason is kept)
// and ends the child's session: done() is closed.
func (h *httpChild) markLost(reason string) {
	h.lostMu.Lock()
	if h.lostWhy == "" {
		h.lostWhy = reason
	}
	h.lostMu.Unlock()
	h.doneOnce.Do(func() { close(h.doneCh) })
}

// lost returns why the remote session was lost, or "" while it was not.
func (h *httpChild) lost() string {
	h.lostMu.Lock()
	defer h.lostMu.Unlock()
	return h.lostWhy
}

// abortOwned starts the lease's end: from now on only the session DELETE
// may start, and the requests in flight now — this lease's own, no other
// lease's, and not the shared pool — are queued for the cleanup worker to
// abort one at a time under deadline. retire also ends the session's
// reads, so calls still waiting for a response fail now instead of
// holding the session's close (as closing a stdio child's stream does).
func (h *httpChild) abortOwned(deadline time.Time, retire bool) {
	h.ev.abort(deadline, false)
	if retire {
		h.breakReads()
	}
}

// breakReads ends the session's reads once.
func (h *httpChild) breakReads() { h.readsEnded.Do(h.stopReads) }

// close ends the child: nothing may start any more, every request still
// in flight is cancelled at once (the backstop behind the worker's abort)
// and the session's reads end. There is no process, so there is no
// guardian result.
func (h *httpChild) close(context.Context) guardian.CleanupResult {
	h.ev.abort(time.Now(), true)
	h.rt.detach(true)
	h.breakReads()
	h.doneOnce.Do(func() { close(h.doneCh) })
	return guardian.CleanupResult{}
}

// httpDetach is an HTTP child's stream: no bytes travel through it; Close
// cancels the requests in flight and ends the session's reads (later
// requests, like the session DELETE, run).
type httpDetach struct{ h *httpChild }

func (d httpDetach) Read([]byte) (int, error)  { return 0, io.ErrClosedPipe }
func (d httpDetach) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
func (d httpDetach) Close() error {
	d.h.rt.detach(false)
	d.h.breakReads()
	return nil
}

// httpBoundary returns the manager's HTTP boundary, built on first use.
func (m *Manager) httpBoundary() *httpBoundary {
	m.httpOnce.Do(func() {
		to := httpTimeouts{m.opts.HTTPConnectTimeout, m.opts.HTTPReceiveTimeout, m.opts.HTTPRequestTimeout}
		if to.connect <= 0 {
			to.connect = DefaultHTTPConnectTimeout
		}
		if to.receive <= 0 {
			to.receive = DefaultHTTPReceiveTimeout
		}
		if to.request <= 0 {
			to.request = DefaultHTTPRequestTimeout
		}
		m.http = newHTTPBoundary(to)
		m.http.keepIdle(m.maxLive)
	})
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
// connection is observed like a stdio one (wire counts, request handles)
// and its reads tell the child when the session failed. go-sdk opens its
// standalone GET stream only from a hook on its own connection type,
// which this wrapper hides: the connection calls that hook itself
// (httpstream.go), so the stream is opened as go-sdk would, and the
// messages that arrive on it are read, counted and observed like any
// other.
type observedTransport struct {
	inner mcp.Transport
	wire  *wireStats
	reqs  *reqTable
	h     *httpChild
}

// Connect implements mcp.Transport.
func (t *observedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	var (
		c       mcp.Connection
		err     error
		release = func() {}
	)
	if t.h.sse {
		c, release, err = connectDetached(ctx, t.inner)
	} else {
		c, err = t.inner.Connect(ctx)
	}
	if err != nil {
		return nil, err
	}
	hc := &httpConn{observedConn: observedConn{Connection: c, wire: t.wire, reqs: t.reqs}, h: t.h, hook: standaloneHook(c), release: release}
	if hc.hook == nil {
		hc.hooked.Store(true)
	}
	return hc, nil
}

// connectDetached connects a legacy SSE transport, whose GET stream lives
// under the context it is connected with: the stream must outlive ctx
// (the acquisition's), so it gets a context of its own, cancelled when ctx
// ends before the connection is made, or else by release (the
// connection's close; the lease's end aborts it before, through the round
// tripper).
func connectDetached(ctx context.Context, tr mcp.Transport) (mcp.Connection, func(), error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	c, err := tr.Connect(sctx)
	if !stop() { // ctx ended while connecting: the stream is cancelled
		if err == nil {
			_ = c.Close()
		}
		cancel()
		return nil, nil, context.Cause(ctx)
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return c, cancel, nil
}

// httpConn is an HTTP lease's observed connection. Its reads end when the
// child breaks them (breakReads), and a read that fails for any other
// reason than the session's own close or the reader's context — the
// go-sdk failed the connection for good — marks the remote session lost.
type httpConn struct {
	observedConn
	h *httpChild
	// hook opens the inner connection's standalone stream (httpstream.go;
	// nil when it has none); hooked is set once it ran or never will.
	hook   func()
	hooked atomic.Bool
	// release ends what the connection holds beyond itself (a legacy SSE
	// stream's context); closing marks the connection's own close, after
	// which the end of a legacy SSE stream is not a loss.
	release func()
	closing atomic.Bool

	// The reader's context merged with the child's readStop, made once
	// per reader context (the go-sdk reads with one context).
	mu     sync.Mutex
	base   context.Context
	merged context.Context
	stop   func() bool
	cancel context.CancelFunc

	// replies are the calls sent whose response has not been read yet
	// (callCtx).
	replies callReplies
}

// readCtx returns ctx merged with the child's readStop.
func (c *httpConn) readCtx(ctx context.Context) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base != ctx {
		c.releaseLocked()
		c.base = ctx
		c.merged, c.cancel = context.WithCancel(ctx)
		c.stop = context.AfterFunc(c.h.readStop, c.cancel)
	}
	return c.merged
}

func (c *httpConn) releaseLocked() {
	if c.cancel != nil {
		c.stop()
		c.cancel()
		c.base, c.merged, c.stop, c.cancel = nil, nil, nil, nil
	}
}

// Read implements mcp.Connection.
func (c *httpConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.observedConn.Read(c.readCtx(ctx))
	if r, ok := m.(*jsonrpc.Response); ok && err == nil {
		// Before the caller can see it, so before it can end its call's
		// context: that call's POST then drains its stream (callCtx).
		c.replies.answered(r.ID)
	}
	// A legacy SSE stream that ends (io.EOF) before the connection's own
	// close is the remote session's end: it has no session id to resume.
	if err != nil && (!errors.Is(err, io.EOF) || c.h.sse && !c.closing.Load()) && ctx.Err() == nil && c.h.readStop.Err() == nil {
		c.h.markLost(lostSessionFailed)
	}
	return m, err
}

// Write implements mcp.Connection. Before the session's
// notifications/initialized (ClientSession sends it once the initialize
// succeeded) it opens the inner connection's standalone GET stream, as
// ClientSession's hook would have.
func (c *httpConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if !c.hooked.Load() {
		if r, ok := m.(*jsonrpc.Request); ok && r.Method == "notifications/initialized" && c.hooked.CompareAndSwap(false, true) {
			c.hook()
		}
	}
	if r, ok := m.(*jsonrpc.Request); ok && r.IsCall() && !c.h.sse {
		pctx, release := c.replies.callCtx(ctx, r.ID)
		err := c.observedConn.Write(pctx, m)
		if err != nil {
			release()
		}
		return err
	}
	return c.observedConn.Write(ctx, m)
}

// Close implements mcp.Connection; it also releases the merged context.
func (c *httpConn) Close() error {
	c.closing.Store(true)
	err := c.observedConn.Close()
	c.release()
	c.mu.Lock()
	c.releaseLocked()
	c.mu.Unlock()
	return err
}

// httpDrainGrace bounds how long a call's POST may go on reading its
// response stream after the call's context ended, once the call's
// response was read: the server ends the stream right after the response,
// and a stream read to its end leaves its connection in the pool for the
// next request. Past the grace the request is cancelled, as it would have
// been at once before (its connection closed).
const httpDrainGrace = time.Second

// callReplies are an HTTP lease's calls whose response has not been read,
// by JSON-RPC id.
type callReplies struct {
	mu   sync.Mutex
	byID map[jsonrpc.ID]*callReply
}

// callReply is one call sent: answered once its response was read.
type callReply struct{ answered bool }

// callCtx returns the context a call's POST is sent under, in place of
// ctx (the call's): ctx's values, and ctx's end only while the call is
// unanswered. The go-sdk reads a call's response stream under the
// context of the call's write, and goes on reading it to its end after
// handing the response over: by then the call has returned and its
// caller ended ctx, which aborted the read and dropped the connection
// (about one call in three over loopback). So:
//
//   - ctx ends before the response was read (the call is cancelled or
//     timed out): the POST is cancelled at once, with ctx's cause;
//   - ctx ends after it (the call completed): the POST is cancelled only
//     httpDrainGrace later, which a stream that ends with its response
//     never meets (TestHTTPCallsReuseConnections).
//
// release forgets the call at once (its write failed).
func (r *callReplies) callCtx(ctx context.Context, id jsonrpc.ID) (context.Context, func()) {
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	w := &callReply{}
	r.mu.Lock()
	if r.byID == nil {
		r.byID = make(map[jsonrpc.ID]*callReply)
	}
	r.byID[id] = w
	r.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		answered := r.forget(id, w)
		cause := context.Cause(ctx)
		if !answered {
			cancel(cause)
			return
		}
		time.AfterFunc(httpDrainGrace, func() { cancel(cause) })
	})
	return pctx, func() {
		stop()
		r.forget(id, w)
		cancel(nil)
	}
}

// answered marks the call id as answered (its response read) and forgets
// it.
func (r *callReplies) answered(id jsonrpc.ID) {
	r.mu.Lock()
	if w := r.byID[id]; w != nil {
		w.answered = true
		delete(r.byID, id)
	}
	r.mu.Unlock()
}

// forget drops w (id's) when it is still listed and reports whether its
// call was answered.
func (r *callReplies) forget(id jsonrpc.ID, w *callReply) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[id] == w {
		delete(r.byID, id)
	}
	return w.answered
}
