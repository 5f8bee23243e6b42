package bus

// Bounds on what clients of the bus may cost it. Anonymous clients are
// admitted (read-only) by default, so nothing a client sends may make the
// server hold much memory, work much, or guess passwords fast:
//
//   - connections: at most Limits.MaxConnections (NATS MaxConn); more are
//     refused by the server ("maximum connections exceeded");
//   - unread data: a connection whose pending outbound data exceeds
//     Limits.MaxPendingBytes, or whose socket takes more than
//     Limits.WriteDeadline to accept a write, is cut off as a slow consumer
//     (NATS MaxPending / WriteDeadline; the server logs "Slow Consumer
//     Detected" and the client sees its connection closed). The server
//     never stalls the API's responder for a slow reader
//     (NoFastProducerStall): replies it cannot take are dropped;
//   - payloads: requests are at most Limits.MaxPayload bytes;
//   - replay chunks: anonymous and read-only users get smaller chunks
//     (AnonymousReplayChunk*, ReadOnlyReplayChunk*) than the writer and
//     the peer class, so a tiny request cannot return much;
//   - request rates: each connection has a token bucket per its class
//     (Limits.RequestRate/RequestBurst for anonymous, read-only and control users,
//     WriterRequestRate/WriterRequestBurst for the writer), anonymous
//     connections together share one more (Limits.AnonymousRate), and the
//     peer class has one bucket for all its requests (PeerRequestRate/
//     PeerRequestBurst, the writer's by default); a request over the limit
//     gets an error reply (busclient.CodeRateLimited), never silence;
//   - authentication: failures are answered after AuthFailureDelay, and
//     each (source address, user) may fail at most AuthFailureBurst times
//     and then once per AuthFailureInterval; beyond that its attempts are refused
//     without being checked (auth.go).
//
// The connection a request came from is not visible to the responder: it
// is identified by its reply inbox, "<prefix>.<connection token>.<request
// token>" (the NATS clients' request multiplexer uses one connection token
// per connection). A client that varies the connection token itself gets
// a fresh per-connection bucket each time, but the shared anonymous bucket
// still bounds all anonymous requests together, and named users' inbox
// prefixes cannot be subscribed to by anyone else.
//
// The peer class (busclient.PeerClass) is the request class of a fleet's
// cluster peers — the collector, through a Peer's Connect connection —
// reading a clustered host's replay and head (space.go). Its subjects are
// no local client's to publish (each user's permissions list only its own
// subjects; a Peer's client-port clients only the bare ones), so they reach
// the host only over routes and leaf connections, which authenticate as a
// whole with the cluster's credentials. Guarantees (peerclass_test.go):
//   - A Peer's Connect client made WithPeerClass replays a host over a
//     route or through a hub's leaf connections with the writer's chunks
//     (Options.ReplayChunk*), not the anonymous class's
//     (TestPeerClassOverRoute, TestPeerClassOverLeaf).
//   - The host's anonymous, read-only and writer clients, and a Peer's
//     client-port clients, cannot publish a peer-class subject: a
//     permission violation, no answer (TestPeerClassNotForLocalClients).
//   - Its requests are charged to one bucket of the bus, at the writer's
//     rate unless Limits.PeerRequest* say otherwise, never to the anonymous
//     shared bucket: anonymous clients at their limit do not slow a peer
//     down (TestPeerClassRateNotAnonymous), and fresh reply inboxes or
//     connections mint no fresh buckets, so whoever else can publish the
//     class's subjects costs the host at most that bucket
//     (TestPeerClassSharedBucket).
//   - Its replies go only to the peer inbox prefix (peerInboxPrefix, which
//     a Peer's Connect connections use) and no host's local client may
//     subscribe to that prefix: on a leaf fleet, another host's anonymous
//     client subscribed to the whole _INBOX receives none of them
//     (TestPeerRepliesNotForLocalClients).
//   - Read-only: replay and head only, no append or service; only a
//     clustered bus serves the class, a standalone or fleet bus none
//     (TestPeerClassOnlyClustered, TestPeerClassOverRoute).
//
// Who else can publish them: whatever connection a server of the cluster
// admits with every permission (a Peer's Connect), and, on a leaf fleet,
// the hub's clients allowed to publish the host's API subjects and
// subscribe to the peer inbox prefix. The class is for cluster members: the
// hub account must admit only the fleet's members (docs/fleet.md); a hub
// that admits others costs each host at most the peer bucket.

