package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type leaseState int

const (
	stateActive   leaseState = iota
	stateRevoked             // cancelled under the gate; the last in-flight call kills the child
	statePoisoned            // a call named a tool or digest the listing does not have
	stateGone                // terminated for another reason (goneReason)
)

func (s leaseState) String() string {
	switch s {
	case stateActive:
		return "active"
	case stateRevoked:
		return "revoked"
	case statePoisoned:
		return "poisoned"
	default:
		return "gone"
	}
}

// lease is one child MCP server. Fields above ready are fixed at creation;
// err, gs, cs, wire and listing are written by the acquirer before ready
// is closed and only read after; the gate fields are guarded by mu.
type lease struct {
	m           *Manager
	key         leaseKey
	cfg         ServerConfig
	fingerprint string
	activation  string
	ready       chan struct{}

	err error
	// acquirerCancelled: the acquisition failed while the acquirer's own
	// context had ended (waiters with a live context retry).
	acquirerCancelled bool
	gs                *guardian.Session
	cs                *mcp.ClientSession
	wire              wireStats
	listing           *Listing

	// mu is the per-lease call gate.
	mu         sync.Mutex
	state      leaseState
	goneReason string
	inflight   int
	lastUsed   time.Time
	// admitting counts calls past the gate whose call.admitted append is
	// not yet acknowledged. Adds happen only under mu while the state is
	// active, so waiting on it after leaving active is race-free; it keeps
	// every admitted event before lease.revoked / lease.terminated.
	admitting sync.WaitGroup
	// revokedLogged is closed once lease.revoked is durable, so a call
	// completing after revocation records its end after the revocation.
	revokedLogged chan struct{}

	calls atomic.Uint64

	termOnce sync.Once
	termDone chan struct{}
	cleanup  guardian.CleanupResult
}

func newLease(m *Manager, key leaseKey, cfg ServerConfig, fp string) *lease {
	return &lease{m: m, key: key, cfg: cfg, fingerprint: fp, activation: newActivationID(),
		ready: make(chan struct{}), revokedLogged: make(chan struct{}), termDone: make(chan struct{})}
}

func (l *lease) draft(p events.Payload) events.Draft {
	return events.Draft{Activation: l.activation, Session: l.key.session, Server: l.key.server, Payload: p}
}

func (l *lease) isReady() bool {
	select {
	case <-l.ready:
		return true
	default:
		return false
	}
}

// childGone reports whether the guardian session already ended (the child
// exited, or the helper was lost).
func (l *lease) childGone() bool {
	select {
	case <-l.gs.Done():
		return true
	default:
		return false
	}
}

// markGone moves an active lease out of service under the gate.
func (l *lease) markGone(reason string) {
	l.mu.Lock()
	if l.state == stateActive {
		l.state, l.goneReason = stateGone, reason
	}
	l.mu.Unlock()
}

// start does the acquisition I/O: one child through the guardian, MCP
// initialize, one listing. Every step is an event; on failure the started
// child is terminated (with its guardian evidence) before returning.
func (l *lease) start(ctx context.Context) error {
	m := l.m
	t0 := m.opts.Now()
	ctx, cancel := context.WithTimeout(ctx, m.opts.AcquireTimeout)
	defer cancel()
	if err := m.emit(ctx, l.draft(&events.LeaseAcquiring{KeySession: l.key.session, Fingerprint: l.fingerprint, Shared: l.cfg.Shared})); err != nil {
		return err
	}
	fail := func(reason string, kind error, cause error) error {
		_ = m.emitFact(ctx, l.draft(&events.LeaseAcquireFailed{Fingerprint: l.fingerprint, Reason: reason, DurationNS: since(m.opts.Now(), t0)}))
		if l.gs != nil {
			l.terminate(ctx, "acquire_failed")
		}
		e := newErr("acquire", &l.key, kind, cause)
		e.Activation = l.activation
		return e
	}
	gs, err := guardian.Launch(ctx, m.launchSpec(l))
	if err != nil {
		// guardian errors are our own words (no child output), so keep them.
		return fail("spawn_failed", ErrSpawn, err)
	}
	l.gs = gs
	if err := m.emit(ctx, GuardianStartedDraft(l.activation, l.key.session, l.key.server, gs),
		l.draft(&events.LeaseChildStarted{PID: gs.TargetPID(), GuardianPID: gs.HelperPID(), Cleanup: "verified"}),
		l.draft(&events.ConnectionOpened{Transport: "stdio", Cleanup: "verified"})); err != nil {
		return fail("ledger_failed", ErrLedger, nil)
	}
	cs, err := m.client.Connect(ctx, &guardianTransport{stream: gs.Stream(), wire: &l.wire}, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		return fail("initialize_failed", ErrInitialize, ctxCause(ctx))
	}
	l.cs = cs
	listing, err := fetchListing(ctx, cs)
	if err != nil {
		if errors.Is(err, ErrListingTooLarge) {
			return fail("listing_too_large", ErrListingTooLarge, nil)
		}
		return fail("listing_failed", ErrListing, ctxCause(ctx))
	}
	l.listing = listing
	now := m.opts.Now()
	l.lastUsed = now
	if err := m.emit(ctx,
		l.draft(&events.LeaseListingPinned{ToolCount: len(listing.Tools), Pages: listing.Pages, ListingBytes: listing.Bytes, ListingDigest: listing.Digest}),
		l.draft(&events.LeaseAcquired{Fingerprint: l.fingerprint, DurationNS: since(now, t0)})); err != nil {
		return fail("ledger_failed", ErrLedger, nil)
	}
	return nil
}

