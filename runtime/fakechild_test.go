//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"
)

// fakeWorld launches in-process children for policy tests: each is a
// go-sdk MCP server on one end of a net.Pipe, the lease's client on the
// other, with a confirmed, correlated cleanup result at close. Its tools:
// echo {text}, block (returns when unblock is closed or the child closes),
// crash (the child "exits": its stream ends mid-call).
type fakeWorld struct {
	launches atomic.Int64 // launches attempted
	live     atomic.Int64 // children started and not yet closed
	calls    atomic.Int64 // tools/call received by any child
	nextPID  atomic.Int64

	// launchErr, when set, fails every launch (no child exists).
	launchErr atomic.Pointer[error]
	// launchGate, when set, holds every launch until it is closed (or the
	// launch context ends).
	launchGate chan struct{}
	// blocked receives one value per block call that started.
	blocked chan struct{}
	// unblock releases every block call.
	unblock chan struct{}
	// gates hold fake://gate/<k> reads (gate, openGate).
	gates  sync.Map
	gateMu sync.Mutex
	// variant changes the echo tool's schema (and so its digest) for
	// children launched with this env entry.
}

// gate returns the channel that releases reads of uri (created on first
// use); openGate closes it.
func (w *fakeWorld) gate(uri string) chan struct{} {
	ch, _ := w.gates.LoadOrStore(uri, make(chan struct{}))
	return ch.(chan struct{})
}

func (w *fakeWorld) openGate(uri string) {
	ch := w.gate(uri)
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func newFakeWorld() *fakeWorld {
	return &fakeWorld{blocked: make(chan struct{}, 1024), unblock: make(chan struct{})}
}

func (w *fakeWorld) launch(ctx context.Context, spec guardian.Spec) (child, error) {
	w.launches.Add(1)
	if g := w.launchGate; g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if p := w.launchErr.Load(); p != nil {
		return nil, *p
	}
	pid := int(100000 + 2*w.nextPID.Add(1))
	c := &fakeChild{w: w, act: spec.ActivationID, pid: pid, hpid: pid - 1,
		doneCh: make(chan struct{}), stop: make(chan struct{})}
	var cerr, serr net.Conn
	cerr, serr = net.Pipe()
	c.clientEnd, c.serverEnd = cerr, serr
	srv := mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "0"}, nil)
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				w.calls.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	echoSchema := `{"type":"object","properties":{"text":{"type":"string"}}}`
	if spec.Command == "fake-v2" {
		echoSchema = `{"type":"object","properties":{"text":{"type":"string"},"v2":{"type":"integer"}}}`
	}
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(echoSchema)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "block", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			w.blocked <- struct{}{}
			select {
			case <-w.unblock:
			case <-c.stop:
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "unblocked"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "refuse", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// A JSON-RPC error response; its text must never reach an error.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "SECRET server text"}
		})
	srv.AddTool(&mcp.Tool{Name: "crash", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			c.exit()
			return nil, errors.New("unreachable")
		})
	// fake://gate/<k>: held until the test opens gate k (w.gate) or the
	// request is cancelled; fake://echo answers at once.
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "fake://gate/{k}", Name: "gate"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			select {
			case <-w.gate(req.Params.URI):
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-c.stop:
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "opened"}}}, nil
		})
	ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: serr, Writer: serr}, nil)
	if err != nil {
		cerr.Close()
		serr.Close()
		return nil, err
	}
	c.ss = ss
	w.live.Add(1)
	return c, nil
}

// fakeChild is one in-process child.
type fakeChild struct {
	w                    *fakeWorld
	act                  string
	pid, hpid            int
	clientEnd, serverEnd net.Conn
	ss                   *mcp.ServerSession
	doneCh               chan struct{}
	doneOnce             sync.Once
	stop                 chan struct{}
	closeOnce            sync.Once
	closed               atomic.Bool
	result               guardian.CleanupResult
	// exitedAt is when the child "was reaped" (its receipt's reaped_at).
	exitedAt atomic.Pointer[time.Time]
}

// exit ends the child on its own: its stream closes, done is closed.
func (c *fakeChild) exit() {
	c.doneOnce.Do(func() {
		c.markExited()
		_ = c.serverEnd.Close()
		close(c.doneCh)
	})
}

// markExited records the first exit time.
func (c *fakeChild) markExited() {
	now := time.Now().UTC()
	c.exitedAt.CompareAndSwap(nil, &now)
}

// die is a kill from outside as the host sees it: the child is reaped and
// its stream ends now, but done (the guardian's report) is closed only
// when report is closed — the window in which a call can pass the gate
// and be sent to a child that is already gone.
func (c *fakeChild) die(report <-chan struct{}) {
	c.markExited()
	_ = c.serverEnd.Close()
	go func() {
		<-report
		c.exit()
	}()
}

func (c *fakeChild) stream() io.ReadWriteCloser { return c.clientEnd }
func (c *fakeChild) done() <-chan struct{}      { return c.doneCh }
func (c *fakeChild) facts() childFacts {
	return childFacts{TargetPID: c.pid, HelperPID: c.hpid, HelperVersion: "fake", PIDFD: true}
}

