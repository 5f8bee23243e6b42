package bus

import "errors"

// Errors callers branch on (with errors.Is).
var (
	// ErrRemote: the bus answered the request with an error (its text is in
	// Error.Reply). For an append it means nothing of the request was written.
	ErrRemote = errors.New("bus: request refused")
	// ErrInDoubt: an append request was sent but no answer arrived (timeout,
	// cancelled context, lost connection, unreadable answer). Its events may
	// or may not have been written; read the log to find out.
	ErrInDoubt = errors.New("bus: append in doubt")
	// ErrTooLarge: an append request would exceed the server's maximum
	// message size; it was not sent.
	ErrTooLarge = errors.New("bus: append request too large")
	// ErrMalformedReply: a reply did not have the form the API defines.
	ErrMalformedReply = errors.New("bus: malformed reply")
	// ErrOptions: Start was given options it cannot serve (a reserved or
	// invalid user name, a user without a password, one user twice).
	ErrOptions = errors.New("bus: invalid options")
)

// Error records a failed bus operation, shaped like *os.PathError: the
// operation ("start", "head", "replay", "tail", "append"), the subject it
// used, the responder's error text when it sent one, and the cause — a
// sentinel of this package or the underlying error (a NATS or context
// error), which errors.Is sees through.
type Error struct {
	Op      string
	Subject string
	Reply   string // the bus's error text (HeaderError), with ErrRemote
	Err     error
}

func (e *Error) Error() string {
	s := "bus " + e.Op
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
