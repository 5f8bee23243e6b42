package wire

import (
	"errors"
	"fmt"
	"time"
)

// ProtocolVersion is the frame protocol both sides speak. The host refuses
// a helper whose hello announces anything else.
const ProtocolVersion = 1

// HelperVersion is the version of the helper built from this module. The
// host requires the helper's hello to carry exactly this string, so a stale
// helper binary left beside a newer host is refused before launch.
const HelperVersion = "leaseledger-guardian/0.1.2"

// Control codes, the single payload byte of a FrameControl.
const (
	// ControlClose starts the cleanup sequence: close target stdin, EOF
	// grace, TERM, grace, KILL, bounded pipe close, receipt.
	ControlClose byte = 0x01
	// ControlKillDescendants SIGKILLs the orphaned descendants that have
	// reparented to the helper (it is their subreaper) and reaps them.
	ControlKillDescendants byte = 0x02
)

// Cleanup triggers, the values of Receipt.Trigger: what made the helper
// start its cleanup sequence.
const (
	TriggerClose         = "close"          // a ControlClose frame
	TriggerSignal        = "signal"         // SIGTERM, SIGINT or SIGHUP
	TriggerTargetExit    = "target_exit"    // the target exited on its own
	TriggerParentGone    = "parent_gone"    // the host process is gone
	TriggerHostEOF       = "host_eof"       // EOF on the helper's stdin
	TriggerProtocolFault = "protocol_fault" // a malformed host frame stream
)

// Signal names used in SignalFact.Signal (see SignalName).
const (
	SignalTerm = "TERM"
	SignalKill = "KILL"
)

// Limits on what a launch request may carry and a receipt may list; each
// travels as one frame, so these keep it far below MaxFrameLen.
const (
	// MaxArgs bounds the number of target arguments.
	MaxArgs = 1024
	// MaxEnv bounds the number of target environment entries.
	MaxEnv = 4096
	// MaxDescendants bounds how many orphaned descendant pids a receipt
	// lists; more are counted in DescendantsDropped, not listed.
	MaxDescendants = 1024
	// MaxGrace bounds each grace period a host may ask for.
	MaxGrace = 5 * time.Minute
)

// Hello is the helper's first frame.
type Hello struct {
	Protocol  int    `json:"protocol"`
	Version   string `json:"version"`
	PID       int    `json:"pid"`
	Subreaper bool   `json:"subreaper"` // PR_SET_CHILD_SUBREAPER took effect
}

// LaunchRequest asks the helper to start the target.
type LaunchRequest struct {
	ActivationID    string   `json:"activation_id"`
	Command         string   `json:"command"`
	Args            []string `json:"args,omitempty"`
	Env             []string `json:"env,omitempty"`
	InheritEnv      bool     `json:"inherit_env"` // Env was nil: the target inherits the helper's environment
	Dir             string   `json:"dir,omitempty"`
	EOFGraceNS      int64    `json:"eof_grace_ns"`
	TermGraceNS     int64    `json:"term_grace_ns"`
	KillGraceNS     int64    `json:"kill_grace_ns"`
	PipeGraceNS     int64    `json:"pipe_grace_ns"`
	KillDescendants bool     `json:"kill_descendants"` // kill orphaned descendants during cleanup
}

// ErrInvalidRequest is wrapped by every error of LaunchRequest.Validate.
var ErrInvalidRequest = errors.New("invalid launch request")

// Validate checks a launch request; both sides run it, the host before it
// starts a helper and the helper before it starts a target.
func (l *LaunchRequest) Validate() error {
	switch {
	case !ValidID(l.ActivationID):
		return fmt.Errorf("%w: activation id must match %s", ErrInvalidRequest, IDRule)
	case l.Command == "":
		return fmt.Errorf("%w: empty command", ErrInvalidRequest)
	case len(l.Args) > MaxArgs:
		return fmt.Errorf("%w: more than %d args", ErrInvalidRequest, MaxArgs)
	case len(l.Env) > MaxEnv:
		return fmt.Errorf("%w: more than %d env entries", ErrInvalidRequest, MaxEnv)
	}
	for _, g := range []int64{l.EOFGraceNS, l.TermGraceNS, l.KillGraceNS, l.PipeGraceNS} {
		if g < 0 || g > int64(MaxGrace) {
			return fmt.Errorf("%w: grace outside [0, %s]", ErrInvalidRequest, MaxGrace)
		}
	}
	return nil
}

// Started answers a LaunchRequest.
type Started struct {
	ActivationID string    `json:"activation_id"`
	HelperPID    int       `json:"helper_pid"`
	TargetPID    int       `json:"target_pid,omitempty"`
	PIDFD        bool      `json:"pidfd"` // the helper holds a pidfd for the target and signals through it
	At           time.Time `json:"at"`
	Error        string    `json:"error,omitempty"` // why the target was not started (our words, no peer content)
}
