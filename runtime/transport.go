package runtime

import (
	"context"
	"io"
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
		if c.reqs != nil && c.reqs.live.Load() > 0 {
			c.reqs.onRead(m)
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
