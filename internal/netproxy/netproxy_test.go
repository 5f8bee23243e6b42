package netproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// TestMain fails the run when a test leaves a goroutine behind: Close must
// wait for every goroutine of the proxy.
func TestMain(m *testing.M) { testproc.Main(m) }

// testWait bounds each wait of these tests for a connection to close.
const testWait = 5 * time.Second

// echoServer echoes every line back; it counts its connections.
type echoServer struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends line and reads it back through c.
func roundTrip(c net.Conn, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(testWait))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// closedSoon reports whether a read on c fails (EOF or reset) within
// testWait, i.e. the proxy closed it.
func closedSoon(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(testWait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// refused reports whether a connection to addr is reset during the dial
// or closed soon after it (the proxy accepts before it decides), sending
// msg first when the dial succeeds.
func refused(addr, msg string) bool {
	c, err := net.DialTimeout("tcp", addr, testWait)
	if err != nil {
		return true
	}
	defer c.Close()
	_, _ = io.WriteString(c, msg)
	return closedSoon(c)
}

func TestForwardsBothWays(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	c := dial(t, p.Addr())
	big := string(make([]byte, 1<<20-1))
	for _, line := range []string{"hello", "second line", big} {
		got, err := roundTrip(c, line)
		if err != nil || got != line {
			t.Fatalf("round trip of %d bytes: %v (got %d bytes)", len(line), err, len(got))
		}
	}
	if s := p.Stats(); s.Accepted != 1 || s.Live != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCutClosesLiveConnections(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	for _, c := range []net.Conn{a, b} {
		if _, err := roundTrip(c, "x"); err != nil {
			t.Fatal(err)
		}
	}
	p.Cut()
	if s := p.Stats(); s.Live != 0 || s.Cuts != 2 {
		t.Fatalf("after Cut: %+v", s)
	}
	for _, c := range []net.Conn{a, b} {
		if !closedSoon(c) {
			t.Fatal("a connection stayed open across Cut")
		}
	}
	// The target's side is closed too: the echo server's copy ends.
	echo.mu.Lock()
	targets := append([]net.Conn(nil), echo.open...)
	echo.mu.Unlock()
	for _, c := range targets {
		if !closedSoon(c) {
			t.Fatal("the target's half stayed open across Cut")
		}
	}
}

func TestCutRefusesNew(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	p.Cut()
	for range 3 {
		if !refused(p.Addr(), "lost\n") {
			t.Fatal("a connection made while cut stayed open")
		}
	}
	if n := echo.conns.Load(); n != 0 {
		t.Fatalf("%d connections reached the target while cut", n)
	}
	if s := p.Stats(); s.Refused != 3 || s.Accepted != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestHealForwardsAgain(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	old := dial(t, p.Addr())
	if _, err := roundTrip(old, "before"); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	p.Heal()
	if p.IsCut() {
		t.Fatal("IsCut after Heal")
	}
	if !closedSoon(old) {
		t.Fatal("a connection cut before Heal came back")
	}
	c := dial(t, p.Addr())
	if got, err := roundTrip(c, "after"); err != nil || got != "after" {
		t.Fatalf("after Heal: %q %v", got, err)
	}
}

// Cut right after 50 connections were made: some are still being dialled
// by the proxy when it runs. None is live afterwards and every client sees
// its connection closed, whichever side of the race it was on.
func TestCutDuringDial(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	var conns []net.Conn
	for range 50 {
		c, err := net.DialTimeout("tcp", p.Addr(), testWait)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	p.Cut()
	for _, c := range conns {
		if !closedSoon(c) {
			t.Fatal("a connection dialled before Cut stayed open after it")
		}
		c.Close()
	}
	// Every goroutine that was dialling has registered or refused by now.
	deadline := time.Now().Add(testWait)
	for p.Stats().Accepted+p.Stats().Refused+p.Stats().DialFails < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := p.Stats(); s.Live != 0 {
		t.Fatalf("%d connections live after Cut: %+v", s.Live, s)
	}
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := startProxy(t, dead)
	if !refused(p.Addr(), "") {
		t.Fatal("connection to a dead target stayed open")
	}
	if s := p.Stats(); s.DialFails != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCloseTwice(t *testing.T) {
	echo := startEcho(t)
	p, err := Listen(echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !closedSoon(c) {
		t.Fatal("connection open after Close")
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}
