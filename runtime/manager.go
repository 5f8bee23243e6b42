package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
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
	// DefaultCallTimeout is the budget of one tool call when neither
	// Options.CallTimeout nor the server's "callTimeout" sets one (the
	// caller's own deadline applies when earlier). At expiry the call ends
	// with ErrCallTimeout, the server is sent notifications/cancelled and
	// call.finished records outcome timeout; the lease is kept (the server
	// may still be running the call) until MaxConsecutiveTimeouts.
	DefaultCallTimeout = 5 * time.Minute
	// MaxCallTimeout bounds a configured call budget.
	MaxCallTimeout = 24 * time.Hour
	// MaxConsecutiveTimeouts is how many calls in a row of one lease may
	// run past their budget before the lease is retired
	// (lease.terminated{wedged}, its child ended): a server that answers
	// none of them is wedged, and the next call starts a fresh one.
	MaxConsecutiveTimeouts = 3
	// SharedSessionKey is the session component of the lease key of
	// servers configured "shared": true. It is never a real session's key
	// (OpenSession refuses it), and session end skips it explicitly. Its
	// value is the vocabulary's (events.SharedSessionKey), which readers
	// of the log use.
	SharedSessionKey = events.SharedSessionKey
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
	// maxKeptErrs bounds the recording failures kept for the next
	// TerminateAll or Close (see Manager.keep); beyond it only a count is
	// kept, so a failing ledger cannot grow the manager's memory.
	maxKeptErrs = 64
)

// Appender appends events durably and returns their seqs; it returns only
// once they are durable. An error means either that nothing of the call
// was written or, when the append was abandoned after it was handed over
// (a cancelled wait, a lost reply), that it is in doubt: it may be durable.
// The runtime therefore appends every record it must pair with a later one
// (a call's admission) detached from the caller's cancellation.
// *ledger.Ledger implements it, and so does the remote bus appender: the
// runtime names no ledger type.
type Appender interface {
	Append(ctx context.Context, drafts ...events.Draft) ([]events.Seq, error)
}

// Options configures a Manager.
type Options struct {
	// Config looks up server entries; required.
	Config ConfigSource
	// Ledger receives every event; required.
	Ledger Appender
	// HelperPath is the guardian helper binary (see guardian.Spec).
	HelperPath string
	// HelperArgs are the helper's arguments after argv[0] (see
	// guardian.Spec): serve sets HelperPath to its own executable and
	// HelperArgs to the argument that makes it act as the helper.
	HelperArgs []string
	// MaxLiveLeases caps live leases; DefaultMaxLiveLeases when zero. It is
	// also the per-pass reap scan bound.
	MaxLiveLeases int
	// IdleMax is the opportunistic reap threshold; DefaultIdleMax when zero.
	IdleMax time.Duration
	// AcquireTimeout bounds one acquisition; DefaultAcquireTimeout when zero.
	AcquireTimeout time.Duration
	// CallTimeout is the budget of one tool call of a server whose config
	// sets none; DefaultCallTimeout when zero, at most MaxCallTimeout.
	CallTimeout time.Duration
	// EOFGrace, TermGrace, KillGrace and PipeGrace are the graces of the
	// guardian cleanup sequence (guardian defaults when zero).
	EOFGrace, TermGrace, KillGrace, PipeGrace time.Duration
	// KillDescendants asks the guardian to kill orphaned descendants of a
	// child at cleanup.
	KillDescendants bool
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// MaxRetainedReports bounds the close reports the manager retains
	// (ConnectionStatus); DefaultMaxRetainedReports when zero.
	MaxRetainedReports int
	// ReapInterval, when positive, runs a background reaper: one goroutine
	// started by NewManager that runs a reap pass (IdleMax) every
	// ReapInterval, so idle leases (shared ones included) end without
	// traffic. Close stops it and waits for it. Zero: no reaper, reaping
	// stays opportunistic (and ReapIdle).
	ReapInterval time.Duration
	// StderrLog, when set, receives every line a lease's child writes to
	// stderr (see stderr.go): the lease key's session, the server id, the
	// activation and the line without its newline. It is called from the
	// guardian's reader goroutine, so it must not block, and must not keep
	// line. Server stderr never reaches events or errors.
	StderrLog func(session, server, activation string, line []byte)
	// HTTPConnectTimeout, HTTPReceiveTimeout and HTTPRequestTimeout are the
	// three timeouts of HTTP servers' requests (http.go); the
	// DefaultHTTP…Timeout values when zero. The receive timeout's
	// first-byte wait starts once a request is written, so a slow dial is
	// always the connect timeout's, whichever is shorter.
	HTTPConnectTimeout, HTTPReceiveTimeout, HTTPRequestTimeout time.Duration
}

