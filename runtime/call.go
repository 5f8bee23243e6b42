package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
		m.keep(m.emitFact(ctx, l.draft(&events.CallRefused{CallID: callID, Tool: req.Tool, Reason: reason})))
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
		reason, kind := events.PoisonNameMismatch, ErrNameMismatch
		if ok {
			reason, kind = events.PoisonDigestMismatch, ErrDigestMismatch
		}
		l.state = statePoisoned
		l.mu.Unlock()
		m.removeIf(l)
		m.keep(m.emitFact(ctx, l.draft(&events.CallRefused{CallID: callID, Tool: req.Tool, Reason: string(reason)}),
			l.draft(&events.LeasePoisoned{CallID: callID, Reason: reason, Tool: req.Tool, ExpectedDigest: req.Digest})))
		m.keep(l.terminate(ctx, "poisoned"))
		e := newErr("call", &l.key, kind, nil)
		e.Activation = l.activation
		return nil, e
	}
	l.inflight++
	l.admitting.Add(1)
	l.mu.Unlock()

	argSum := sha256.Sum256(args)
	// The admission is appended detached from the caller's cancellation
	// (bounded by factTimeout): an append abandoned halfway can still
	// become durable (the appender reports it in doubt), and a durable
	// call.admitted must always be followed by its call.finished. A caller
	// that gives up meanwhile sees its call finish as cancelled.
	err := m.emitFact(ctx, l.draft(&events.CallAdmitted{CallID: callID, Tool: req.Tool, Digest: req.Digest}))
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
		fin.Outcome = events.CallOK
		if res.IsError {
			fin.Outcome = events.CallToolError
		}
		if b, merr := json.Marshal(res); merr == nil {
			s := sha256.Sum256(b)
			fin.ResultBytes, fin.ResultSHA256 = int64(len(b)), hex.EncodeToString(s[:])
		}
	case ctx.Err() != nil:
		fin.Outcome = events.CallCancelled
		callErr = newErr("call", &l.key, ErrCallFailed, ctx.Err())
	default:
		fin.Outcome = events.CallTransportError
		var we *jsonrpc.Error
		transportFailed = !errors.As(err, &we) || we.Code == -32003 || we.Code == -32004
		callErr = newErr("call", &l.key, ErrCallFailed, nil)
	}
	if le, ok := callErr.(*LeaseError); ok {
		le.Activation = l.activation
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
	m.keep(m.emitFact(ctx, l.draft(fin)))
	switch {
	case killer:
		m.keep(l.terminate(ctx, "revoked"))
	case transportFailed:
		m.keep(l.terminate(ctx, "transport_error"))
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
		l.m.keep(l.terminate(context.Background(), "revoked"))
	}
}

// isGoneRefusal reports a refusal because the lease left service for a
// reason that is not about the call (reaped, replaced, child exited).
func isGoneRefusal(err error) bool {
	le, ok := err.(*LeaseError)
	return ok && le.Err == ErrTerminated && le.Op == "call"
}
