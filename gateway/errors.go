package gateway

import (
	"errors"
	"strconv"
)

// Sentinel errors of this package, carried in Error.Err; match them with
// errors.Is. Their text is static: no MCP server text, token value or
// client-supplied text ever reaches an error of this package.
var (
	// ErrInvalidOptions: Options lacks the manager, or a bound or an
	// allowed origin is malformed.
	ErrInvalidOptions = errors.New("gateway: invalid options")
	// ErrServerName: an exposed server name breaks the naming rule (see
	// ValidServerName).
	ErrServerName = errors.New("gateway: server name breaks the naming rule")
	// ErrUnknownSession: no live MCP session has that id.
	ErrUnknownSession = errors.New("gateway: unknown session")
	// ErrEndPending: the caller's context ended before the session's end
	// completed; the end goes on (bounded by SessionEndTimeout).
	ErrEndPending = errors.New("gateway: session end still in progress")
	// ErrClosed: the gateway was closed (EndSession after Close).
	ErrClosed = errors.New("gateway: closed")
	// ErrTokenFile: the token file could not be read or a line of it is
	// malformed (Error.Line names it); nothing of it was loaded.
	ErrTokenFile = errors.New("gateway: token file invalid")
	// ErrTokenFilePerm: the token file is writable by its group or by
	// others (mode & 022): whoever may write it may grant themselves a
	// token, so it is refused and nothing of it loaded (chmod go-w).
	ErrTokenFilePerm = errors.New("gateway: token file writable by group or others")
)

// Error is the one error type of this package, shaped like *os.PathError:
// the operation, the local identities it concerned, and Err, one of the
// Err* sentinels. The wrapped cause is only ever a local error (file
// system, context, runtime), never text from an MCP server or a client.
type Error struct {
	// Op is the operation: new, set_servers, end_session, close, load_tokens, reload_tokens.
	Op string
	// Session is the MCP session id; Server a server name; Line a line of
	// the token file (1-based). All are local identities or numbers.
	Session string
	Server  string
	Line    int
	Err     error
	cause   error
}

// Error returns static text with the local identities.
func (e *Error) Error() string {
	s := e.Err.Error()
	if e.Op != "" {
		s += " (" + e.Op
		if e.Session != "" {
			s += " session=" + e.Session
		}
		if e.Server != "" {
			s += " server=" + e.Server
		}
		if e.Line != 0 {
			s += " line=" + strconv.Itoa(e.Line)
		}
		s += ")"
	}
	if e.cause != nil { // only local causes are ever wrapped
		s += ": " + e.cause.Error()
	}
	return s
}

// Unwrap exposes the sentinel and the local cause to errors.Is/As.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Err, e.cause}
	}
	return []error{e.Err}
}
