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

	lastReap atomic.Int64 // unix ns of the last opportunistic pass
	bg       sync.WaitGroup
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

// acquire returns a ready lease for key pinned to fp, starting one if
// needed. Single-flight: the first caller inserts a starting placeholder
// and does the I/O without the map lock; others wait on its ready channel.
func (m *Manager) acquire(ctx context.Context, key leaseKey, cfg ServerConfig, fp string) (*lease, error) {
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
				return nil, l.err
			}
			if l.fingerprint != fp {
				// The entry changed since this lease was pinned: a call must
				// never run on the old child. Replace it, recorded.
				if m.removeIf(l) {
					_ = m.emitFact(ctx, l.draft(&events.LeaseStaleReplaced{OldFingerprint: l.fingerprint, NewFingerprint: fp}))
					l.markGone("stale_config")
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
		if len(m.leases) >= m.maxLive {
			m.mu.Unlock()
			if attempt == 0 && m.reapPass(ctx, m.opts.IdleMax, true) > 0 {
				continue
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
			l.err = err
		}
		close(l.ready) // wakes every waiter; a closed channel cannot be missed
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// removeIf deletes l from the map if it is still the entry for its key.
func (m *Manager) removeIf(l *lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.key] == l {
		delete(m.leases, l.key)
		return true
	}
	return false
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
		}
		l.mu.Unlock()
	}
	m.mu.Unlock()
	for _, v := range victims {
		run := func() {
			_ = m.emitFact(ctx, v.l.draft(&events.LeaseReaped{IdleNS: int64(v.idle), IdleMaxNS: int64(max(idleMax, 1))}))
			v.l.terminate(ctx, "reaped")
		}
		if sync {
			run()
			continue
		}
		m.bg.Add(1)
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

// TerminateAll ends every lease, shared ones included, and waits for their
// cleanup. Calls in flight on them fail. The manager stays usable.
func (m *Manager) TerminateAll(ctx context.Context) {
	m.mu.Lock()
	all := make([]*lease, 0, len(m.leases))
	for k, l := range m.leases {
		all = append(all, l)
		delete(m.leases, k)
	}
	m.mu.Unlock()
	terminateAll(ctx, all, "terminate_all")
}

// terminateAll ends leases in parallel (bounded by MaxLiveLeases, the map's
// cap) and waits for all of them.
func terminateAll(ctx context.Context, ls []*lease, reason string) {
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-l.ready:
			case <-ctx.Done():
				// Still starting: its acquirer finds it unmapped and ends it.
				return
			}
			if l.err != nil {
				return
			}
			l.markGone(reason)
			l.terminate(ctx, reason)
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
