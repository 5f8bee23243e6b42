package wire

import "time"

// SignalFact records one signal the helper sent to its direct child.
type SignalFact struct {
	Signal string    `json:"signal"` // SignalTerm or SignalKill
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
// Every field is an observed fact; the verdict is computed by the host and,
// later, by projections.
type Receipt struct {
	ActivationID  string    `json:"activation_id"`
	HelperVersion string    `json:"helper_version"`
	HelperPID     int       `json:"helper_pid"`
	TargetPID     int       `json:"target_pid"`
	PIDFD         bool      `json:"pidfd"`
	Subreaper     bool      `json:"subreaper"`
	StartedAt     time.Time `json:"started_at"`
	// Trigger says what started cleanup: one of the Trigger* values.
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
func (r *Receipt) TermSentAt() (time.Time, bool) { return r.signalAt(SignalTerm) }

// KillSentAt returns when KILL was sent, if it was.
func (r *Receipt) KillSentAt() (time.Time, bool) { return r.signalAt(SignalKill) }

func (r *Receipt) signalAt(name string) (time.Time, bool) {
	for _, s := range r.Signals {
		if s.Signal == name {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// HasCleanupFacts reports whether the receipt carries the facts a
// confirmation needs: a real wait status and a close fact for every pipe.
func (r *Receipt) HasCleanupFacts() bool {
	return r.Reaped && r.ReapedAt != nil && r.Stdin != nil && r.Stdout != nil && r.Stderr != nil
}
