package policy

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// Cache bounds.
const (
	// MaxCachedDecisions bounds the decisions one SessionAccess keeps;
	// beyond it, new questions are decided and not stored, so a session
	// that asks about ever new targets costs CPU, never memory.
	MaxCachedDecisions = 4096
	// MaxCachedTargetBytes bounds the target of a cached question: a
	// longer one (a resource URI, say) is decided and not stored, so the
	// cache's memory is bounded by MaxCachedDecisions times a small key.
	MaxCachedTargetBytes = 1024
)

// Engine holds the policy set in force and swaps it atomically on a
// reload. It is safe for concurrent use. A nil set allows everything:
// the host runs without a policy (events.PolicyAllowAll).
type Engine struct {
	cur atomic.Pointer[engineState]
	// gen numbers the states; written only under swapMu.
	gen    uint64
	swapMu sync.Mutex
}

// engineState is one set in force. Every Swap makes a new one, so a
// session's cache compares a pointer (and its generation) to know
// whether its entries still hold.
type engineState struct {
	set *Set
	gen uint64
}

// NewEngine returns an Engine with set in force (nil: allow all).
func NewEngine(set *Set) *Engine {
	e := &Engine{}
	e.cur.Store(&engineState{set: set})
	return e
}

// Swap puts set in force (nil: allow all). Decisions asked after Swap
// returns are decided under set; every session's cached decisions of the
// previous set are dropped on their next use.
func (e *Engine) Swap(set *Set) {
	e.swapMu.Lock()
	defer e.swapMu.Unlock()
	e.gen++
	e.cur.Store(&engineState{set: set, gen: e.gen})
}

// Current returns the set in force (nil: allow all).
func (e *Engine) Current() *Set { return e.cur.Load().set }

// Session returns the decisions of one session: principal (the token
// name, "" without tokens), the session id and the client's address (zero:
// unknown) are fixed for its life.
func (e *Engine) Session(principal, session string, addr netip.Addr) *SessionAccess {
	return &SessionAccess{e: e, principal: principal, session: session, addr: addr}
}

// SessionAccess decides one session's questions under the Engine's set in
// force, caching each decision: an allowed (or denied) repeat costs a
// mutex and a map lookup instead of a Cedar evaluation. It is safe for
// concurrent use.
//
// A cached decision is keyed by the question (action, server, target,
// ref, hints) and belongs to the set it was decided under: when the
// Engine's set changes, the cache is emptied on its next use, so no
// decision outlives the set that made it. A set that reads context.time
// (Set.ReadsTime) is never cached: its answer may change with the clock,
// and caching it would freeze a time window open or shut. Such a set
// pays a Cedar evaluation per question; write time rules only when they
// are needed.
type SessionAccess struct {
	e         *Engine
	principal string
	session   string
	addr      netip.Addr

	mu    sync.Mutex
	state *engineState // the set the cache belongs to
	cache map[cacheKey]Decision
}

// cacheKey is a normalized question of one session.
type cacheKey struct {
	action events.AccessAction
	server string
	target string
	ref    events.CompletionRef
	hints  ToolHints
}

// Decide answers whether the session may do action on server (and target
// on it, see Request) under the set in force, and returns the digest of
// that set ("" when none is: allow all). hints matter to call_tool only,
// ref to complete only.
func (a *SessionAccess) Decide(action events.AccessAction, server, target string, ref events.CompletionRef, hints ToolHints) (Decision, string) {
	st := a.e.cur.Load()
	if st.set == nil {
		return Decision{Allowed: true}, ""
	}
	r := Request{Principal: a.principal, Action: action, Server: server, Target: target, Ref: ref,
		Session: a.session, ClientAddr: a.addr, Hints: hints}.normalized()
	if st.set.readsTime || len(r.Target) > MaxCachedTargetBytes {
		r.Time = time.Now()
		return st.set.Decide(r), st.set.digest
	}
	key := cacheKey{action: r.Action, server: r.Server, target: r.Target, ref: r.Ref, hints: r.Hints}
	a.mu.Lock()
	if a.state == nil || a.state.gen < st.gen {
		a.state = st
		if a.cache == nil {
			a.cache = make(map[cacheKey]Decision)
		}
		clear(a.cache)
	}
	d, ok := a.cache[key]
	current := a.state == st
	a.mu.Unlock()
	if ok && current {
		return d, st.set.digest
	}
	// Decided outside the lock: a Cedar evaluation is microseconds, and
	// the session's other questions need not wait for it. The set does
	// not read the time, but the schema requires one.
	r.Time = time.Now()
	d = st.set.Decide(r)
	a.mu.Lock()
	// Stored only under the set it was decided with; a question that
	// raced a Swap is answered under the set it loaded, and not stored.
	if a.state == st && len(a.cache) < MaxCachedDecisions {
		a.cache[key] = d
	}
	a.mu.Unlock()
	return d, st.set.digest
}

// cached returns how many decisions the session holds (tests).
func (a *SessionAccess) cached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.cache)
}