// ctxCause returns ctx's error when it ended (a local cause worth keeping),
// else nil: any other failure's text may come from the server.
func ctxCause(ctx context.Context) error { return ctx.Err() }

// terminate ends the lease once: lease.terminated, then the client and the
// guardian session are closed and the cleanup facts appended. Concurrent
// callers wait for the first. The caller has already taken the lease out
// of the map and out of service (or it never entered service).
func (l *lease) terminate(ctx context.Context, reason string) guardian.CleanupResult {
	l.termOnce.Do(func() {
		m := l.m
		defer close(l.termDone)
		defer m.settled(l) // no longer counts toward the cap, nothing left for Close
		// Admitted events are durable before the termination is recorded.
		l.admitting.Wait()
		budget := m.launchSpec(l).CleanupBudget() + time.Second
		first := []events.Draft{l.draft(&events.LeaseTerminated{Reason: reason})}
		if l.gs != nil {
			first = append(first, l.draft(&events.ConnectionPhase{Phase: "closing", BudgetNS: int64(budget)}))
		}
		_ = m.emitFact(ctx, first...)
		if l.gs == nil {
			return
		}
		// The close obligations of the activation's connection (seed 000's
		// close report, computed by the projector): transport = the MCP
		// client session, workers = its goroutines and the guardian
		// session's (both gone when Close returns), supervisor = the
		// guardian's verified cleanup of the child.
		t0 := time.Now()
		transport := "ok"
		l.mu.Lock()
		busy := l.inflight > 0
		l.mu.Unlock()
		if busy {
			// Calls are still in flight (TerminateAll or Close on a revoked
			// lease whose calls hang): the client session's Close would
			// wait for them. Detach the guardian stream first, which
			// unblocks the connection's reads and writes, so those calls
			// fail now; the child's cleanup below is unchanged.
			_ = l.gs.Stream().Close()
		}
		if l.cs != nil {
			if err := l.cs.Close(); err != nil && !errors.Is(err, mcp.ErrConnectionClosed) {
				transport = "error"
			}
		}
		tTransport := time.Since(t0)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		l.cleanup = l.gs.Close(cctx)
		cancel()
		elapsed := time.Since(t0)
		supervisor := "ok"
		switch {
		case l.cleanup.Confirmed:
		case l.cleanup.Reason == guardian.ReasonDeadline:
			supervisor = "timeout"
		default:
			supervisor = "error"
		}
		facts := GuardianCleanupDrafts(l.activation, l.key.session, l.key.server, l.cleanup)
		facts = append(facts,
			l.draft(&events.ConnectionBarrier{Obligation: "transport", Outcome: transport, ElapsedNS: int64(tTransport)}),
			l.draft(&events.ConnectionBarrier{Obligation: "workers", Outcome: "ok", ElapsedNS: int64(elapsed)}),
			l.draft(&events.ConnectionBarrier{Obligation: "supervisor", Outcome: supervisor, ElapsedNS: int64(elapsed)}),
			l.draft(&events.ConnectionClosed{ElapsedNS: int64(elapsed)}))
		_ = m.emitFact(ctx, facts...)
	})
	<-l.termDone
	return l.cleanup
}

// revoke marks the lease cancelled under the gate. After the state change
// no call passes; lease.revoked is appended after every call already past
// the gate has its admission recorded.
func (l *lease) revoke(ctx context.Context, reason string) error {
	l.mu.Lock()
	switch l.state {
	case stateActive:
	case stateRevoked:
		// Revoked by a concurrent caller: return, like it, only once
		// lease.revoked is durable.
		l.mu.Unlock()
		select {
		case <-l.revokedLogged:
			return nil
		case <-ctx.Done():
			return newErr("revoke", &l.key, ErrTerminated, ctx.Err())
		}
	default:
		l.mu.Unlock()
		return nil
	}
	l.state = stateRevoked
	inflight := l.inflight
	l.mu.Unlock()
	l.m.removeIf(l)
	l.admitting.Wait()
	err := l.m.emitFact(ctx, l.draft(&events.LeaseRevoked{Reason: reason, CallsInFlight: inflight}))
	close(l.revokedLogged)
	if inflight == 0 {
		// Nobody will complete a call on it: end the child now.
		l.terminate(ctx, "revoked")
	}
	return err
}

// CallRequest is one tool call the host already authorized: the exact
// runtime tool name and the canonical schema digest it authorized.
type CallRequest struct {
	Server string
	Tool   string
	Digest string
	// Arguments are encoded as JSON (a json.RawMessage is sent as is); nil
	// sends {}.
	Arguments any
}

