package runtime

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one inbound JSON-RPC message (one line) from a
// child; a longer line fails the connection instead of growing a buffer.
const MaxMessageBytes = 8 << 20

// ProtocolVersion is the MCP protocol version pinned for every lease. The
// client sends a plain initialize with this version and no discovery
// probe first, so every child sees the same handshake.
const ProtocolVersion = "2025-11-25"

// streamTransport is an mcp.Transport over a child's stdio stream. The framing (newline-delimited JSON-RPC) is the go-sdk's own
// IOTransport; we wrap the resulting Connection to observe every wire
// message instead of writing JSON-RPC by hand.
type streamTransport struct {
	stream io.ReadWriteCloser
	wire   *wireStats
	reqs   *reqTable
}

// Connect implements mcp.Transport.
func (t *streamTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	w := countingWriter{w: t.stream, n: &t.wire.written}
	inner, err := (&mcp.IOTransport{Reader: t.stream, Writer: w, MaxLineLength: MaxMessageBytes}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &observedConn{Connection: inner, wire: t.wire, reqs: t.reqs}, nil
}

// wireStats counts what crossed one lease's connection. toolsCalls is the
// client-side twin of a server-side counter: tests assert it stays zero
// for a poisoned lease.
type wireStats struct {
	sent, received atomic.Int64
	toolsCalls     atomic.Int64
	toolsLists     atomic.Int64
	// written counts the bytes the child's stream accepted (relayed to the
	// guardian), compared with the helper's dropped stdin bytes to decide
	// whether a request reached the child (lease.neverReached).
	written atomic.Int64
	// notes keeps the notifications read ahead of the responses after
	// them (notebarrier.go).
	notes noteBarrier
}

// countingWriter counts the bytes its writer accepted.
type countingWriter struct {
	w io.WriteCloser
	n *atomic.Int64
}

// Close closes the underlying writer.
func (c countingWriter) Close() error { return c.w.Close() }

// Write implements io.Writer.
func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

type observedConn struct {
	mcp.Connection
	wire *wireStats
	// reqs, when set, are the lease's resource request handles: while any
	// is tracked, the connection tells them their wire ids, responses,
	// progress and cancel notifications (reqtable.go).
	reqs *reqTable
}

// Read counts every message received.
func (c *observedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err == nil {
		c.wire.received.Add(1)
		c.wire.notes.seen(m)
		if c.reqs != nil && c.reqs.live.Load() > 0 {
			c.reqs.onRead(m)
		}
		if c.reqs != nil && c.reqs.calls.live.Load() > 0 {
			c.reqs.calls.onRead(m)
		}
	}
	return m, err
}

// Write counts every message sent, and tools/call and tools/list
// requests on their own; while resource request handles are tracked it
// tells them their wire ids and their cancel notifications' fate.
func (c *observedConn) Write(ctx context.Context, m jsonrpc.Message) error {
	var noted *ResourceHandle
	if r, ok := m.(*jsonrpc.Request); ok {
		switch r.Method {
		case "tools/call":
			c.wire.toolsCalls.Add(1)
		case "tools/list":
			c.wire.toolsLists.Add(1)
		}
		if c.reqs != nil && c.reqs.live.Load() > 0 {
			noted = c.reqs.beforeWrite(r)
		}
	}
	c.wire.sent.Add(1)
	err := c.Connection.Write(ctx, m)
	if noted != nil {
		noted.afterCancelWrite(err)
	}
	return err
}

// progressRoutes are a lease's tool calls that asked for progress, by
// progress token (the call id): the connection's reader hands each
// matching notifications/progress to its call without blocking.
type progressRoutes struct {
	live atomic.Int64 // routed calls: zero keeps reads on the fast path

	mu      sync.Mutex
	byToken map[string]*callProgress
}

// add routes token's progress to p.
func (r *progressRoutes) add(token string, p *callProgress) {
	r.mu.Lock()
	if r.byToken == nil {
		r.byToken = make(map[string]*callProgress)
	}
	r.byToken[token] = p
	r.mu.Unlock()
	r.live.Add(1)
}

// remove stops routing token's progress.
func (r *progressRoutes) remove(token string) {
	r.mu.Lock()
	if _, ok := r.byToken[token]; ok {
		delete(r.byToken, token)
		r.live.Add(-1)
	}
	r.mu.Unlock()
}

// onRead delivers a progress notification to the call whose token it
// carries; anything else is ignored.
func (r *progressRoutes) onRead(m jsonrpc.Message) {
	x, ok := m.(*jsonrpc.Request)
	if !ok || x.Method != "notifications/progress" {
		return
	}
	var p mcp.ProgressNotificationParams
	if json.Unmarshal(x.Params, &p) != nil {
		return
	}
	tok, _ := p.ProgressToken.(string)
	r.mu.Lock()
	c := r.byToken[tok]
	r.mu.Unlock()
	if c != nil {
		c.deliver(Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
	}
}

// callProgress hands one call's progress notifications to its callback
// from a goroutine of its own, in order: the connection's reader only
// queues them (at most MaxProgressBuffered; later ones are dropped and
// counted while the buffer is full), so a slow callback never stalls the
// lease.
type callProgress struct {
	fn   func(Progress)
	ch   chan Progress
	done chan struct{} // closed once every queued notification was handed over

	mu      sync.Mutex
	closed  bool
	dropped int
}

// startProgress starts delivering to fn; finish ends it.
func startProgress(fn func(Progress)) *callProgress {
	p := &callProgress{fn: fn, ch: make(chan Progress, MaxProgressBuffered), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *callProgress) run() {
	defer close(p.done)
	for x := range p.ch {
		p.mu.Lock()
		x.Dropped = p.dropped
		p.mu.Unlock()
		p.fn(x)
	}
}

// deliver queues x without blocking; it is dropped (and counted) when the
// buffer is full, and ignored after finish.
func (p *callProgress) deliver(x Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.ch <- x:
	default:
		p.dropped++
	}
}

// finish stops queueing and returns once the callback returned for every
// notification queued before.
func (p *callProgress) finish() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.ch)
	}
	p.mu.Unlock()
	<-p.done
}
