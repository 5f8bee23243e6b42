package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds and defaults.
const (
	// DefaultMaxLiveLeases is the default hard cap on live leases (ready or
	// starting) per manager, so termination fan-out is always bounded.
	DefaultMaxLiveLeases = 64
	// ReapScanMax is the per-pass reap scan bound for the default cap. A
	// pass scans up to the manager's whole capped map (its MaxLiveLeases
	// entries), so an idle entry can never starve behind a busy prefix.
	ReapScanMax = DefaultMaxLiveLeases
	// DefaultIdleMax is the idle time after which a lease with no call in
	// flight is reaped by an opportunistic pass.
	DefaultIdleMax = 10 * time.Minute
	// DefaultAcquireTimeout bounds one acquisition (spawn, initialize,
	// listing) when the caller's context has no earlier deadline.
	DefaultAcquireTimeout = 30 * time.Second
	// SharedSessionKey is the session component of the lease key of
	// servers configured "shared": true. It is never a real session's key
	// (OpenSession refuses it), and session end skips it explicitly.
	SharedSessionKey = "_shared"
	// factTimeout bounds appending facts after the step they record
	// (termination, call finished), which must not depend on the caller's
	// context still being live.
	factTimeout = 10 * time.Second
	// maxAcquireAttempts bounds how often one call re-acquires after its
	// lease was replaced (stale config, reaped, child exited) under it.
	maxAcquireAttempts = 3
	// cleanupTimeout bounds one cleanup run (session end, TerminateAll,
	// Close) that is detached from the caller's cancellation: cleanup must
	// complete even when the last owner's context already ended. Each
	// termination step is bounded on its own as well (factTimeout, the
	// guardian cleanup budget).
	cleanupTimeout = time.Minute
)

// Appender appends events durably; *ledger.Ledger implements it.
type Appender interface {
	Append(ctx context.Context, drafts ...events.Draft) ([]ledger.Seq, error)
}

// Options configures a Manager.
type Options struct {
	// Config looks up server entries; required.
	Config ConfigSource
	// Ledger receives every event; required.
	Ledger Appender
	// HelperPath is the guardian helper binary (see guardian.Spec).
	HelperPath string
	// MaxLiveLeases caps live leases; DefaultMaxLiveLeases when zero. It is
	// also the per-pass reap scan bound.
	MaxLiveLeases int
	// IdleMax is the opportunistic reap threshold; DefaultIdleMax when zero.
	IdleMax time.Duration
	// AcquireTimeout bounds one acquisition; DefaultAcquireTimeout when zero.
	AcquireTimeout time.Duration
	// Graces of the guardian cleanup sequence (guardian defaults when zero).
	EOFGrace, TermGrace, KillGrace, PipeGrace time.Duration
	// KillDescendants asks the guardian to kill orphaned descendants of a
	// child at cleanup.
	KillDescendants bool
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Manager owns every live MCP child of a runtime. It is safe for
// concurrent use. Close it (or TerminateAll) to end every lease.
type Manager struct {
	opts    Options
	client  *mcp.Client
	maxLive int

	mu       sync.Mutex // guards the maps and closed; never held across I/O
	leases   map[leaseKey]*lease
	sessions map[string]*sessionState
	closed   bool
	// detached holds the leases taken out of the map but not yet
	// terminated (revoked with calls in flight, reaped in the background,
	// stale, poisoned, ended while starting). Their children still live:
	// they count toward MaxLiveLeases, and TerminateAll and Close end them.
	// A lease leaves the set when its termination completes (or its
	// acquisition failed). Bounded by the cap: entries only move here from
	// the map.
	detached map[*lease]struct{}

	lastReap atomic.Int64 // unix ns of the last opportunistic pass
	bg       sync.WaitGroup

	// testHookReapScanned, when set (tests only), runs after a reap pass
	// released the map lock and before its victims are terminated.
	testHookReapScanned func()
}

type leaseKey struct{ session, server string }

// NewManager returns a manager; it starts no goroutine.
func NewManager(opts Options) (*Manager, error) {
	if opts.Config == nil || opts.Ledger == nil {
		return nil, &LeaseError{Op: "new", Kind: ErrInvalidRequest}
	}
	if opts.MaxLiveLeases <= 0 {
		opts.MaxLiveLeases = DefaultMaxLiveLeases
	}
	if opts.IdleMax <= 0 {
		opts.IdleMax = DefaultIdleMax
	}
	if opts.AcquireTimeout <= 0 {
		opts.AcquireTimeout = DefaultAcquireTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "leaseledger", Version: "0.1.0"}, &mcp.ClientOptions{
		// No roots, sampling or elicitation: a lease runs tools and nothing
		// else, and a server must not get a reason to call back.
		Capabilities: &mcp.ClientCapabilities{},
	})
	return &Manager{
		opts: opts, client: client, maxLive: opts.MaxLiveLeases,
		leases: make(map[leaseKey]*lease), sessions: make(map[string]*sessionState),
		detached: make(map[*lease]struct{}),
	}, nil
}

