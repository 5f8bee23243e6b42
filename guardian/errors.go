package guardian

import (
	"errors"
	"fmt"
)

// Errors Launch returns before any target process exists, each inside a
// *HelperError, so callers test with errors.Is and read details with
// errors.As. None of them is ever answered by launching the target
// directly: verified cleanup has no fallback.
var (
	// ErrHelperNotFound: no helper binary at the configured path or beside
	// the running executable, or it is not an executable regular file.
	ErrHelperNotFound = errors.New("guardian: helper not found")
	// ErrHelperUnsupported: the helper could not be started or did not speak
	// the frame protocol (no or malformed hello, early exit, unsupported
	// platform).
	ErrHelperUnsupported = errors.New("guardian: helper unsupported")
	// ErrHelperVersion: the helper's hello announced another protocol or
	// helper version than this package was built for.
	ErrHelperVersion = errors.New("guardian: helper version mismatch")
	// ErrTargetStart: the helper ran but could not start the target (the
	// command was not found, exec failed). The helper is ended.
	ErrTargetStart = errors.New("guardian: target not started")
	// ErrInvalidSpec: the Spec breaks a bound or the activation id rule;
	// Launch returns it (wrapped, with the detail) before starting anything.
	ErrInvalidSpec = errors.New("guardian: invalid spec")
)

// Errors of a running session.
var (
	// ErrClosed is returned by Read and Write after Close or Stream().Close.
	ErrClosed = errors.New("guardian: session closed")
	// ErrHelperLost is returned by Read and Write when the helper's frame
	// stream ended without a receipt (the helper died or broke the
	// protocol). It is also the helper_lost reason's error.
	ErrHelperLost = errors.New("guardian: helper lost")
)

// Errors behind an unconfirmed CleanupResult, one per Reason (see
// Reason.Err; ErrHelperLost is the fourth), so callers can errors.Is a
// result's Err().
var (
	// ErrReceiptLost: ReasonReceiptLost.
	ErrReceiptLost = errors.New("guardian: cleanup unconfirmed: receipt lost")
	// ErrPipesClosed: ReasonPipesClosed.
	ErrPipesClosed = errors.New("guardian: cleanup unconfirmed: helper pipes closed early")
	// ErrDeadline: ReasonDeadline.
	ErrDeadline = errors.New("guardian: cleanup unconfirmed: deadline expired")
)

// HelperError reports a helper that could not be used, in the shape of
// *os.PathError. Err wraps one of ErrHelperNotFound, ErrHelperUnsupported,
// ErrHelperVersion or ErrTargetStart, and the underlying cause when there
// is one, so both match errors.Is.
type HelperError struct {
	// Op is the step that failed: "find" (locating the binary), "start"
	// (starting the helper process), "hello" (reading and checking the
	// helper's hello) or "launch" (the launch request and its answer).
	Op string
	// Path is the helper binary.
	Path string
	// Protocol and Version are what the helper's hello announced, when it
	// was read (zero before that).
	Protocol int
	Version  string
	// Err is the sentinel, possibly wrapped with the cause.
	Err error
}

// Error implements error. The helper's version string comes from the
// helper binary, so it appears only quoted (inside Err).
func (e *HelperError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }

// Unwrap returns Err, which matches the sentinel and the cause.
func (e *HelperError) Unwrap() error { return e.Err }

// helperErr builds a *HelperError whose Err wraps kind and, when non-nil,
// cause.
func helperErr(op, path string, kind, cause error) *HelperError {
	err := kind
	if cause != nil {
		err = fmt.Errorf("%w: %w", kind, cause)
	}
	return &HelperError{Op: op, Path: path, Err: err}
}

// Reason says why a cleanup is unconfirmed. The values equal the reasons of
// the guardian.lost event.
type Reason string

// Reasons. The empty Reason means confirmed.
const (
	// ReasonReceiptLost: no usable, correlated receipt reached the host
	// although the helper ended normally (undecodable, uncorrelated or
	// incomplete receipt, or a malformed frame stream from the helper).
	ReasonReceiptLost Reason = "receipt_lost"
	// ReasonHelperLost: the helper was killed by a signal or exited
	// non-zero; its evidence is partial at best.
	ReasonHelperLost Reason = "helper_lost"
	// ReasonPipesClosed: the helper's pipes closed before a receipt while
	// the helper was still running (premature closure), or the host could
	// not deliver the close request and the helper then went silent.
	ReasonPipesClosed Reason = "pipes_closed"
	// ReasonDeadline: Close's context ended before the receipt and the
	// helper's exit were both observed (the helper is then SIGKILLed, which
	// takes the target with it through its parent-death signal), or the
	// receipt says the target was not reaped within the kill grace.
	ReasonDeadline Reason = "deadline"
)

// Err returns the sentinel error for the reason, nil for the empty reason.
func (r Reason) Err() error {
	switch r {
	case "":
		return nil
	case ReasonReceiptLost:
		return ErrReceiptLost
	case ReasonHelperLost:
		return ErrHelperLost
	case ReasonPipesClosed:
		return ErrPipesClosed
	case ReasonDeadline:
		return ErrDeadline
	}
	return fmt.Errorf("guardian: cleanup unconfirmed: %s", string(r))
}
