package control

import (
	"errors"
	"fmt"
)

// Errors callers branch on (errors.Is). The refusals wrap ErrRefused; a
// Runtime wraps ErrInvalid, ErrNotFound, ErrUnavailable or (Reload)
// ErrConfigNotLoaded in its errors so that the handlers refuse with the
// matching code (any other error is
// answered "request failed", its text never sent).
var (
	// ErrRefused: the bus answered with a refusal (Error.Code says which).
	ErrRefused = errors.New("control: request refused")
	// ErrInvalid: the request is malformed or invalid (busclient.CodeBadRequest).
	ErrInvalid = fmt.Errorf("%w: invalid request", ErrRefused)
	// ErrNotFound: no such activation or session (CodeNotFound).
	ErrNotFound = fmt.Errorf("%w: not found", ErrRefused)
	// ErrTooLarge: the answer exceeds the API's bounds (CodeTooLarge).
	ErrTooLarge = fmt.Errorf("%w: too large for the API", ErrRefused)
	// ErrUnavailable: the projection failed or the runtime is closed
	// (CodeUnavailable).
	ErrUnavailable = fmt.Errorf("%w: unavailable", ErrRefused)
	// ErrConfigNotLoaded: a reload's configuration failed to load
	// (CodeConfigNotLoaded); nothing changed, the previous configuration
	// stays in force. Why is in serve's log, not in the refusal.
	ErrConfigNotLoaded = fmt.Errorf("%w: configuration not loaded", ErrRefused)
	// ErrRateLimited: the caller exceeded the bus's rate limit
	// (busclient.CodeRateLimited); nothing was done, retry later.
	ErrRateLimited = fmt.Errorf("%w: rate limited", ErrRefused)
	// ErrBusy: every service slot of the caller's class was taken
	// (bus.CodeBusy); nothing was done, retry later.
	ErrBusy = fmt.Errorf("%w: busy", ErrRefused)
	// ErrFailed: the server failed to answer (an error reply without a
	// code: "request failed", "request timed out", "reply too large").
	ErrFailed = errors.New("control: request failed on the server")
	// ErrForbidden: the bus does not let this user call the subject (a
	// permission violation: control subjects for any user but the control
	// user). The request never reached a handler.
	ErrForbidden = errors.New("control: not permitted for this bus user")
	// ErrNoService: nothing answers the subject on this bus (a bus started
	// without these services).
	ErrNoService = errors.New("control: no such API on this bus")
	// ErrMalformedReply: a reply that is not the JSON the API defines.
	ErrMalformedReply = errors.New("control: malformed reply")
)

// Error records a failed client call, shaped like *os.PathError: the
// operation ("revoke", "leases", …), its subject, the bus's refusal code
// and text when it sent one, and the cause — a sentinel of this package or
// the NATS or context error, which errors.Is sees through.
type Error struct {
	Op      string
	Subject string
	Code    string // busclient.HeaderErrorCode of a refusal
	Reply   string // busclient.HeaderError of a refusal (static text)
	Err     error
}

// Error returns "control <op> <subject>: <cause>[: <reply>]".
func (e *Error) Error() string {
	s := "control " + e.Op
	if e.Subject != "" {
		s += " " + e.Subject
	}
	s += ": " + e.Err.Error()
	if e.Reply != "" {
		s += ": " + e.Reply
	}
	return s
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }
