package guardian

import (
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// Receipt is the helper's account of one activation: every field is a fact
// the helper observed (wait status, signals sent, pipe closes, descendants,
// faults). Its fields, JSON form and methods (TermSentAt, KillSentAt) are
// documented in docs/guardian.md ("Receipt fields"); the type is defined
// with the frame protocol, which carries it.
type Receipt = wire.Receipt

// PipeFact records how and when one helper-owned target pipe closed
// (Receipt.Stdin, Stdout, Stderr): ClosedAt, and Forced when the helper
// closed its read end at the pipe deadline.
type PipeFact = wire.PipeFact

// SignalFact records one signal the helper sent to the target
// (Receipt.Signals): Signal ("TERM" or "KILL"), At, and Alive, true when
// the kernel said the target had not exited just before.
type SignalFact = wire.SignalFact

// CleanupResult is the host's verdict on one activation's cleanup, with the
// facts it rests on. Confirmed is true only with a correlated receipt that
// carries the target's wait status and a close fact for each pipe, and the
// helper's own exit status 0, observed within Close's deadline. A non-zero
// target exit can still be confirmed: it says how the target ended, not
// whether its resources were released.
type CleanupResult struct {
	ActivationID string
	Confirmed    bool
	Reason       Reason // empty when confirmed

	// Receipt is the helper's receipt, when one arrived (it is kept even
	// when it does not confirm, as partial facts).
	Receipt   *Receipt
	ReceiptAt time.Time

	HelperPath     string
	HelperVersion  string
	HelperPID      int
	TargetPID      int
	HelperExited   bool
	HelperExitCode int    // -1 when signalled or not observed
	HelperSignal   string // e.g. "KILL" when the helper died by a signal
	HelperExitedAt time.Time

	// CloseRequest says how cleanup was requested: "control" (frame),
	// "signal" (SIGTERM to the helper, when the frame could not be
	// delivered, or when the frame was written but the helper had not acted
	// on it after the EOF grace plus a margin), "none" (the session had
	// already ended).
	CloseRequest string
	// KilledHelper is true when the host SIGKILLed the helper at the
	// deadline.
	KilledHelper bool

	StdinBytes    int64 // relayed to the helper
	StdoutBytes   int64 // received from the helper
	StdoutDropped int64 // received after Close/detach and discarded
	StderrBytes   int64

	// Faults are host-side facts about protocol or session faults.
	Faults []string
}

// Err returns nil when confirmed, else the Reason's sentinel error.
func (r CleanupResult) Err() error {
	if r.Confirmed {
		return nil
	}
	if r.Reason == "" {
		return ErrReceiptLost
	}
	return r.Reason.Err()
}
