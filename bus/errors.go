package bus

import "errors"

// ErrOptions is returned by Start for options it cannot serve (a reserved
// or invalid user name, a user without a password, one user twice). The
// errors of the bus's clients are those of package bus/busclient.
var ErrOptions = errors.New("bus: invalid options")

// ErrClosed: the fleet bus was closed (Fleet.AddSpace).
var ErrClosed = errors.New("bus: closed")

// Error records a failed operation of the bus server, shaped like
// *os.PathError: the operation ("start"), the subject it concerned (when
// one did) and the cause — ErrOptions or the underlying error (a NATS
// server or connection error), which errors.Is sees through.
type Error struct {
	Op      string
	Subject string
	// Code, on a service handler's refusal (Refuse, Op "refuse"), is the
	// busclient.HeaderErrorCode value the requester gets; Err's text is
	// the static busclient.HeaderError text.
	Code string
	Err  error
}

// Error returns "bus <op> [<subject>]: <cause>".
func (e *Error) Error() string {
	s := "bus " + e.Op
	if e.Subject != "" {
		s += " " + e.Subject
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }
