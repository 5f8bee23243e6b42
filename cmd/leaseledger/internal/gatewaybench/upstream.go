package gatewaybench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/guardian"
	llrt "github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ProtocolVersion is the MCP protocol version every client and proxy of the
// benchmark asks for: the gateway offers only versions with sessions (up to
// 2025-11-25), and the runtime speaks this one to its servers, so every
// side speaks the same protocol on every hop.
const ProtocolVersion = llrt.ProtocolVersion

// StdioServerPkg is the go-sdk test server the stdio sides run (its echo
// tool); BuildStdioServer builds it from the repository.
const StdioServerPkg = "github.com/leaseledger/leaseledger/runtime/internal/testserver"

// echoSchema is the echo tool's input schema, as the test server has it.
const echoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// echoArgs are the arguments of every measured call.
var echoArgs = map[string]any{"text": "benchmark"}

// BuildStdioServer builds StdioServerPkg into dir with the go tool (from
// PATH), as the tests build it: it works from within the repository's
// module. It returns the binary's path.
func BuildStdioServer(ctx context.Context, dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("gatewaybench: no go tool on PATH to build %s (pass a built one): %w", StdioServerPkg, err)
	}
	out := filepath.Join(dir, "testserver")
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, StdioServerPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gatewaybench: building %s (run from the repository, or pass a built one): %w\n%s", StdioServerPkg, err, b)
	}
	return out, nil
}

// newHTTPClient is the HTTP client of one client side or proxy: its own
// pool, large enough that 64 sessions keep their connections (each
// Streamable HTTP session holds one for its GET stream besides its POSTs).
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}}
}

// closeIdle closes the idle connections of a client from newHTTPClient.
func closeIdle(c *http.Client) { c.Transport.(*http.Transport).CloseIdleConnections() }

// loopback serves h on 127.0.0.1 at a free port until close; url is the
// endpoint, accepted counts the connections accepted.
type loopback struct {
	srv      *http.Server
	url      string
	done     chan struct{}
	accepted atomic.Int64
}

func serveLoopback(h http.Handler) (*loopback, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lb := &loopback{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, url: "http://" + ln.Addr().String() + "/mcp", done: make(chan struct{})}
	go func() {
		defer close(lb.done)
		_ = lb.srv.Serve(countingListener{ln, &lb.accepted})
	}()
	return lb, nil
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// close stops accepting, closes every connection (streams included) and
// waits for the serving goroutine.
func (lb *loopback) close() {
	_ = lb.srv.Close()
	<-lb.done
}

// newEchoServer is the HTTP upstream: a go-sdk server with the test
// server's echo tool, nothing else.
func newEchoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench-echo", Version: "0"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", Description: "echoes text", InputSchema: json.RawMessage(echoSchema)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil
		})
	return s
}

// streamableHandler serves s over Streamable HTTP with the go-sdk's
// defaults (stateful sessions, responses on an event stream).
func streamableHandler(s *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// connect opens a go-sdk client session over t at ProtocolVersion.
func connect(ctx context.Context, name string, t mcp.Transport) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "0"}, nil)
	return c.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
}

// upstreamDialer opens one upstream client session of a proxy, and says
// how to end it (the session closed, then whatever it ran on).
type upstreamDialer func(ctx context.Context) (*mcp.ClientSession, func(context.Context) error, error)

// httpUpstream dials the HTTP upstream at url through client.
func httpUpstream(url string, client *http.Client) upstreamDialer {
	return func(ctx context.Context) (*mcp.ClientSession, func(context.Context) error, error) {
		cs, err := connect(ctx, "bench-proxy", &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: client})
		if err != nil {
			return nil, nil, err
		}
		return cs, func(context.Context) error { return cs.Close() }, nil
	}
}

// stdioUpstream starts the stdio server as the proxy's own child.
func stdioUpstream(bin string) upstreamDialer {
	return func(ctx context.Context) (*mcp.ClientSession, func(context.Context) error, error) {
		cs, err := connect(ctx, "bench-proxy", &mcp.CommandTransport{Command: exec.Command(bin)})
		if err != nil {
			return nil, nil, err
		}
		return cs, func(context.Context) error { return cs.Close() }, nil
	}
}

