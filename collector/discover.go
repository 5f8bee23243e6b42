package collector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats.go"
)

// Host discovery (Options.Discover). A clustered host announces itself
// (bus.Options.AnnounceInterval) on HostSubject(h, busclient.AnnounceSubject),
// a subject in its own space that only its own bus may publish; the
// collector subscribes to every host's (busclient.FleetAnnounceSubjects)
// and adds a host whose id matches a pattern once the host's own head API
// answers. An announcement is a hint, never evidence: what is mirrored
// comes from the host's API and is verified as for any host, and a host
// already mirrored — refused ones included — is never added again, so an
// announcement never un-refuses a host whose chain the collector holds
// differently (TestDiscoveryKeepsRefusedHost).

// Bounds of discovery.
const (
	// MaxDiscoverPatterns bounds Options.Discover.
	MaxDiscoverPatterns = 64
	// MaxPendingAnnouncements bounds the announcements held between the
	// subscription and the discovery goroutine; beyond it NATS drops them
	// (every host announces again, bus.DefaultAnnounceInterval).
	MaxPendingAnnouncements = 256
)

// discovers reports whether host matches a pattern of Options.Discover.
func (o Options) discovers(host string) bool {
	for _, p := range o.Discover {
		if ok, _ := path.Match(p, host); ok {
			return true
		}
	}
	return false
}

// mirroredBefore lists the host directories under Dir/hosts whose id
// Options.Discover matches (none without discovery), in name order.
func (c *Collector) mirroredBefore() ([]string, error) {
	if len(c.opts.Discover) == 0 {
		return nil, nil
	}
	entries, err := os.ReadDir(filepath.Join(c.opts.Dir, HostsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && events.ValidID(e.Name()) && c.opts.discovers(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// AddHost starts mirroring host while the collector runs, as a host of
// Options.Hosts: its mirror is opened (created when missing), a host
// refused earlier stays refused (its REFUSED.json), Options.OnHostAdded is
// called, then its goroutine starts. A host already mirrored is left as it
// is (nil). Errors: ErrOptions (an invalid id, MaxHosts hosts mirrored),
// ErrClosed, or the mirror's opening.
func (c *Collector) AddHost(host string) error {
	if !events.ValidID(host) {
		return fmt.Errorf("%w: host id %q: want %s", ErrOptions, host, events.IDRule)
	}
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.known[host]:
		c.mu.Unlock()
		return nil
	case len(c.known) >= MaxHosts:
		c.mu.Unlock()
		return fmt.Errorf("%w: host %s: MaxHosts=%d hosts are mirrored", ErrOptions, host, MaxHosts)
	}
	c.known[host] = true // no other AddHost opens it meanwhile
	c.mu.Unlock()
	hm, err := openHost(c.ctx, c.opts, host)
	c.mu.Lock()
	if err == nil && c.closed {
		err = errors.Join(ErrClosed, hm.closer.Close())
	}
	if err != nil {
		delete(c.known, host)
		c.mu.Unlock()
		return err
	}
	c.hosts = append(c.hosts, hm)
	c.wg.Add(1) // Close waits for OnHostAdded and the host's goroutine
	c.mu.Unlock()
	run := !c.refused(hm)
	c.opts.Logger.Info("collector: host added", "host", host, "refused", !run)
	if c.opts.OnHostAdded != nil {
		c.opts.OnHostAdded(host, hm.l)
	}
	if !run {
		c.wg.Done()
		return nil
	}
	go func() {
		defer c.wg.Done()
		hm.run(c.ctx)
	}()
	return nil
}

// isKnown reports whether host is mirrored (or being added).
func (c *Collector) isKnown(host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known[host]
}

// startDiscovery subscribes to every host's announcements and starts the
// discovery goroutine (Close waits for it); nothing without discovery.
func (c *Collector) startDiscovery() error {
	if len(c.opts.Discover) == 0 {
		return nil
	}
	ch := make(chan *nats.Msg, MaxPendingAnnouncements)
	subject := busclient.FleetAnnounceSubjects()
	sub, err := c.opts.Conn.ChanSubscribe(subject, ch)
	if err != nil {
		return fmt.Errorf("collector: subscribe %s: %w", subject, err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer sub.Unsubscribe()
		c.discover(ch)
	}()
	return nil
}

// discover adds each announced host that matches Options.Discover, is not
// mirrored yet and whose own head API answers (in the peer class, within
// PollTimeout); one that does not answer is asked again at its next
// announcement at least PollInterval later.
func (c *Collector) discover(ch <-chan *nats.Msg) {
	asked := map[string]time.Time{} // unanswered hosts, at most MaxHosts
	for {
		var m *nats.Msg
		select {
		case <-c.ctx.Done():
			return
		case m = <-ch:
		}
		a, err := busclient.ParseAnnouncement(m.Subject, m.Data)
		if err != nil {
			c.opts.Logger.Debug("collector: not an announcement", "err", err)
			continue
		}
		if !c.opts.discovers(a.Host) || c.isKnown(a.Host) {
			continue
		}
		now := time.Now()
		if t, ok := asked[a.Host]; ok && now.Sub(t) < c.opts.PollInterval {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.PollTimeout)
		_, err = busclient.NewClient(c.opts.Conn).WithPeerClass().WithHost(a.Host).Head(ctx)
		cancel()
		if err != nil {
			if len(asked) >= MaxHosts {
				clear(asked)
			}
			asked[a.Host] = now
			c.opts.Logger.Warn("collector: announced host does not answer its head; not added yet", "host", a.Host, "err", err)
			continue
		}
		delete(asked, a.Host)
		if err := c.AddHost(a.Host); err != nil {
			if errors.Is(err, ErrClosed) {
				return
			}
			c.opts.Logger.Warn("collector: announced host not added", "host", a.Host, "err", err)
		}
	}
}
