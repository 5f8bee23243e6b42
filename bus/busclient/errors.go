package busclient

import "errors"

// Errors callers branch on (with errors.Is).
var (
	// ErrRemote: the bus refused the request (its text is in Error.Reply).
	// For an append it means nothing of the request was written.
	ErrRemote = errors.New("busclient: request refused")
	// ErrInDoubt: an append request may have reached the bus but this
	// client cannot say whether its events were written (no answer, an
	// unreadable answer, or an answer saying the ledger itself cannot
	// tell). Read the log to find out.
	ErrInDoubt = errors.New("busclient: append in doubt")
	// ErrTooLarge: an append request would exceed the server's maximum
	// message size; it was not sent.
	ErrTooLarge = errors.New("busclient: append request too large")
	// ErrTooManyEvents: one append holds more than MaxAppendEvents events;
	// it was not sent. The remote counterpart of ledger.ErrTooManyEvents.
	ErrTooManyEvents = errors.New("busclient: too many events in one append")
	// ErrIdempotencyKey: the caller's idempotency key is not of the form
	// MaxIdempotencyKeyLen describes; nothing was sent.
	ErrIdempotencyKey = errors.New("busclient: invalid idempotency key")
	// ErrIdempotencyConflict (with ErrRemote): the bus remembers the key
	// for different events; nothing of this request was written.
	ErrIdempotencyConflict = errors.New("busclient: idempotency key already used for different events")
	// ErrIdempotencyExpired (with ErrInDoubt): a retry reached the bus
	// after its key may have left the remembered window; it was not
	// written, and whether an earlier attempt was is unknown.
	ErrIdempotencyExpired = errors.New("busclient: idempotency key may have left the bus's window")
	// ErrRateLimited (with ErrRemote): the bus refused the request because
	// its sender exceeded the request rate limit; nothing was done.
	// Appends retry it within their RetryPolicy; head and replay wait it
	// out until their context ends.
	ErrRateLimited = errors.New("busclient: rate limited")
	// ErrReadOnlyClass: an append through a Client of a read-only request
	// class (WithPeerClass); nothing was sent.
	ErrReadOnlyClass = errors.New("busclient: the request class is read-only")
	// ErrMalformedReply: a reply did not have the form the API defines.
	ErrMalformedReply = errors.New("busclient: malformed reply")
)

// Error records a failed bus client operation, shaped like *os.PathError:
// the operation ("head", "replay", "tail", "append"), the subject it used,
// the bus's error text when it sent one, and the cause — a sentinel of this
// package, an error of package events (a refused draft or filter) or the
// underlying NATS or context error, which errors.Is sees through.
type Error struct {
	Op      string
	Subject string
	Reply   string // the bus's error text (HeaderError), with ErrRemote or ErrInDoubt
	Err     error
}

// Error returns "busclient <op> <subject>: <cause>[: <reply>]".
func (e *Error) Error() string {
	s := "busclient " + e.Op
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