// guardianUpstream starts the stdio server under a guardian of its own
// (guardian.Launch, the go-sdk's IOTransport over the session's stream):
// the relay a lease puts between the runtime and its server, with no
// runtime and no ledger.
func guardianUpstream(bin, helperPath string, helperArgs []string) upstreamDialer {
	var mu sync.Mutex
	n := 0
	return func(ctx context.Context) (*mcp.ClientSession, func(context.Context) error, error) {
		mu.Lock()
		n++
		id := fmt.Sprintf("bench-relay-%d", n)
		mu.Unlock()
		sp := guardian.Spec{Command: bin, ActivationID: id, HelperPath: helperPath, HelperArgs: helperArgs}
		g, err := guardian.Launch(context.WithoutCancel(ctx), sp)
		if err != nil {
			return nil, nil, err
		}
		end := func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sp.CleanupBudget())
			defer cancel()
			if r := g.Close(ctx); !r.Confirmed {
				return fmt.Errorf("gatewaybench: %s: guardian cleanup unconfirmed: %s", id, r.Reason)
			}
			return nil
		}
		st := g.Stream()
		cs, err := connect(ctx, "bench-proxy", &mcp.IOTransport{Reader: st, Writer: st, MaxLineLength: llrt.MaxMessageBytes})
		if err != nil {
			return nil, nil, errors.Join(err, end(ctx))
		}
		return cs, func(ctx context.Context) error { return errors.Join(cs.Close(), end(ctx)) }, nil
	}
}

// proxy is the floor a gateway is held against: a go-sdk server whose echo
// tool forwards each call through a go-sdk client session of its own to
// the upstream (one upstream session per proxy session, opened by its
// first call) — no ledger, no lease.
type proxy struct {
	lb   *loopback
	dial upstreamDialer
	mu   sync.Mutex
	ups  map[*mcp.ServerSession]*proxyUpstream
}

type proxyUpstream struct {
	ready chan struct{}
	cs    *mcp.ClientSession
	end   func(context.Context) error
	err   error
}

func startProxy(dial upstreamDialer) (*proxy, error) {
	p := &proxy{dial: dial, ups: map[*mcp.ServerSession]*proxyUpstream{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "plain-proxy", Version: "0"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", Description: "echoes text", InputSchema: json.RawMessage(echoSchema)}, p.echo)
	lb, err := serveLoopback(streamableHandler(s))
	if err != nil {
		return nil, err
	}
	p.lb = lb
	return p, nil
}

func (p *proxy) echo(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	up, err := p.upstream(ctx, req.Session)
	if err != nil {
		return nil, err
	}
	return up.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: req.Params.Arguments})
}

// upstream returns ss's upstream session, dialling it on first use.
func (p *proxy) upstream(ctx context.Context, ss *mcp.ServerSession) (*mcp.ClientSession, error) {
	p.mu.Lock()
	up, ok := p.ups[ss]
	if !ok {
		up = &proxyUpstream{ready: make(chan struct{})}
		p.ups[ss] = up
	}
	p.mu.Unlock()
	if !ok {
		up.cs, up.end, up.err = p.dial(context.WithoutCancel(ctx))
		close(up.ready)
	}
	select {
	case <-up.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return up.cs, up.err
}

// close ends the listener and every upstream session, in parallel.
func (p *proxy) close(ctx context.Context) error {
	p.lb.close()
	p.mu.Lock()
	ups := make([]*proxyUpstream, 0, len(p.ups))
	for _, up := range p.ups {
		ups = append(ups, up)
	}
	p.mu.Unlock()
	errs := make([]error, len(ups))
	var wg sync.WaitGroup
	for i, up := range ups {
		wg.Go(func() {
			<-up.ready
			if up.end != nil {
				errs[i] = up.end(ctx)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
