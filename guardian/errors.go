package guardian

import (
	"errors"
	"fmt"
)

// Errors Launch returns before any target process exists. Each is wrapped in
// a *HelperError (or *VersionError), so callers test with errors.Is and read
// details with errors.As. None of them is ever answered by launching the
// target directly: verified cleanup has no fallback.
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
)

// Errors of a running session.
var (
	// ErrClosed is returned by Read and Write after Close or Stream().Close.
	ErrClosed = errors.New("guardian: session closed")
	// ErrHelperLost is returned by Read and Write when the helper's frame
	// stream ended without a receipt (the helper died or broke the protocol).
	ErrHelperLost = errors.New("guardian: helper lost")
)

// Errors behind an unconfirmed CleanupResult, one per Reason (see
// Reason.Err), so callers can errors.Is a result's Err().
var (
	ErrReceiptLost = errors.New("guardian: cleanup unconfirmed: receipt lost")
	ErrPipesClosed = errors.New("guardian: cleanup unconfirmed: helper pipes closed early")
	ErrDeadline    = errors.New("guardian: cleanup unconfirmed: deadline expired")
	// ErrHelperLost doubles as the helper_lost reason's error.
)

// HelperError reports a helper that could not be used. Kind is one of
// ErrHelperNotFound, ErrHelperUnsupported, ErrTargetStart; Cause is the
// underlying error, when there is one.
type HelperError struct {
	Path  string
	Kind  error
	Cause error
}

// Error implements error.
func (e *HelperError) Error() string {
	if e.Cause == nil {
		return fmt.Sprintf("%v (%s)", e.Kind, e.Path)
	}
	return fmt.Sprintf("%v (%s): %v", e.Kind, e.Path, e.Cause)
}

// Unwrap exposes both the kind and the cause to errors.Is/As.
func (e *HelperError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// VersionError reports a helper whose hello announced the wrong protocol or
// version. It matches ErrHelperVersion.
type VersionError struct {
	Path         string
	GotProtocol  int
	GotVersion   string
	WantProtocol int
	WantVersion  string
}

// Error implements error.
func (e *VersionError) Error() string {
	// GotVersion comes from the helper binary; quote it so it cannot shape
	// the message.
	return fmt.Sprintf("%v (%s): got protocol %d version %q, want protocol %d version %q",
		ErrHelperVersion, e.Path, e.GotProtocol, e.GotVersion, e.WantProtocol, e.WantVersion)
}

// Is makes errors.Is(err, ErrHelperVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrHelperVersion }

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