// Manager owns every live MCP child of a runtime. It is safe for
// concurrent use. Close it (or TerminateAll) to end every lease.
type Manager struct {
	opts    Options
	maxLive int
	// launch starts children: launchGuardian, or an in-process fake in
	// tests (set before the manager is used).
	launch launchFunc
	// http is the one private HTTP boundary of the manager's HTTP leases
	// (http.go), built on first use.
	httpOnce sync.Once
	http     *httpBoundary
	// fpKey keys the fingerprints of this manager (ServerConfig.Fingerprint):
	// random, drawn in NewManager, never recorded.
	fpKey []byte
	// fpMemo memoises fingerprints under fpKey (see fingerprint).
	fpMemo fingerprintMemo

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
	// conns indexes leases by activation, holds one-shot claims and the
	// retained close reports (connection.go); guarded by mu.
	conns connTable

	lastReap atomic.Int64 // unix ns of the last opportunistic pass
	bg       sync.WaitGroup
	// stopReaper ends the background reaper (Options.ReapInterval); nil
	// when there is none. Close closes it.
	stopReaper chan struct{}

	// denyMu guards denied, the keys Deny and DenyShared denied (see
	// revoke.go). It is a leaf lock: the call gate takes it under a
	// lease's gate lock, and nothing is taken while it is held.
	denyMu sync.Mutex
	denied map[leaseKey]struct{}

	// subs are the sessions' resource subscriptions (subscriptions.go);
	// a leaf lock of its own, never held across I/O.
	subs subTable

	// kept holds recording failures no caller could be told about (see
	// keep); errMu guards it and dropped.
	errMu   sync.Mutex
	kept    []error
	dropped int
	// facts counts facts appended without waiting for their durability
	// (emitFactAsync); Close waits for them. deferred holds those not yet
	// queued.
	facts    pendingFacts
	deferred deferredFacts

	// Test hooks, nil outside tests; set before the manager is used. They
	// let tests wait for a state instead of sleeping through a window.
	//
	// testHookReapScanned runs after a reap pass released the map lock and
	// before its victims are terminated.
	testHookReapScanned func()
	// testHookDenyChecked runs in an acquisition after its first denial
	// check, before it takes the map lock (the window Deny can race).
	testHookDenyChecked func()
	// testHookWaiting runs when a caller parks on another caller's
	// acquisition (a starting placeholder).
	testHookWaiting func(session, server string)
	// testHookRevokeWaiting runs when a Revoke finds the lease already
	// revoked and waits for lease.revoked to become durable.
	testHookRevokeWaiting func()
	// testHookCloseWaiting runs in Close after its terminations, before it
	// waits for background reaps.
	testHookCloseWaiting func()
	// testHookRegister runs before a resource request's registration is
	// appended.
	testHookRegister func(*ResourceHandle)
	// testHookRequestAdmitted runs after a resource request's admission
	// ended (its registration durable), before its worker starts.
	testHookRequestAdmitted func(*ResourceHandle)
	// testHookWorkerReleasing runs in a resource request's worker after
	// its request settled, before it releases the lease and the session.
	testHookWorkerReleasing func(*ResourceHandle)
}

type leaseKey struct{ session, server string }