// emit appends drafts under ctx.
func (m *Manager) emit(ctx context.Context, drafts ...events.Draft) error {
	if len(drafts) == 0 {
		return nil
	}
	if _, err := m.opts.Ledger.Append(ctx, drafts...); err != nil {
		return &LeaseError{Op: "append", Kind: ErrLedger, cause: err}
	}
	return nil
}

// emitFact appends facts about a step already taken: detached from the
// caller's cancellation, bounded by factTimeout.
func (m *Manager) emitFact(ctx context.Context, drafts ...events.Draft) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), factTimeout)
	defer cancel()
	return m.emit(ctx, drafts...)
}

func newActivationID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "act-" + hex.EncodeToString(b[:])
}

// keyFor returns the lease key of server for session under cfg.
func keyFor(session, server string, cfg ServerConfig) leaseKey {
	if cfg.Shared {
		return leaseKey{SharedSessionKey, server}
	}
	return leaseKey{session, server}
}

// LeaseSessionKey returns the session component of the lease key of a
// server under cfg: SharedSessionKey for shared servers, else session.
func LeaseSessionKey(session string, cfg ServerConfig) string {
	return keyFor(session, "", cfg).session
}

// acquire returns a ready lease of server for session pinned to cfg's
// fingerprint, starting one if needed. Single-flight: the first caller
// inserts a starting placeholder and does the I/O without the map lock;
// others wait on its ready channel.
func (m *Manager) acquire(ctx context.Context, session, server string, cfg ServerConfig) (*lease, error) {
	key, fp := keyFor(session, server, cfg), cfg.Fingerprint()
	capTried := false
	for attempt := 0; ; attempt++ {
		if attempt >= maxAcquireAttempts {
			return nil, newErr("acquire", &key, ErrTerminated, nil)
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, newErr("acquire", &key, ErrClosed, nil)
		}
		if l := m.leases[key]; l != nil {
			m.mu.Unlock()
			select {
			case <-l.ready:
			case <-ctx.Done():
				return nil, newErr("acquire", &key, ErrTerminated, ctx.Err())
			}
			if l.err != nil {
				if l.acquirerCancelled && ctx.Err() == nil {
					// Only the acquirer's own context ended: that is no
					// verdict on this caller's acquisition. Try again (not
					// counted: each such retry consumed another caller's
					// cancellation).
					attempt--
					continue
				}
				return nil, l.err
			}
			if l.fingerprint != fp {
				// The pinned entry differs from ours. Ours may be the stale
				// one (read before a change a newer lease is pinned to), so
				// decide against the current entry: only a lease whose
				// fingerprint differs from the current entry is replaced.
				cur, err := m.lookup(ctx, session, server)
				if err != nil {
					return nil, err
				}
				if curFP := cur.Fingerprint(); curFP != fp {
					cfg, fp, key = cur, curFP, keyFor(session, server, cur)
					continue
				}
				// Ours is current: a call must never run on the old child.
				// Take it out of service first, then record and end it.
				if m.removeIf(l) {
					l.markGone("stale_config")
					_ = m.emitFact(ctx, l.draft(&events.LeaseStaleReplaced{OldFingerprint: l.fingerprint, NewFingerprint: fp}))
					l.terminate(ctx, "stale_config")
				}
				continue
			}
			if l.childGone() {
				if m.removeIf(l) {
					l.markGone("child_exited")
					l.terminate(ctx, "child_exited")
				}
				continue
			}
			return l, nil
		}
		if len(m.leases)+len(m.detached) >= m.maxLive {
			ending := m.endingLocked()
			m.mu.Unlock()
			if !capTried {
				// Once per acquisition: reap idle leases now, and wait for
				// detached leases already being terminated (a background
				// reap, a stale or poisoned lease) to free their slots.
				capTried = true
				if m.reapPass(ctx, m.opts.IdleMax, true) > 0 || waitTerminated(ctx, ending) > 0 {
					continue
				}
			}
			act := newActivationID()
			_ = m.emit(ctx, events.Draft{Activation: act, Session: key.session, Server: key.server,
				Payload: &events.LeaseAcquireFailed{Fingerprint: fp, Reason: "too_many_leases"}})
			e := newErr("acquire", &key, ErrTooManyLeases, nil)
			e.Count = m.maxLive
			return nil, e
		}
		l := newLease(m, key, cfg, fp)
		m.leases[key] = l
		m.mu.Unlock()

		err := l.start(ctx)
		if err == nil && !m.stillMapped(l) {
			// Removed while starting (session end, TerminateAll): the
			// remover saw a placeholder, so ending the child is ours.
			l.markGone("terminated")
			l.terminate(ctx, "terminated")
			err = newErr("acquire", &key, ErrTerminated, nil)
			err.(*LeaseError).Activation = l.activation
		}
		if err != nil {
			m.removeIf(l)
			m.settled(l)
			l.err = err
			// Waiters whose own context is live retry rather than share a
			// failure that was only this caller's cancellation.
			l.acquirerCancelled = ctx.Err() != nil
		}
		close(l.ready) // wakes every waiter; a closed channel cannot be missed
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// removeIf deletes l from the map if it is still the entry for its key;
// it stays tracked as detached until its termination completes.
func (m *Manager) removeIf(l *lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.key] == l {
		delete(m.leases, l.key)
		m.detached[l] = struct{}{}
		return true
	}
	return false
}

// endingLocked returns the detached ready leases whose termination is
// under way or imminent: every one except revoked leases with calls still
// in flight (those end when their last call returns, which may be never).
// m.mu is held (lock order m.mu, then l.mu).
func (m *Manager) endingLocked() []*lease {
	var out []*lease
	for l := range m.detached {
		if !l.isReady() || l.err != nil {
			continue
		}
		l.mu.Lock()
		if l.state != stateRevoked || l.inflight == 0 {
			out = append(out, l)
		}
		l.mu.Unlock()
	}
	return out
}

// waitTerminated waits (bounded by ctx) for the terminations of ls and
// returns how many completed.
func waitTerminated(ctx context.Context, ls []*lease) int {
	n := 0
	for _, l := range ls {
		select {
		case <-l.termDone:
			n++
		case <-ctx.Done():
			return n
		}
	}
	return n
}

// settled forgets a detached lease whose termination completed (or whose
// acquisition failed, so it has no child).
func (m *Manager) settled(l *lease) {
	m.mu.Lock()
	delete(m.detached, l)
	m.mu.Unlock()
}

func (m *Manager) stillMapped(l *lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leases[l.key] == l
}

// maybeReap runs an opportunistic pass at most every IdleMax/4 (and at
// least every second), so a hot call path does not scan the map on every
// call. Reaped leases end in background goroutines the manager waits for
// in Close; there is never more than one per lease.
func (m *Manager) maybeReap(ctx context.Context) {
	now := m.opts.Now()
	every := min(max(m.opts.IdleMax/4, time.Millisecond), time.Second)
	last := m.lastReap.Load()
	if now.UnixNano()-last < int64(every) || !m.lastReap.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	m.reapPass(ctx, m.opts.IdleMax, false)
}

// reapPass scans at most maxLive entries and removes leases idle for at
// least idleMax with no call in flight. sync terminates them before
// returning; otherwise in tracked background goroutines. Shared leases are
// reaped too.
func (m *Manager) reapPass(ctx context.Context, idleMax time.Duration, sync bool) int {
	now := m.opts.Now()
	type victim struct {
		l    *lease
		idle time.Duration
	}
	var victims []victim
	m.mu.Lock()
	if m.closed {
		// Close ends every lease itself and must not race a pass whose
		// background terminations it could miss.
		m.mu.Unlock()
		return 0
	}
	scanned := 0
	for k, l := range m.leases {
		if scanned >= m.maxLive {
			break
		}
		scanned++
		if !l.isReady() || l.err != nil {
			continue
		}
		// Lock order: m.mu then l.mu; l.mu is never held while taking m.mu.
		l.mu.Lock()
		idle := now.Sub(l.lastUsed)
		if l.state == stateActive && l.inflight == 0 && idle >= idleMax {
			l.state, l.goneReason = stateGone, "reaped"
			victims = append(victims, victim{l, idle})
			delete(m.leases, k)
			m.detached[l] = struct{}{}
		}
		l.mu.Unlock()
	}
	if !sync {
		// Registered under the lock that Close takes to set closed, so
		// Close's bg.Wait covers every background termination of a pass
		// that ran before it.
		m.bg.Add(len(victims))
	}
	m.mu.Unlock()
	if h := m.testHookReapScanned; h != nil {
		h()
	}
	for _, v := range victims {
		run := func() {
			_ = m.emitFact(ctx, v.l.draft(&events.LeaseReaped{IdleNS: int64(v.idle), IdleMaxNS: int64(max(idleMax, 1))}))
			v.l.terminate(ctx, "reaped")
		}
		if sync {
			run()
			continue
		}
		go func() {
			defer m.bg.Done()
			run()
		}()
	}
	return len(victims)
}

// ReapIdle runs one reap pass now (shared leases included) with idleMax
// (the manager's IdleMax when zero) and ends the reaped leases before
// returning. It scans at most MaxLiveLeases entries and returns how many
// leases it reaped.
func (m *Manager) ReapIdle(ctx context.Context, idleMax time.Duration) int {
	if idleMax <= 0 {
		idleMax = m.opts.IdleMax
	}
	return m.reapPass(ctx, idleMax, true)
}

// TerminateAll ends every lease, shared ones included, and the leases
// already out of the map whose children still live (revoked with calls in
// flight, reaped in the background, stale), and waits for their cleanup.
// Calls in flight on them fail. The manager stays usable. Cleanup runs
// detached from ctx's cancellation (bounded by its own timeout); ctx only
// bounds waiting for leases still starting, whose acquirers end them.
func (m *Manager) TerminateAll(ctx context.Context) {
	m.mu.Lock()
	for k, l := range m.leases {
		delete(m.leases, k)
		m.detached[l] = struct{}{}
	}
	all := make([]*lease, 0, len(m.detached))
	for l := range m.detached {
		all = append(all, l)
	}
	m.mu.Unlock()
	terminateAll(ctx, all, "terminate_all")
}

// terminateAll ends leases in parallel (bounded by MaxLiveLeases, the cap
// on mapped plus detached leases) and waits for all of them. A ready lease
// is always ended, under a context detached from ctx's cancellation; ctx
// only bounds waiting for a lease still starting (its acquirer finds it
// unmapped and ends it itself).
func terminateAll(ctx context.Context, ls []*lease, reason string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !l.isReady() {
				select {
				case <-l.ready:
				case <-ctx.Done():
					// Still starting: its acquirer finds it unmapped and ends it.
					return
				}
			}
			if l.err != nil {
				return
			}
			l.markGone(reason)
			l.terminate(cctx, reason)
		}()
	}
	wg.Wait()
}

