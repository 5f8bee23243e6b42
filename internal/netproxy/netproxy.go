// Package netproxy owns the loopback TCP proxy that tests put on one
// network path (a NATS route between two hosts) so they can partition it
// and heal it while the processes at both ends keep running.
//
// Guarantees (each checked by a test in netproxy_test.go):
//   - Bytes pass unchanged in both directions (TestForwardsBothWays).
//   - Cut closes every live connection through the proxy, both halves,
//     before it returns (TestCutClosesLiveConnections).
//   - While cut, a new connection is accepted and reset at once: no byte
//     of it and no connection reaches the target (TestCutRefusesNew).
//   - Heal forwards new connections again; connections cut before stay
//     closed (TestHealForwardsAgain).
//   - A connection whose target dial is still in flight when Cut is called
//     is closed, never forwarded (TestCutDuringDial).
//   - When the target does not answer, the client's connection is closed
//     within DialTimeout (TestTargetDown).
//   - Close returns only after every goroutine of the proxy ended
//     (TestMain: testproc leftovers, goleak).
package netproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// DialTimeout bounds the dial to the target for each accepted connection;
// past it the client's connection is closed, as a dead target's would be.
const DialTimeout = 2 * time.Second

// acceptRetryPause is the pause after a failed Accept (EMFILE and the
// like) before the proxy accepts again.
const acceptRetryPause = 10 * time.Millisecond

// ErrClosed is returned by operations on a closed proxy.
var ErrClosed = errors.New("netproxy: proxy closed")

// Stats counts what the proxy did since it started.
type Stats struct {
	Accepted  int // connections forwarded to the target
	Refused   int // connections reset because the proxy was cut (or the dial raced a Cut)
	DialFails int // connections closed because the target could not be dialled
	Cuts      int // connections closed by Cut
	Live      int // connections forwarded now
}

// Proxy forwards every TCP connection made to Addr to its target.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // cancelled by Close: aborts dials in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	cut    bool
	closed bool
	live   map[*pair]struct{}
	stats  Stats
}

// pair is one forwarded connection: the client's side and the target's.
type pair struct{ client, target net.Conn }

func (p *pair) close() {
	_ = p.client.Close()
	_ = p.target.Close()
}

// Listen starts a proxy on a free port of 127.0.0.1 forwarding to target
// (host:port).
func Listen(target string) (*Proxy, error) {
	return ListenOn("127.0.0.1:0", target)
}

// ListenOn starts a proxy on addr forwarding to target.
func ListenOn(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, live: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the host:port the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every live connection and resets new ones until Heal. The
// listener stays open, so the port is not given away while the path is
// down and the peers see refused connections, as across a partition that
// resets rather than drops.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.live {
		c.close()
		delete(p.live, c)
		p.stats.Cuts++
	}
}

// Heal forwards new connections again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// IsCut reports whether the proxy is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Live = len(p.live)
	return s
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. A second Close returns ErrClosed.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	for c := range p.live {
		c.close()
		delete(p.live, c)
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("netproxy: close %s: %w", p.Addr(), err)
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			// Only Close ends the loop: a transient accept error on
			// loopback (EMFILE) is retried after a pause rather than
			// silently ending forwarding.
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(acceptRetryPause)
			continue
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.stats.Refused++
			p.mu.Unlock()
			reset(c)
			continue
		}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.forward(c)
	}
}

// reset closes c with an RST, so the peer's read fails at once instead of
// seeing an orderly end of stream.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, DialTimeout)
	target, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.mu.Lock()
		p.stats.DialFails++
		p.mu.Unlock()
		reset(client)
		return
	}
	c := &pair{client: client, target: target}
	p.mu.Lock()
	// The dial may have raced a Cut or Close: this connection was not
	// live when they closed the others, so it is refused here.
	if p.cut || p.closed {
		p.stats.Refused++
		p.mu.Unlock()
		reset(client)
		_ = target.Close()
		return
	}
	p.live[c] = struct{}{}
	p.stats.Accepted++
	p.mu.Unlock()

	// Either direction ending ends both: a route is one conversation,
	// and a half-open route is what a partition must not leave.
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(target, client)
	go pipe(client, target)
	<-done
	c.close()
	<-done
	p.mu.Lock()
	delete(p.live, c)
	p.mu.Unlock()
}
