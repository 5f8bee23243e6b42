package runtime

import (
	"reflect"
	"unsafe"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The standalone GET stream of a Streamable HTTP lease.
//
// go-sdk v1.8.0's StreamableClientTransport opens its standalone SSE
// stream (an HTTP GET to the endpoint, on which the server sends the
// notifications and requests tied to no POST: log messages, resource
// updates, list changes, sampling outside a call) from one hook, the
// unexported sessionUpdated method of its own connection type, which
// ClientSession calls after the initialize when the connection it was
// given has it. A lease gives ClientSession its observing wrapper
// (httpConn), which cannot have that method (it is unexported in another
// package), so without help the stream is never opened.
//
// httpConn therefore opens it itself, once, when the session sends
// notifications/initialized (just after ClientSession would have called
// the hook), through the method the hook calls, connectStandaloneSSE
// (reached by go:linkname; it takes no argument but its receiver, so no
// go-sdk type is mirrored; a go-sdk that renames it fails the build, and
// TestHTTPStandaloneStream fails should it stop opening the stream).
//
// Only the stream is opened: the hook's other effect, the negotiated
// MCP-Protocol-Version on every later request, is left out on purpose.
// With that header a 2025-11-25 server primes each POST's event stream
// with an event id, so go-sdk resumes a broken call stream by GET —
// including one the boundary's receive timeout broke, where the resumed
// GET (a stream, without a gap bound) would then hold the call until its
// deadline instead of failing it with the receive timeout
// (TestHTTPReceiveTimeoutKeepsLease). Requests stay as they were before
// the stream was opened: without the header, which servers read as
// 2025-03-26.

//go:linkname sdkConnectStandaloneSSE github.com/modelcontextprotocol/go-sdk/mcp.(*streamableClientConn).connectStandaloneSSE
func sdkConnectStandaloneSSE(c unsafe.Pointer)

// sdkStreamableConnType is the go-sdk type the method belongs to.
const sdkStreamableConnType = "github.com/modelcontextprotocol/go-sdk/mcp.streamableClientConn"

// standaloneHook returns the function that opens conn's standalone
// stream (conn: a go-sdk streamable client connection), or nil when conn
// is of another type.
func standaloneHook(conn mcp.Connection) func() {
	v := reflect.ValueOf(conn)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().PkgPath()+"."+v.Type().Elem().Name() != sdkStreamableConnType {
		return nil
	}
	p := v.UnsafePointer()
	return func() { sdkConnectStandaloneSSE(p) }
}