import (
	"strings"

	"github.com/nats-io/nats.go"
	"sync"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
)

// Defaults of Limits.
const (
	// DefaultMaxConnections bounds client connections (the bus's own two
	// in-process connections included).
	DefaultMaxConnections = 256
	// DefaultReservedNamedConnections of MaxConnections are kept for
	// named users: anonymous clients are refused once the server has
	// MaxConnections minus these, so they cannot lock the writer out.
	DefaultReservedNamedConnections = 16
	// DefaultMaxPendingBytes bounds the outbound data the server holds for
	// one connection that does not read it: 24 such connections cost at
	// most 24 × 4 MiB.
	DefaultMaxPendingBytes = 4 << 20
	// DefaultWriteDeadline bounds one write to a client's socket.
	DefaultWriteDeadline = 5 * time.Second
	// DefaultRequestRate and DefaultRequestBurst are the token bucket of
	// one anonymous or read-only connection's API requests (per second).
	DefaultRequestRate, DefaultRequestBurst = 50, 100
	// DefaultWriterRequestRate and DefaultWriterRequestBurst are the token
	// bucket of one writer connection (appends share a fsync: a writer
	// sends many small requests).
	DefaultWriterRequestRate, DefaultWriterRequestBurst = 50000, 100000
	// DefaultAnonymousRate bounds the API requests of all anonymous
	// connections together (per second; burst twice that).
	DefaultAnonymousRate = 500
	// AnonymousReplayChunkBytes and AnonymousReplayChunkEvents bound one
	// replay reply to an anonymous client: one event of the largest size
	// fits (events.MaxEventBytes).
	AnonymousReplayChunkBytes  = events.MaxEventBytes
	AnonymousReplayChunkEvents = 128
	// ReadOnlyReplayChunkBytes and ReadOnlyReplayChunkEvents bound one
	// replay reply to the read-only user.
	ReadOnlyReplayChunkBytes  = 128 << 10
	ReadOnlyReplayChunkEvents = 256
	// MaxRateTrackedConnections bounds the per-connection buckets kept;
	// beyond it, idle full buckets are forgotten first (at most one scan
	// per second), then new connections share one overflow bucket per
	// class.
	MaxRateTrackedConnections = 4096
)

// Limits bounds what clients may cost the bus; zero fields take the
// defaults above.
type Limits struct {
	MaxConnections int
	// ReservedNamedConnections of MaxConnections only named users may
	// take (anonymous clients are refused beyond the rest).
	ReservedNamedConnections int
	MaxPendingBytes          int64
	WriteDeadline            time.Duration
	// MaxPayload bounds one message; by default the writer's replay chunk
	// plus headroom, at least 1 MiB (so the largest append fits).
	MaxPayload int32
	// RequestRate and RequestBurst: per anonymous, read-only or control connection.
	RequestRate, RequestBurst float64
	// WriterRequestRate and WriterRequestBurst: per writer connection.
	WriterRequestRate, WriterRequestBurst float64
	// PeerRequestRate and PeerRequestBurst: all peer-class requests
	// together (one bucket per bus); the writer's when zero.
	PeerRequestRate, PeerRequestBurst float64
	// AnonymousRate: all anonymous connections together.
	AnonymousRate float64
	// Auth bounds password guessing (see auth.go).
	Auth AuthLimits
	// ServiceConcurrency bounds the service calls of one class of users
	// served at once (services.go).
	ServiceConcurrency int
}