// NewManager returns a manager. It starts no goroutine, except the
// background reaper when opts.ReapInterval is positive.
func NewManager(opts Options) (*Manager, error) {
	if opts.Config == nil || opts.Ledger == nil {
		return nil, &LeaseError{Op: "new", Err: ErrInvalidRequest}
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
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	opts.CallTimeout = min(opts.CallTimeout, MaxCallTimeout)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// Each lease has its own client (lease.newClient), declaring what its
	// session's client declared.
	m := &Manager{
		opts: opts, maxLive: opts.MaxLiveLeases, launch: launchGuardian,
		leases: make(map[leaseKey]*lease), sessions: make(map[string]*sessionState),
		detached: make(map[*lease]struct{}), fpKey: make([]byte, FingerprintKeyBytes),
	}
	if _, err := rand.Read(m.fpKey); err != nil {
		return nil, &LeaseError{Op: "new", Err: err}
	}
	if opts.ReapInterval > 0 {
		m.startReaper(opts.ReapInterval)
	}
	return m, nil
}

// emit appends drafts under ctx.
func (m *Manager) emit(ctx context.Context, drafts ...events.Draft) error {
	if len(drafts) == 0 {
		return nil
	}
	if aa, ok := m.opts.Ledger.(AsyncAppender); ok {
		return m.emitAsync(ctx, aa, drafts)
	}
	if _, err := m.opts.Ledger.Append(ctx, drafts...); err != nil {
		return appendErr(err, drafts)
	}
	return nil
}

// appendErr is the error of a failed append of drafts (at least one).
func appendErr(err error, drafts []events.Draft) error {
	e := &LeaseError{Op: "append", Err: ErrLedger, cause: err}
	if d := drafts[0]; d.Activation != "" || d.Session != "" {
		e.Session, e.Server, e.Activation = d.Session, d.Server, d.Activation
	}
	return e
}

// emitFact appends facts about a step already taken: detached from the
// caller's cancellation, bounded by factTimeout.
func (m *Manager) emitFact(ctx context.Context, drafts ...events.Draft) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), factTimeout)
	defer cancel()
	return m.emit(ctx, drafts...)
}

// keep holds a recording failure that no caller can be told about (a
// background reap, the session end run by a call's deferred release, a
// call's own facts, a lease ended inside an acquisition), so the next
// TerminateAll or Close returns it: every failure to record reaches some
// caller once, and none is dropped silently.
func (m *Manager) keep(err error) {
	if err == nil {
		return
	}
	m.errMu.Lock()
	defer m.errMu.Unlock()
	if len(m.kept) >= maxKeptErrs {
		m.dropped++
		return
	}
	m.kept = append(m.kept, err)
}

// takeKept returns and forgets the kept failures.
func (m *Manager) takeKept() error {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	errs := m.kept
	if m.dropped > 0 {
		errs = append(errs, &LeaseError{Op: "append", Err: ErrLedger, Count: m.dropped})
	}
	m.kept, m.dropped = nil, 0
	return errors.Join(errs...)
}

func newActivationID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "act-" + hex.EncodeToString(b[:])
}

// keyFor returns the lease key of server (a config name) for session under
// cfg: keys, like events, carry the server id (see ServerID).
func keyFor(session, server string, cfg ServerConfig) leaseKey {
	if cfg.Shared {
		return leaseKey{SharedSessionKey, serverID(server)}
	}
	return leaseKey{session, serverID(server)}
}

// TerminateAll ends every lease, shared ones included, and the leases
// already out of the map whose children still live (revoked with calls in
// flight, reaped in the background, stale), and waits for their cleanup.
// Calls in flight on them fail. The manager stays usable. Cleanup runs
// detached from ctx's cancellation (bounded by its own timeout); ctx only
// bounds waiting for leases still starting, whose acquirers end them.
//
// The error joins every event that failed to record: those of these
// terminations, and those kept since the last TerminateAll or Close from
// work no caller waited for (background reaps, session ends run by a
// call's release, a call's own facts). It is nil when everything was
// recorded; the leases are ended either way.
func (m *Manager) TerminateAll(ctx context.Context) error {
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
	err := terminateAll(ctx, all, events.TerminatedAll)
	return errors.Join(err, m.takeKept())
}

// terminateAll ends leases in parallel (bounded by MaxLiveLeases, the cap
// on mapped plus detached leases), waits for all of them and joins their
// recording failures. A ready lease is always ended, under a context
// detached from ctx's cancellation; ctx only bounds waiting for a lease
// still starting (its acquirer finds it unmapped and ends it itself).
func terminateAll(ctx context.Context, ls []*lease, reason events.TerminationReason) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(ls))
	for i, l := range ls {
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
			errs[i] = l.terminate(cctx, reason)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close refuses further acquisitions, stops the background reaper, ends
// every lease and waits for background cleanups. It is idempotent. Its error is TerminateAll's plus
// the failures of the background cleanups it waited for; nil when
// everything was recorded.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	first := !m.closed
	m.closed = true
	m.mu.Unlock()
	if first && m.stopReaper != nil {
		close(m.stopReaper) // bg.Wait below waits for the reaper to return
	}
	err := m.TerminateAll(ctx)
	if h := m.testHookCloseWaiting; h != nil {
		h()
	}
	m.bg.Wait()
	m.closeHTTP()
	// Calls that finished on leases ended earlier: their call.finished is
	// durable (or its failure kept) before Close returns.
	m.awaitFacts(nil)
	return errors.Join(err, m.takeKept())
}
