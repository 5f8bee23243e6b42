package guardian

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// ProtocolVersion is the frame protocol this package speaks. The host refuses
// a helper whose hello announces anything else.
const ProtocolVersion = 1

// HelperVersion is the version of the helper built from this module. The
// host requires the helper's hello to carry exactly this string, so a stale
// helper binary left beside a newer host is refused before launch.
const HelperVersion = "leaseledger-guardian/0.1.1"

// HelperName is the file name of the helper binary the host looks for
// beside its own executable.
const HelperName = "leaseledger-guardian"

// Limits on what a launch request may carry; the request travels as one
// frame, so these keep it far below MaxFrameLen.
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

// Default graces, used when a Spec leaves a grace at zero.
const (
	DefaultEOFGrace  = 2 * time.Second
	DefaultTermGrace = 2 * time.Second
	DefaultKillGrace = 2 * time.Second
	DefaultPipeGrace = 500 * time.Millisecond
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

// Started answers a LaunchRequest.
type Started struct {
	ActivationID string    `json:"activation_id"`
	HelperPID    int       `json:"helper_pid"`
	TargetPID    int       `json:"target_pid,omitempty"`
	PIDFD        bool      `json:"pidfd"` // the helper holds a pidfd for the target and signals through it
	At           time.Time `json:"at"`
	Error        string    `json:"error,omitempty"` // why the target was not started (our words, no peer content)
}

// SignalFact records one signal the helper sent to its direct child.
type SignalFact struct {
	Signal string    `json:"signal"` // TERM or KILL
	At     time.Time `json:"at"`
	// Alive is true when waitid(P_PIDFD, WEXITED|WNOWAIT|WNOHANG) said the
	// child had not exited just before the signal. A signal to an unreaped
	// zombie also "succeeds", so success alone proves nothing.
	Alive bool `json:"alive"`
}

// PipeFact records how and when one of the helper-owned target pipes closed.
type PipeFact struct {
	// ClosedAt is when the helper observed EOF (stdout, stderr) or closed
	// its end (stdin, or a forced close at the pipe deadline).
	ClosedAt time.Time `json:"closed_at"`
	// Forced is true when the helper closed its read end at the pipe
	// deadline because some process (typically an orphaned descendant)
	// still held the write end.
	Forced bool `json:"forced,omitempty"`
}

// Receipt is the helper's account of one activation, sent as its last frame.
// Every field is an observed fact; the verdict is computed by the host
// (CleanupResult) and, later, by projections.
type Receipt struct {
	ActivationID  string    `json:"activation_id"`
	HelperVersion string    `json:"helper_version"`
	HelperPID     int       `json:"helper_pid"`
	TargetPID     int       `json:"target_pid"`
	PIDFD         bool      `json:"pidfd"`
	Subreaper     bool      `json:"subreaper"`
	StartedAt     time.Time `json:"started_at"`
	// Trigger says what started cleanup: close (host control frame),
	// target_exit, host_eof, parent_gone, signal, protocol_fault.
	Trigger string `json:"trigger"`

	// Wait status of the direct child, from its one reaper (Process.Wait).
	Reaped   bool       `json:"reaped"`
	ReapedAt *time.Time `json:"reaped_at,omitempty"`
	ExitCode int        `json:"exit_code"`        // -1 when killed by a signal or not reaped
	Signal   string     `json:"signal,omitempty"` // terminating signal, e.g. "KILL"

	// Pipes the helper owns towards the target.
	Stdin  *PipeFact `json:"stdin,omitempty"`
	Stdout *PipeFact `json:"stdout,omitempty"`
	Stderr *PipeFact `json:"stderr,omitempty"`

	// StdinDroppedBytes counts bytes the host relayed for the target's
	// stdin that the helper never wrote into it: they arrived after cleanup
	// started or after the host closed its end while the target was not
	// reading, or the write failed (the target closed its stdin, or the
	// bounded flush at cleanup ran out).
	StdinDroppedBytes int64 `json:"stdin_dropped_bytes,omitempty"`

	// EOFGraceNS is the EOF grace the host granted; EOFGraceUsedNS is how
	// much of it passed between closing stdin and the child's exit or TERM.
	EOFGraceNS     int64 `json:"eof_grace_ns"`
	EOFGraceUsedNS int64 `json:"eof_grace_used_ns"`

	Signals []SignalFact `json:"signals,omitempty"` // in the order sent

	// Orphaned descendants that reparented to the helper (its subreaper
	// role). Seen is every such pid observed; Killed those it SIGKILLed.
	DescendantsSeen    []int `json:"descendants_seen,omitempty"`
	DescendantsKilled  []int `json:"descendants_killed,omitempty"`
	DescendantsReaped  []int `json:"descendants_reaped,omitempty"`
	DescendantsDropped int   `json:"descendants_dropped,omitempty"` // seen beyond MaxDescendants

	// Faults are protocol or session faults the helper recorded (e.g. a
	// malformed host frame); each ended or shaped the session.
	Faults []string `json:"faults,omitempty"`

	FinishedAt time.Time `json:"finished_at"`
}

// TermSentAt returns when TERM was sent, if it was.
func (r *Receipt) TermSentAt() (time.Time, bool) { return r.signalAt("TERM") }

// KillSentAt returns when KILL was sent, if it was.
func (r *Receipt) KillSentAt() (time.Time, bool) { return r.signalAt("KILL") }

func (r *Receipt) signalAt(name string) (time.Time, bool) {
	for _, s := range r.Signals {
		if s.Signal == name {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// hasWaitAndPipeFacts reports whether the receipt carries the facts a
// confirmation needs: a real wait status and a close fact for every pipe.
func (r *Receipt) hasWaitAndPipeFacts() bool {
	return r.Reaped && r.ReapedAt != nil && r.Stdin != nil && r.Stdout != nil && r.Stderr != nil
}

var activationRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ErrInvalidSpec is wrapped by every validation error from Launch.
var ErrInvalidSpec = errors.New("guardian: invalid spec")

// Validate checks a launch request on either side of the pipe.
func (l *LaunchRequest) Validate() error {
	switch {
	case !activationRE.MatchString(l.ActivationID):
		return fmt.Errorf("%w: activation id must match [A-Za-z0-9_-]{1,128}", ErrInvalidSpec)
	case l.Command == "":
		return fmt.Errorf("%w: empty command", ErrInvalidSpec)
	case len(l.Args) > MaxArgs:
		return fmt.Errorf("%w: more than %d args", ErrInvalidSpec, MaxArgs)
	case len(l.Env) > MaxEnv:
		return fmt.Errorf("%w: more than %d env entries", ErrInvalidSpec, MaxEnv)
	}
	for _, g := range []int64{l.EOFGraceNS, l.TermGraceNS, l.KillGraceNS, l.PipeGraceNS} {
		if g < 0 || g > int64(MaxGrace) {
			return fmt.Errorf("%w: grace outside [0, %s]", ErrInvalidSpec, MaxGrace)
		}
	}
	return nil
}
