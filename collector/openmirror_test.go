package collector_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/ledger"
)

// closeCounter counts the Close calls of one mirror's closer and closes
// the ledger.
type closeCounter struct {
	l *ledger.Ledger
	n *int
}

func (c closeCounter) Close() error { *c.n++; return c.l.Close() }

// Options.OpenMirror opens each mirror: the collector imports into the
// ledger it returns (with the host's directory and Mirror set), and closes
// it through the returned closer, once, at Close; a failing hook fails
// Start with the host named, closing the mirrors opened before.
func TestOpenMirrorHook(t *testing.T) {
	f := newFleet(t, "h1", "h2")
	f.appendConcurrently(50, "h1", "h2")
	dir := t.TempDir()
	var (
		mu     sync.Mutex
		opened = map[string]*ledger.Ledger{}
		closed = map[string]*int{}
	)
	hook := func(_ context.Context, host string, lo ledger.Options) (*ledger.Ledger, io.Closer, error) {
		if lo.Dir != collector.HostDir(dir, host) || !lo.Mirror {
			t.Errorf("host %s: opened with %+v, want Dir %s and Mirror", host, lo, collector.HostDir(dir, host))
		}
		l, err := ledger.Open(lo)
		if err != nil {
			return nil, nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		opened[host], closed[host] = l, new(int)
		return l, closeCounter{l, closed[host]}, nil
	}
	c := f.collector(dir, []string{"h1", "h2"}, func(o *collector.Options) { o.OpenMirror = hook })
	f.waitMirrored(c, "h1", "h2")
	for _, h := range []string{"h1", "h2"} {
		if c.Mirror(h) != opened[h] {
			t.Fatalf("host %s: the collector's mirror is not the hook's ledger", h)
		}
		assertSameRaws(t, h, f.hosts[h].l, opened[h])
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	for _, h := range []string{"h1", "h2"} {
		if *closed[h] != 1 {
			t.Fatalf("host %s: closer called %d times, want once", h, *closed[h])
		}
	}

	boom := errors.New("boom")
	clear(closed)
	_, err := collector.Start(collector.Options{Dir: dir, Hosts: []string{"h1", "h2"}, Conn: f.nc, Logger: quiet,
		OpenMirror: func(ctx context.Context, host string, lo ledger.Options) (*ledger.Ledger, io.Closer, error) {
			if host == "h2" {
				return nil, nil, boom
			}
			return hook(ctx, host, lo)
		}})
	if !errors.Is(err, boom) {
		t.Fatalf("Start with a failing hook: %v, want %v", err, boom)
	}
	if closed["h1"] == nil || *closed["h1"] != 1 {
		t.Fatal("h1's mirror, opened before h2's failed, was not closed")
	}
}
