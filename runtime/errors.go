package runtime

import (
	"errors"
	"strconv"

	"github.com/leaseledger/leaseledger/events"
)

// Sentinel errors of this package, carried in LeaseError.Err; match them
// with errors.Is. Their text is static: no MCP server text ever reaches an
// error of this package.
var (
	// ErrConfigMissing: the server has no entry in the config source.
	ErrConfigMissing = errors.New("runtime: server not configured")
	// ErrConfigInvalid: the config could not be read or parsed.
	ErrConfigInvalid = errors.New("runtime: server config invalid")
	// ErrInvalidRequest: an identifier, tool name or digest is malformed.
	ErrInvalidRequest = errors.New("runtime: invalid request")
	// ErrSpawn: the guardian could not start the child.
	ErrSpawn = errors.New("runtime: child start failed")
	// ErrInitialize: the MCP initialize handshake failed.
	ErrInitialize = errors.New("runtime: MCP initialize failed")
	// ErrListing: tools/list failed or returned an unusable listing.
	ErrListing = errors.New("runtime: tool listing failed")
	// ErrListingTooLarge: the listing exceeded MaxListedTools,
	// MaxListingBytes or MaxListingPages.
	ErrListingTooLarge = errors.New("runtime: tool listing exceeds bounds")
	// ErrTooManyLeases: MaxLiveLeases leases are live and none was idle.
	ErrTooManyLeases = errors.New("runtime: live lease cap reached")
	// ErrNameMismatch: the named tool is not in the pinned listing; the
	// lease was poisoned and no tools/call was sent.
	ErrNameMismatch = errors.New("runtime: tool not in pinned listing; lease poisoned")
	// ErrDigestMismatch: the expected schema digest differs from the pinned
	// one; the lease was poisoned and no tools/call was sent.
	ErrDigestMismatch = errors.New("runtime: tool schema digest mismatch; lease poisoned")
	// ErrRevoked: the lease was revoked before the call passed its gate.
	ErrRevoked = errors.New("runtime: lease revoked")
	// ErrPoisoned: the lease was poisoned by an earlier mismatch.
	ErrPoisoned = errors.New("runtime: lease poisoned")
	// ErrTerminated: the lease was terminated (reaped, session end,
	// terminate-all, stale config, child exit) before the call passed.
	ErrTerminated = errors.New("runtime: lease terminated")
	// ErrCallFailed: tools/call failed at the protocol or transport level
	// (the server's own error text is dropped). A tool error result is not
	// an error: it is returned with IsError set.
	ErrCallFailed = errors.New("runtime: tool call failed")
	// ErrRemote: the server answered tools/call with a JSON-RPC error
	// response. The connection is intact and the lease is kept;
	// LeaseError.Code holds the JSON-RPC code (the server's message is
	// dropped).
	ErrRemote = errors.New("runtime: server returned a JSON-RPC error")
	// ErrCallTimeout: the call's budget (Options.CallTimeout, the server's
	// "callTimeout") expired before the server answered; the server was
	// sent notifications/cancelled. Matches ErrCallFailed too.
	ErrCallTimeout = errors.New("runtime: tool call budget expired")
	// ErrDenied: the host denied the server to this session (Deny) or
	// denied its shared lease (DenyShared); nothing is acquired or called
	// until Allow or AllowShared lifts it.
	ErrDenied = errors.New("runtime: server denied")
	// ErrAccessDenied: the session's access policy (SessionOptions.Access)
	// denied the action to its principal; nothing was started or sent,
	// and the decision was recorded (call.refused{policy} or
	// access.decided).
	ErrAccessDenied = errors.New("runtime: denied by access policy")
	// ErrOneShotEnded: the key's one-shot activation ended (its child
	// exited, was reaped, revoked, replaced by config or closed); it never
	// gets a replacement executable. An explicit OpenConnection starts a
	// new activation.
	ErrOneShotEnded = errors.New("runtime: one-shot activation ended")
	// ErrConnectionOpen: OpenConnection found a live connection for the
	// key that does not match its options (activation, one-shot).
	ErrConnectionOpen = errors.New("runtime: a different connection is open for this key")
	// ErrNoConnection: CloseConnection found no connection for the
	// session and server (or the lease never started a child).
	ErrNoConnection = errors.New("runtime: no connection")
	// ErrSessionEnded: the session's last owner released its scope.
	ErrSessionEnded = errors.New("runtime: session ended")
	// ErrSessionOpen: a scope for the session is already open.
	ErrSessionOpen = errors.New("runtime: session scope already open")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("runtime: manager closed")
	// ErrInvalidBudget: a resource request's budget is zero, negative or
	// beyond MaxRequestBudget (or its registration timeout negative).
	ErrInvalidBudget = errors.New("runtime: request budget must be positive and at most MaxRequestBudget")
	// ErrRegisterTimeout: request.registered was not acknowledged within
	// the registration timeout; nothing was sent.
	ErrRegisterTimeout = errors.New("runtime: request registration timed out; nothing sent")
	// ErrAwaitTimeout: an Await's context ended before the result; the
	// request is still active and a later Await receives it.
	ErrAwaitTimeout = errors.New("runtime: await timed out; request still active")
	// ErrHandleSettled: the handle was settled (its result already
	// received, or it was cancelled).
	ErrHandleSettled = errors.New("runtime: request handle already settled")
	// ErrUnknownHandle: the owner holds no unsettled handle with that id.
	ErrUnknownHandle = errors.New("runtime: unknown request handle")
	// ErrOwnerEnded: the request owner ended; its end settled the handle,
	// or no handle can be started under it.
	ErrOwnerEnded = errors.New("runtime: request owner ended")
	// ErrTooManyRequests: the owner holds MaxOwnerHandles unsettled
	// handles.
	ErrTooManyRequests = errors.New("runtime: too many unsettled requests for the owner")
	// ErrTooManySubscriptions: the session holds (or is subscribing to)
	// MaxSubscriptionsPerSession resource subscriptions (Count holds the
	// cap).
	ErrTooManySubscriptions = errors.New("runtime: too many resource subscriptions for the session")
	// ErrRequestFailed: the resource request failed at the transport
	// level (the connection failed or the lease ended under it).
	ErrRequestFailed = errors.New("runtime: resource request failed")
	// ErrRequestTimeout: the handle's end-to-end budget expired before a
	// result arrived.
	ErrRequestTimeout = errors.New("runtime: resource request budget expired")
	// ErrEnvelope: the server's answer breaks the method's result envelope
	// (undecodable, or a resource, template or content without its
	// required fields, or an oversize cursor).
	ErrEnvelope = errors.New("runtime: server answer breaks the result envelope")
	// ErrLedger: an event could not be appended durably; the step it
	// records was not taken (or, for facts after the step, not recorded).
	ErrLedger = errors.New("runtime: ledger append failed")
)