// call runs one request through the gate of l.
func (l *lease) call(ctx context.Context, req CallRequest, args []byte) (*mcp.CallToolResult, error) {
	m := l.m
	callID := l.activation + "-c" + strconv.FormatUint(l.calls.Add(1), 10)
	refuse := func(reason string, kind error) error {
		_ = m.emitFact(ctx, l.draft(&events.CallRefused{CallID: callID, Tool: req.Tool, Reason: reason}))
		e := newErr("call", &l.key, kind, nil)
		e.Activation = l.activation
		return e
	}

	// The gate: state check, exact name and digest check, admission.
	l.mu.Lock()
	switch l.state {
	case stateRevoked:
		l.mu.Unlock()
		// The refusal is recorded after the revocation it is caused by.
		<-l.revokedLogged
		return nil, refuse("cancelled", ErrRevoked)
	case statePoisoned:
		l.mu.Unlock()
		return nil, refuse("poisoned", ErrPoisoned)
	case stateGone:
		l.mu.Unlock()
		return nil, refuse("terminated", ErrTerminated)
	}
	pt, ok := l.listing.Tools[req.Tool]
	if !ok || pt.Digest != req.Digest {
		reason, kind := "name_mismatch", ErrNameMismatch
		if ok {
			reason, kind = "digest_mismatch", ErrDigestMismatch
		}
		l.state = statePoisoned
		l.mu.Unlock()
		m.removeIf(l)
		_ = m.emitFact(ctx, l.draft(&events.CallRefused{CallID: callID, Tool: req.Tool, Reason: reason}),
			l.draft(&events.LeasePoisoned{CallID: callID, Reason: reason, Tool: req.Tool, ExpectedDigest: req.Digest}))
		l.terminate(ctx, "poisoned")
		e := newErr("call", &l.key, kind, nil)
		e.Activation = l.activation
		return nil, e
	}
	l.inflight++
	l.admitting.Add(1)
	l.mu.Unlock()

	argSum := sha256.Sum256(args)
	err := m.emit(ctx, l.draft(&events.CallAdmitted{CallID: callID, Tool: req.Tool, Digest: req.Digest}))
	l.admitting.Done()
	t0 := m.opts.Now()
	var res *mcp.CallToolResult
	if err == nil {
		res, err = l.cs.CallTool(ctx, &mcp.CallToolParams{Name: req.Tool, Arguments: json.RawMessage(args)})
	} else {
		// Not durably admitted: do not call. Record nothing further about
		// the call (the ledger is what failed).
		l.release()
		return nil, err
	}
	end := m.opts.Now()

	fin := &events.CallFinished{CallID: callID, Tool: req.Tool, DurationNS: since(end, t0),
		ArgsBytes: int64(len(args)), ArgsSHA256: hex.EncodeToString(argSum[:])}
	var callErr error
	transportFailed := false
	switch {
	case err == nil:
		fin.Outcome = "ok"
		if res.IsError {
			fin.Outcome = "tool_error"
		}
		if b, merr := json.Marshal(res); merr == nil {
			s := sha256.Sum256(b)
			fin.ResultBytes, fin.ResultSHA256 = int64(len(b)), hex.EncodeToString(s[:])
		}
	case ctx.Err() != nil:
		fin.Outcome = "cancelled"
		callErr = newErr("call", &l.key, ErrCallFailed, ctx.Err())
	default:
		fin.Outcome = "transport_error"
		var we *jsonrpc.Error
		transportFailed = !errors.As(err, &we) || we.Code == -32003 || we.Code == -32004
		callErr = newErr("call", &l.key, ErrCallFailed, nil)
	}
	if callErr != nil {
		callErr.(*LeaseError).Activation = l.activation
	}

	// Leave the gate; the last call out of a revoked lease kills the child.
	l.mu.Lock()
	l.inflight--
	l.lastUsed = end
	killer := l.state == stateRevoked && l.inflight == 0
	if transportFailed && l.state == stateActive {
		l.state, l.goneReason = stateGone, "transport_error"
	} else {
		transportFailed = false
	}
	l.mu.Unlock()
	fin.KilledOnCancel = killer
	if killer {
		<-l.revokedLogged
	}
	if transportFailed {
		// Out of the map before the failure is recorded: no caller finds
		// the dead lease after its call.finished.
		m.removeIf(l)
	}
	_ = m.emitFact(ctx, l.draft(fin))
	switch {
	case killer:
		l.terminate(ctx, "revoked")
	case transportFailed:
		l.terminate(ctx, "transport_error")
	}
	return res, callErr
}

// release leaves the gate after a call that never reached tools/call.
func (l *lease) release() {
	l.mu.Lock()
	l.inflight--
	killer := l.state == stateRevoked && l.inflight == 0
	l.mu.Unlock()
	if killer {
		<-l.revokedLogged
		l.terminate(context.Background(), "revoked")
	}
}
