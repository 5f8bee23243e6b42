package wire

import (
	"errors"
	"fmt"
)

// Frame layout on the host ⇄ helper pipes ("packet-4"):
//
//	+----------------------+-----------+-----------------------+
//	| length: uint32 BE    | type byte | payload (length-1 B)  |
//	+----------------------+-----------+-----------------------+
//
// length counts the type byte plus the payload, so it is at least 1 and at
// most MaxFrameLen. A reader never allocates more than its bound for a
// frame, whatever the header claims.

// MaxFrameLen bounds one frame (type byte plus payload). A header announcing
// more ends the session: it is a protocol fault, not a reason to allocate.
// 1 MiB leaves room for JSON control messages and a receipt with many
// descendant pids while keeping the worst-case allocation small.
const MaxFrameLen = 1 << 20

// MaxDataChunk bounds the payload of one data frame. Relays split larger
// writes into several frames, so a target that writes one giant "message"
// never produces a giant frame. 64 KiB matches the Linux pipe buffer.
const MaxDataChunk = 64 << 10

// HeaderLen is the length prefix plus the type byte. Relays that build
// frames in place (see Writer.WriteInPlace) reserve it at the start of
// their buffer.
const HeaderLen = 5

// FrameType is the type byte of a frame.
type FrameType byte

// Frame types. Direction is noted as host→helper or helper→host; a frame in
// the wrong direction is a protocol fault.
const (
	// FrameHello (helper→host) opens the session: JSON Hello with the
	// protocol number and the helper's version.
	FrameHello FrameType = 0x01
	// FrameLaunch (host→helper) asks the helper to start the target:
	// JSON LaunchRequest. The helper starts nothing before it.
	FrameLaunch FrameType = 0x02
	// FrameStarted (helper→host) answers FrameLaunch: JSON Started with the
	// target pid, or the reason the target could not be started.
	FrameStarted FrameType = 0x03
	// FrameStdin (host→helper) carries bytes for the target's stdin.
	FrameStdin FrameType = 0x04
	// FrameStdout (helper→host) carries bytes the target wrote to stdout. An
	// empty payload says the stdout pipe has closed (EOF or forced close).
	FrameStdout FrameType = 0x05
	// FrameStderr (helper→host) carries bytes the target wrote to stderr. An
	// empty payload says the stderr pipe has closed.
	FrameStderr FrameType = 0x06
	// FrameControl (host→helper) carries one control byte (ControlClose,
	// ControlKillDescendants).
	FrameControl FrameType = 0x07
	// FrameReceipt (helper→host) carries the JSON Receipt; it is the last
	// frame the helper sends.
	FrameReceipt FrameType = 0x08
)

// String names the frame type for facts and errors.
func (t FrameType) String() string {
	switch t {
	case FrameHello:
		return "hello"
	case FrameLaunch:
		return "launch"
	case FrameStarted:
		return "started"
	case FrameStdin:
		return "stdin"
	case FrameStdout:
		return "stdout"
	case FrameStderr:
		return "stderr"
	case FrameControl:
		return "control"
	case FrameReceipt:
		return "receipt"
	}
	return fmt.Sprintf("unknown(0x%02x)", byte(t))
}

func (t FrameType) known() bool { return t >= FrameHello && t <= FrameReceipt }

// isData reports whether frames of type t carry relayed bytes (and may use
// pooled chunks).
func (t FrameType) isData() bool { return t == FrameStdin || t == FrameStdout || t == FrameStderr }

// Errors of the frame stream, for errors.Is. Each is wrapped in a
// *FrameError that says where the stream broke.
var (
	// ErrFrameTooLarge: a header announces more than the reader's bound, or
	// a writer was given a payload above MaxFrameLen.
	ErrFrameTooLarge = errors.New("frame exceeds bound")
	// ErrFrameMalformed: an empty frame, an unknown type byte, a control
	// frame with an unknown code, or a frame in the wrong direction.
	ErrFrameMalformed = errors.New("malformed frame")
)

// FrameError describes a protocol fault in the frame stream, in the shape of
// *os.PathError: the operation, what identifies the frame, and the
// sentinel (ErrFrameTooLarge or ErrFrameMalformed) in Err.
type FrameError struct {
	Op     string    // "read" or "write"
	Len    uint32    // the announced length (type byte + payload)
	Type   FrameType // the type byte, when it was read
	Detail string    // what was wrong, in our words (never peer content)
	Err    error
}

// Error implements error.
func (e *FrameError) Error() string {
	return fmt.Sprintf("guardian: frame %s (len %d, type %s): %v: %s", e.Op, e.Len, e.Type, e.Err, e.Detail)
}

// Unwrap returns ErrFrameTooLarge or ErrFrameMalformed.
func (e *FrameError) Unwrap() error { return e.Err }