func (l Limits) withDefaults(replayChunkBytes int) Limits {
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.ReservedNamedConnections <= 0 {
		l.ReservedNamedConnections = DefaultReservedNamedConnections
	}
	if l.MaxPendingBytes <= 0 {
		l.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if l.WriteDeadline <= 0 {
		l.WriteDeadline = DefaultWriteDeadline
	}
	if l.MaxPayload <= 0 {
		l.MaxPayload = int32(max(replayChunkBytes+64<<10, 1<<20))
	}
	if l.RequestRate <= 0 {
		l.RequestRate = DefaultRequestRate
	}
	if l.RequestBurst <= 0 {
		l.RequestBurst = DefaultRequestBurst
	}
	if l.WriterRequestRate <= 0 {
		l.WriterRequestRate = DefaultWriterRequestRate
	}
	if l.WriterRequestBurst <= 0 {
		l.WriterRequestBurst = DefaultWriterRequestBurst
	}
	if l.PeerRequestRate <= 0 {
		l.PeerRequestRate = l.WriterRequestRate
	}
	if l.PeerRequestBurst <= 0 {
		l.PeerRequestBurst = l.WriterRequestBurst
	}
	if l.AnonymousRate <= 0 {
		l.AnonymousRate = DefaultAnonymousRate
	}
	if l.ServiceConcurrency <= 0 {
		l.ServiceConcurrency = DefaultServiceConcurrency
	}
	l.Auth = l.Auth.withDefaults()
	return l
}

// class is who a request's reply goes to.
type class int

const (
	classAnonymous class = iota
	classReadOnly
	classWriter
	classControl // the control user: read-only limits, and AccessControl services
	classPeer    // cluster peers (busclient.PeerClass): the writer's chunks and rate, replay and head only
	numClasses
)

// route is who may send requests on a set of request subjects
// (busclient.UserSubject): the server's permissions let only that user (or
// only anonymous clients, user "") publish to them.
type route struct {
	class class
	user  string // "" for anonymous clients
}

// routes are the request subjects' senders of the bus.
func (b *Bus) routes() []route {
	rs := []route{{class: classAnonymous}}
	if b.opts.ReadOnlyUser != "" {
		rs = append(rs, route{class: classReadOnly, user: b.opts.ReadOnlyUser})
	}
	if b.opts.WriterUser != "" {
		rs = append(rs, route{class: classWriter, user: b.opts.WriterUser})
	}
	if b.opts.ControlUser != "" {
		rs = append(rs, route{class: classControl, user: b.opts.ControlUser})
	}
	return rs
}

// peerRoute is the sender of a space's peer-class subjects
// (busclient.PeerClass), and whether the bus serves them: a clustered bus
// (routes or leaf remotes) only, where they can arrive. Its user is
// busclient.PeerClass: the class answers only replies to the peer inbox
// prefix (peerInboxPrefix), which a Peer's Connect connections use.
func (b *Bus) peerRoute() (route, bool) {
	return route{class: classPeer, user: busclient.PeerClass}, b.opts.Cluster.enabled()
}

// peerInboxPrefix is the reply-inbox prefix of a Peer's Connect
// connections ("_INBOX_~peer"). It is not under "_INBOX.", so the anonymous clients' "_INBOX.>" does not
// match it, and no bus user is named PeerClass: no host's local client may
// subscribe to it (TestPeerRepliesNotForLocalClients).
func peerInboxPrefix() string { return busclient.InboxPrefix(busclient.PeerClass) }

// ownInbox reports whether reply is an inbox of r's user: its own prefix,
// and for the anonymous class also the peer inbox (a Peer's Connect
// connection calls the bare, anonymous-class API too).
func ownInbox(reply string, r route) bool {
	return strings.HasPrefix(reply, busclient.InboxPrefix(r.user)+".") ||
		r.class == classAnonymous && strings.HasPrefix(reply, peerInboxPrefix()+".")
}

// checkReply reports whether a request on r's subjects may be answered: its
// reply subject must be an inbox of r's user (ownInbox). NATS does not
// check reply subjects against permissions, so a request whose reply
// claims another user's inbox is refused with an error reply and no work;
// a reply subject that is no inbox at all is not answered.
func (b *Bus) checkReply(m *nats.Msg, r route) bool {
	if !isInbox(m.Reply) {
		return false
	}
	if ownInbox(m.Reply, r) {
		return true
	}
	b.limiter.mu.Lock()
	b.limiter.misrouted++
	b.limiter.mu.Unlock()
	refuse(m, busclient.CodeBadRequest, "the reply inbox is not the requesting user's")
	return false
}

// replayChunk is the chunk bound of a class.
func (b *Bus) replayChunk(c class) (events, bytes int) {
	switch c {
	case classWriter, classPeer:
		return b.opts.ReplayChunkEvents, b.opts.ReplayChunkBytes
	case classReadOnly, classControl:
		return min(b.opts.ReplayChunkEvents, ReadOnlyReplayChunkEvents), min(b.opts.ReplayChunkBytes, ReadOnlyReplayChunkBytes)
	}
	return min(b.opts.ReplayChunkEvents, AnonymousReplayChunkEvents), min(b.opts.ReplayChunkBytes, AnonymousReplayChunkBytes)
}

// connToken is the part of a reply inbox that names the connection:
// "<prefix>.<connection token>".
func connToken(reply string) string {
	i := strings.IndexByte(reply, '.')
	if i < 0 {
		return reply
	}
	if j := strings.IndexByte(reply[i+1:], '.'); j >= 0 {
		return reply[:i+1+j]
	}
	return reply
}

// bucket is a token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

func (k *bucket) take(now time.Time, rate, burst float64) bool {
	if k.last.IsZero() {
		k.tokens = burst
	} else {
		k.tokens = min(burst, k.tokens+rate*now.Sub(k.last).Seconds())
	}
	k.last = now
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}

// rateLimiter holds the buckets of the API's requests.
type rateLimiter struct {
	mu         sync.Mutex
	lim        Limits
	conns      map[string]*connBucket
	overflow   [numClasses]bucket // per class: connections beyond the table share one
	anonymous  bucket
	peer       bucket    // every peer-class request of the bus
	lastForget time.Time // of the last forgetIdle scan
	limited    uint64
	misrouted  uint64 // requests refused: reply inbox of another user
}

// connBucket is one connection's bucket with its class's rate and burst.
type connBucket struct {
	bucket
	rate, burst float64
}

// forgetInterval spaces the scans for idle buckets of a full table, so a
// stream of new connection tokens costs no scan per request.
const forgetInterval = time.Second

func (r *rateLimiter) classRate(c class) (rate, burst float64) {
	switch c {
	case classWriter:
		return r.lim.WriterRequestRate, r.lim.WriterRequestBurst
	case classPeer:
		return r.lim.PeerRequestRate, r.lim.PeerRequestBurst
	}
	return r.lim.RequestRate, r.lim.RequestBurst
}

// allow takes a token for a request whose reply goes to reply. When the
// table is full and nothing in it is idle, a new connection token is
// charged to its class's shared overflow bucket (which runs dry) instead of
// getting a full bucket of its own. Peer-class requests all take from one
// bucket, whatever their inbox.
func (r *rateLimiter) allow(reply string, c class, now time.Time) bool {
	rate, burst := r.classRate(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	key := connToken(reply)
	var k *bucket
	if c == classPeer {
		k = &r.peer
	} else if ck := r.conns[key]; ck != nil {
		k = &ck.bucket
	} else {
		if len(r.conns) >= MaxRateTrackedConnections && now.Sub(r.lastForget) >= forgetInterval {
			r.lastForget = now
			r.forgetIdle(now)
		}
		if len(r.conns) < MaxRateTrackedConnections {
			ck := &connBucket{rate: rate, burst: burst}
			r.conns[key] = ck
			k = &ck.bucket
		} else {
			k = &r.overflow[c]
		}
	}
	ok := k.take(now, rate, burst)
	if ok && c == classAnonymous {
		ok = r.anonymous.take(now, r.lim.AnonymousRate, 2*r.lim.AnonymousRate)
	}
	if !ok {
		r.limited++
	}
	return ok
}

// forgetIdle drops buckets that have refilled completely at their own
// class's rate (their connections sent nothing for a while): forgetting
// them changes nothing.
func (r *rateLimiter) forgetIdle(now time.Time) {
	for key, k := range r.conns {
		if now.Sub(k.last).Seconds()*k.rate >= k.burst {
			delete(r.conns, key)
		}
	}
}