// close releases blocked handlers, ends both ends of the stream, waits for
// the server session's goroutines and reports a confirmed cleanup with a
// receipt correlated to the child's activation and pids.
func (c *fakeChild) close(ctx context.Context) guardian.CleanupResult {
	c.closeOnce.Do(func() {
		close(c.stop)
		_ = c.clientEnd.Close()
		c.exit()
		_ = c.ss.Wait()
		c.closed.Store(true)
		c.w.live.Add(-1)
		c.markExited()
		now := *c.exitedAt.Load()
		c.result = guardian.CleanupResult{ActivationID: c.act, Confirmed: true, HelperVersion: "fake",
			HelperPID: c.hpid, TargetPID: c.pid, HelperExited: true, CloseRequest: "control",
			Receipt: &guardian.Receipt{ActivationID: c.act, HelperVersion: "fake", HelperPID: c.hpid, TargetPID: c.pid,
				Reaped: true, ReapedAt: &now, Stdin: &guardian.PipeFact{ClosedAt: now},
				Stdout: &guardian.PipeFact{ClosedAt: now}, Stderr: &guardian.PipeFact{ClosedAt: now}}}
	})
	return c.result
}

// memLedger is an in-memory Appender that validates and seals events the
// way the ledger does (events.Prepare, events.Seal, the hash chain), so
// the projector can replay them. fail, when set, refuses every append.
type memLedger struct {
	mu     sync.Mutex
	envs   []events.Envelope
	prev   events.Hash
	fail   atomic.Pointer[error]
	before atomic.Pointer[func([]events.Draft)]
}

func (l *memLedger) Append(ctx context.Context, drafts ...events.Draft) ([]events.Seq, error) {
	if f := l.before.Load(); f != nil {
		(*f)(drafts)
	}
	if p := l.fail.Load(); p != nil {
		return nil, *p
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ps := make([]events.Prepared, len(drafts))
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seqs := make([]events.Seq, len(ps))
	for i, p := range ps {
		seq := events.Seq(len(l.envs) + 1)
		env, _ := events.Seal(p, seq, ulid.Make(), time.Now(), l.prev)
		l.prev = env.Hash
		l.envs = append(l.envs, env)
		seqs[i] = seq
	}
	return seqs, nil
}

func (l *memLedger) setBefore(f func([]events.Draft)) { l.before.Store(&f) }

func (l *memLedger) envelopes() []events.Envelope {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]events.Envelope(nil), l.envs...)
}

// policyEnv is one policy test's manager over fake children and an
// in-memory ledger. Its cleanup closes the manager and audits the events
// like the integration tests do (confirmed cleanup for every activation,
// no live lease, no gate violation in the projector's lease table).
type policyEnv struct {
	t     *testing.T
	m     *Manager
	l     *memLedger
	w     *fakeWorld
	cfg   *MapConfigSource
	clock *fakeClock
}

func newPolicyEnv(t *testing.T, tweak func(*Options)) *policyEnv {
	t.Helper()
	p := &policyEnv{t: t, l: &memLedger{}, w: newFakeWorld(), cfg: &MapConfigSource{}, clock: &fakeClock{}}
	opts := Options{Config: p.cfg, Ledger: p.l, Now: p.clock.Now}
	if tweak != nil {
		tweak(&opts)
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	m.launch = p.w.launch
	p.m = m
	p.cfg.Set("fs", ServerConfig{Command: "fake"})
	t.Cleanup(func() {
		if p.w.unblock != nil {
			select {
			case <-p.w.unblock:
			default:
				close(p.w.unblock)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := m.Close(ctx)
		if p.l.fail.Load() == nil && err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := p.w.live.Load(); n != 0 {
			t.Errorf("%d fake children still live after Close", n)
		}
		if p.l.fail.Load() == nil {
			auditEnvelopes(t, p.l.envelopes())
		}
	})
	return p
}

// events decodes the ledger's events.
func (p *policyEnv) events() []ev {
	p.t.Helper()
	var out []ev
	for _, env := range p.l.envelopes() {
		pl, err := env.Payload()
		if err != nil {
			p.t.Fatal(err)
		}
		out = append(out, ev{env.Seq, env.Kind, env.Activation, env.Session, pl})
	}
	return out
}

// kinds lists the kinds of act's events (every event when act is empty).
func (p *policyEnv) kinds(act string) []string {
	var out []string
	for _, x := range p.events() {
		if act == "" || x.Activation == act {
			out = append(out, string(x.Kind))
		}
	}
	return out
}

// open opens session and registers its release.
func (p *policyEnv) open(session string) *SessionScope {
	p.t.Helper()
	s, err := p.m.OpenSession(context.Background(), session)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = s.Release(context.Background()) })
	return s
}

// digest returns the pinned digest of tool on server for scope's session.
func (p *policyEnv) digest(s *SessionScope, server, tool string) string {
	p.t.Helper()
	tools, err := s.Capability().Tools(context.Background(), server)
	if err != nil {
		p.t.Fatal(err)
	}
	return digestOf(p.t, tools, tool)
}

func sessionName(i int) string { return "s" + strconv.Itoa(i) }