// Close refuses further acquisitions, ends every lease and waits for
// background cleanups. It is idempotent.
func (m *Manager) Close(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.TerminateAll(ctx)
	m.bg.Wait()
}

// Revoke marks the lease of server for session (or the shared lease, when
// the server is shared and the session has none of its own) cancelled
// under its call gate, and returns once no further call can pass that gate
// and lease.revoked is durable. Calls already past the gate may complete;
// the last of them to complete kills the child before returning. With no
// call in flight, Revoke ends the child itself. Revoking nothing is not an
// error; reason is a machine code ([a-z0-9_]{1,64}).
func (m *Manager) Revoke(ctx context.Context, session, server, reason string) error {
	if !events.ValidID(session) || !events.ValidID(server) || !validCode(reason) {
		return newErr("revoke", nil, ErrInvalidRequest, nil)
	}
	m.mu.Lock()
	l := m.leases[leaseKey{session, server}]
	if l == nil {
		l = m.leases[leaseKey{SharedSessionKey, server}]
	}
	m.mu.Unlock()
	if l == nil {
		return nil
	}
	select {
	case <-l.ready:
	case <-ctx.Done():
		return newErr("revoke", &l.key, ErrTerminated, ctx.Err())
	}
	if l.err != nil {
		return nil
	}
	return l.revoke(ctx, reason)
}