// LeaseError is the one error type of this package, shaped like
// *os.PathError: the operation, the identities it concerned, and Err, one of
// the Err* sentinels that callers branch on with errors.Is. The optional
// wrapped cause is only ever a local error (context, file system, ledger,
// guardian launch errors), never text from an MCP server; errors.Is and
// errors.As see both Err and the cause.
type LeaseError struct {
	// Op is the operation that failed: new, open_session, session,
	// config, acquire, call, revoke, append.
	Op string
	// Session is the lease key's session (a session or SharedSessionKey);
	// Server the server name; Activation the lease's activation, when one
	// exists. All are local identifiers.
	Session    string
	Server     string
	Activation string
	// Err is the sentinel (ErrTooManyLeases, ErrRevoked, ...).
	Err error
	// Count is numeric metadata: the cap for ErrTooManyLeases, the number
	// of failures not kept for ErrLedger from Close and TerminateAll.
	Count int
	// Code is the JSON-RPC error code of the server's response for
	// ErrRemote (a number the server chose; never its message).
	Code int64
	// Cause is the operator's account of a failed acquisition or call:
	// what failed underneath Err, as the runtime observed it at its own
	// boundary (a refused dial, DNS, TLS, which timer fired, an HTTP
	// status, an exited process), never the server's text; empty when
	// unknown or when the failure is no fault of the server's (a cap, a
	// denial). An acquisition records the same in lease.acquire_failed.
	Cause events.FailureCause
	// Target is the host:port of the HTTP request that failed (never the
	// URL's scheme, path, query or user info); empty for stdio servers.
	Target string
	// HTTPStatus is the endpoint's error status, for Cause http_status.
	HTTPStatus int
	// Exit is the server process's wait status, for Cause process_exited
	// when its guardian receipt reported one; nil otherwise.
	Exit  *ExitStatus
	cause error
}

// Error returns static text with the local identities.
func (e *LeaseError) Error() string {
	s := e.Err.Error()
	if e.Op != "" {
		s += " (" + e.Op
		if e.Session != "" {
			s += " session=" + e.Session
		}
		if e.Server != "" {
			s += " server=" + e.Server
		}
		if e.Activation != "" {
			s += " activation=" + e.Activation
		}
		if e.Count != 0 {
			s += " n=" + strconv.Itoa(e.Count)
		}
		if e.Code != 0 {
			s += " code=" + strconv.FormatInt(e.Code, 10)
		}
		if e.Cause != "" {
			s += " cause=" + string(e.Cause)
		}
		if e.Target != "" {
			s += " target=" + e.Target
		}
		if e.HTTPStatus != 0 {
			s += " http_status=" + strconv.Itoa(e.HTTPStatus)
		}
		if x := e.Exit; x != nil {
			s += " exit_code=" + strconv.Itoa(x.Code)
			if x.Signal != "" {
				s += " signal=" + x.Signal
			}
		}
		s += ")"
	}
	if e.cause != nil { // only local causes are ever wrapped (see LeaseError)
		s += ": " + e.cause.Error()
	}
	return s
}

// Unwrap exposes the sentinel and the local cause to errors.Is/As.
func (e *LeaseError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Err, e.cause}
	}
	return []error{e.Err}
}

func newErr(op string, k *leaseKey, sentinel error, cause error) *LeaseError {
	e := &LeaseError{Op: op, Err: sentinel, cause: cause}
	if k != nil {
		e.Session, e.Server = k.session, k.server
	}
	return e
}
