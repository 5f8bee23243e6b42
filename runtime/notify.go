package runtime

import (
	"context"
	"sync"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A lease's server notifications (see relay.go for its requests): log
// messages to the session they belong to, resource updates to the
// sessions subscribed, list changes to the lease's sessions once a tools
// change is re-pinned, and the session's logging level.

// logMessage delivers a server's notifications/message to the lease's
// session (a shared lease: to the one session with requests in flight
// through it; dropped and counted otherwise).
func (l *lease) logMessage(ctx context.Context, p *mcp.LoggingMessageParams) {
	session, rel, ok := l.target()
	if !ok || p == nil {
		l.peer.mu.Lock()
		l.peer.logsDropped++
		l.peer.mu.Unlock()
		return
	}
	n := PeerNotification{Kind: NotifyLog, Log: p}
	if rel != nil {
		n.Related = rel.ctx
	}
	l.notify(ctx, session, n)
}

// LogsDropped counts the log messages of a shared lease that reached no
// session (test and operator introspection).
func (l *lease) logsDropped() int {
	l.peer.mu.Lock()
	defer l.peer.mu.Unlock()
	return l.peer.logsDropped
}

// resourceUpdated delivers notifications/resources/updated to each session
// subscribed to its URI on this lease.
func (l *lease) resourceUpdated(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams) {
	if p == nil {
		return
	}
	for _, s := range l.m.subscribers(l, p.URI) {
		l.notify(ctx, s, PeerNotification{Kind: NotifyResourceUpdated, ResourceUpdated: p})
	}
}

// notify hands n to session's peer (none: dropped).
func (l *lease) notify(ctx context.Context, session string, n PeerNotification) {
	peer := l.m.sessionPeer(session)
	if peer == nil {
		return
	}
	n.Server, n.Activation = l.serverName(), l.activation
	peer.Notify(ctx, n)
}

// listChanged records a list change and delivers it: prompts and
// resources at once to the lease's sessions; tools once the lease listed
// them again (relist, off the receive loop).
func (l *lease) listChanged(list events.ListKind) {
	m := l.m
	m.emitFactAsync(context.Background(), &l.finishing, nil, l.draft(&events.LeaseListChanged{List: list}))
	if list != events.ListTools {
		kind := NotifyPromptsChanged
		if list == events.ListResources {
			kind = NotifyResourcesChanged
		}
		for _, s := range l.sessionsOf() {
			l.notify(context.Background(), s, PeerNotification{Kind: kind})
		}
		return
	}
	p := &l.peer
	p.mu.Lock()
	if p.relisting {
		p.again = true
		p.mu.Unlock()
		return
	}
	p.relisting = true
	p.mu.Unlock()
	m.bg.Add(1)
	go l.relist()
}

// relist lists the lease's tools again (bounded by RelistTimeout) and pins
// the new listing, keeping the replaced one to refuse calls against it
// (ErrListingChanged); once more when another change arrived meanwhile. A
// failed re-list ends the lease (listing_failed).
func (l *lease) relist() {
	m := l.m
	defer m.bg.Done()
	<-l.ready // a change notified during the acquisition: its listing first
	for {
		ctx, cancel := context.WithTimeout(context.Background(), RelistTimeout)
		listing, err := fetchListing(ctx, l.cs)
		cancel()
		p := &l.peer
		l.mu.Lock()
		if l.state != stateActive || l.err != nil {
			l.mu.Unlock()
			p.mu.Lock()
			p.relisting, p.again = false, false
			p.mu.Unlock()
			return
		}
		if err != nil {
			l.state, l.goneReason = stateGone, events.TerminatedListingFailed
			l.mu.Unlock()
			p.mu.Lock()
			p.relisting, p.again = false, false
			p.mu.Unlock()
			m.removeIf(l)
			m.keep(l.terminate(context.Background(), events.TerminatedListingFailed))
			return
		}
		old := l.listing
		l.listing = listing
		l.mu.Unlock()
		p.mu.Lock()
		if old != nil && old.Digest != listing.Digest {
			p.superseded = append(p.superseded, old)
			if len(p.superseded) > MaxSupersededListings {
				p.superseded = p.superseded[1:]
			}
		}
		again := p.again
		p.again = false
		if !again {
			p.relisting = false
		}
		p.mu.Unlock()
		m.keep(m.emitFact(context.Background(), l.draft(&events.LeaseListingPinned{ToolCount: len(listing.Tools),
			Pages: listing.Pages, ListingBytes: listing.Bytes, ListingDigest: listing.Digest})))
		for _, s := range l.sessionsOf() {
			l.notify(context.Background(), s, PeerNotification{Kind: NotifyToolsChanged})
		}
		if !again {
			return
		}
	}
}

// supersededTool reports whether tool with digest was in a listing the
// lease replaced.
func (l *lease) supersededTool(tool, digest string) bool {
	p := &l.peer
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, old := range p.superseded {
		if pt, ok := old.Tools[tool]; ok && pt.Digest == digest {
			return true
		}
	}
	return false
}

// pinned returns the lease's current listing.
func (l *lease) pinned() *pinnedListing {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listing
}

// applyLogLevel sends the session's logging level to the lease's server;
// a server that does not support logging (or refuses) is ignored: the
// level is the session's preference, not a condition of the lease.
func (l *lease) applyLogLevel(ctx context.Context, level mcp.LoggingLevel) {
	if level == "" || l.cs == nil {
		return
	}
	_ = l.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level})
}

// SetLogLevel sets the session's MCP logging level: recorded
// (session.log_level), sent (logging/setLevel) to each of the session's
// live leases, and to every lease acquired for it later right after
// initialize. Shared leases are not sent it (they serve other sessions).
// A server that does not support logging, or refuses, is ignored. It
// fails with ErrInvalidRequest for a level outside MCP's eight, with
// ErrSessionEnded after the session ended, and with ErrLedger when the
// record failed (the level is then not set).
func (c LeaseCapability) SetLogLevel(ctx context.Context, level mcp.LoggingLevel) error {
	if !events.LogLevel(level).Valid() {
		return newErr("log_level", &leaseKey{session: c.st.id}, ErrInvalidRequest, nil)
	}
	if err := c.m.retain(c.st); err != nil {
		return err
	}
	defer func() { c.m.keep(c.m.release(ctx, c.st)) }()
	if err := c.m.emitFact(ctx, events.Draft{Session: c.st.id, Payload: &events.SessionLogLevel{Level: events.LogLevel(level)}}); err != nil {
		return err
	}
	m := c.m
	// Set, then the leases mapped at that moment: a lease mapped later
	// reads the level itself after its initialize (lease.start); one still
	// starting is sent it once ready (its start may have read the old one).
	m.mu.Lock()
	c.st.logLevel = level
	var live []*lease
	for k, l := range m.leases {
		if k.session == c.st.id {
			live = append(live, l)
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-l.ready:
			case <-ctx.Done():
				return
			}
			if l.err == nil {
				l.applyLogLevel(ctx, level)
			}
		}()
	}
	wg.Wait()
	return nil
}

// serverName is the config name of the lease's server (what hosts name
// servers by; events carry the id).
func (l *lease) serverName() string {
	if l.cfg.name != "" {
		return l.cfg.name
	}
	return l.key.server
}