func validCode(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// LeaseInfo is a snapshot of one live lease, from the runtime's own map.
type LeaseInfo struct {
	Session     string // the key's session: a session or SharedSessionKey
	Server      string
	Activation  string
	Fingerprint string
	Ready       bool
	State       string // starting, active, revoked, poisoned, gone
	InFlight    int
	Calls       uint64
	TargetPID   int
	HelperPID   int
	ToolCount   int
	LastUsed    time.Time
}

// Leases returns a snapshot of the live lease map (the ledger's lease
// projection is the durable view; this is the manager's working set).
func (m *Manager) Leases() []LeaseInfo {
	m.mu.Lock()
	ls := make([]*lease, 0, len(m.leases))
	for _, l := range m.leases {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	out := make([]LeaseInfo, 0, len(ls))
	for _, l := range ls {
		in := LeaseInfo{Session: l.key.session, Server: l.key.server, Activation: l.activation, Fingerprint: l.fingerprint, State: "starting"}
		if l.isReady() && l.err == nil {
			in.Ready = true
			in.TargetPID, in.HelperPID, in.ToolCount = l.gs.TargetPID(), l.gs.HelperPID(), len(l.listing.Tools)
			l.mu.Lock()
			in.State, in.InFlight, in.LastUsed = l.state.String(), l.inflight, l.lastUsed
			l.mu.Unlock()
			in.Calls = l.calls.Load()
		}
		out = append(out, in)
	}
	return out
}

// launchSpec is the guardian spec of a lease.
func (m *Manager) launchSpec(l *lease) guardian.Spec {
	return guardian.Spec{
		Command: l.cfg.Command, Args: l.cfg.Args, Env: l.cfg.envList(), Dir: l.cfg.Cwd, ActivationID: l.activation,
		EOFGrace: m.opts.EOFGrace, TermGrace: m.opts.TermGrace, KillGrace: m.opts.KillGrace, PipeGrace: m.opts.PipeGrace,
		KillDescendants: m.opts.KillDescendants, HelperPath: m.opts.HelperPath,
	}
}
