package events

// ---- guardian: verified stdio ----

// GuardianStarted records the guardian helper and its direct child.
type GuardianStarted struct {
	GuardianPID   int    `json:"guardian_pid"`
	TargetPID     int    `json:"target_pid"`
	HelperVersion string `json:"helper_version"`
	PIDFD         bool   `json:"pidfd"` // the helper signals through a pidfd
}

// Kind implements [Payload].
func (*GuardianStarted) Kind() Kind { return "guardian.started" }

// Validate implements [Payload].
func (p *GuardianStarted) Validate() error {
	return checks{positive("guardian_pid", int64(p.GuardianPID)), positive("target_pid", int64(p.TargetPID)), text("helper_version", p.HelperVersion, true)}.first()
}

// GuardianSignal records a signal the guardian sent to its unreaped child.
type GuardianSignal struct {
	TargetPID int      `json:"target_pid"`
	Signal    Signal   `json:"signal"` // TERM, KILL
	At        *Instant `json:"at"`
	Alive     bool     `json:"alive"` // waitid(WNOWAIT) said the child had not exited before the signal
}

// Kind implements [Payload].
func (*GuardianSignal) Kind() Kind { return "guardian.signal" }

// Validate implements [Payload].
func (p *GuardianSignal) Validate() error {
	return checks{positive("target_pid", int64(p.TargetPID)), member("signal", p.Signal), instant("at", p.At, true)}.first()
}

// GuardianReaped records the direct child's wait status.
type GuardianReaped struct {
	TargetPID int      `json:"target_pid"`
	ExitCode  int      `json:"exit_code"` // -1 when killed by a signal
	Signal    string   `json:"signal,omitempty"`
	At        *Instant `json:"at"`
}

// Kind implements [Payload].
func (*GuardianReaped) Kind() Kind { return "guardian.reaped" }

// Validate implements [Payload].
func (p *GuardianReaped) Validate() error {
	return checks{positive("target_pid", int64(p.TargetPID)), between("exit_code", int64(p.ExitCode), -1, 255),
		text("signal", p.Signal, false), instant("at", p.At, true)}.first()
}

// GuardianReceipt is the correlated receipt the helper hands back, plus the
// helper's own exit status as observed by the host.
type GuardianReceipt struct {
	HelperVersion     string   `json:"helper_version"`
	TargetPID         int      `json:"target_pid"`
	Reaped            bool     `json:"reaped"`
	ExitCode          int      `json:"exit_code"` // -1 when killed by a signal or not reaped
	Signal            string   `json:"signal,omitempty"`
	StdinClosedAt     *Instant `json:"stdin_closed_at,omitempty"`
	StdoutClosedAt    *Instant `json:"stdout_closed_at,omitempty"`
	StderrClosedAt    *Instant `json:"stderr_closed_at,omitempty"`
	EOFGraceNS        int64    `json:"eof_grace_ns"`
	TermSentAt        *Instant `json:"term_sent_at,omitempty"`
	KillSentAt        *Instant `json:"kill_sent_at,omitempty"`
	DescendantsSeen   []int    `json:"descendants_seen,omitempty"`
	DescendantsKilled []int    `json:"descendants_killed,omitempty"`
	// DescendantsDropped counts descendants seen beyond the listed ones.
	DescendantsDropped int `json:"descendants_dropped,omitempty"`
	// StdoutForced and StderrForced say the helper closed its read end at
	// the pipe deadline (a descendant still held the write end) rather than
	// seeing EOF: a real close, but not the target's own.
	StdoutForced bool `json:"stdout_forced,omitempty"`
	StderrForced bool `json:"stderr_forced,omitempty"`
	// StdinDroppedBytes counts bytes relayed for the target's stdin that the
	// helper dropped (the target stopped reading while cleanup began).
	StdinDroppedBytes int64 `json:"stdin_dropped_bytes,omitempty"`
	HelperExitCode    int   `json:"helper_exit_code"` // -1 when the helper did not exit normally
}

// Kind implements [Payload].
func (*GuardianReceipt) Kind() Kind { return "guardian.receipt" }

// Validate implements [Payload].
func (p *GuardianReceipt) Validate() error {
	return checks{text("helper_version", p.HelperVersion, true), positive("target_pid", int64(p.TargetPID)),
		between("exit_code", int64(p.ExitCode), -1, 255), text("signal", p.Signal, false),
		instant("stdin_closed_at", p.StdinClosedAt, false), instant("stdout_closed_at", p.StdoutClosedAt, false),
		instant("stderr_closed_at", p.StderrClosedAt, false), instant("term_sent_at", p.TermSentAt, false),
		instant("kill_sent_at", p.KillSentAt, false),
		nonNegative("eof_grace_ns", p.EOFGraceNS), pids("descendants_seen", p.DescendantsSeen),
		pids("descendants_killed", p.DescendantsKilled), nonNegative("descendants_dropped", int64(p.DescendantsDropped)),
		nonNegative("stdin_dropped_bytes", p.StdinDroppedBytes), between("helper_exit_code", int64(p.HelperExitCode), -1, 255)}.first()
}

// GuardianLost records cleanup whose evidence is incomplete: the receipt was
// lost, the helper died, its pipes closed early, or the deadline expired.
// The optional fields are the partial facts the host did observe: those of
// a correlated receipt that did not confirm (pipe closes, descendants,
// dropped stdin; its signals and wait status are guardian.signal and
// guardian.reaped), so no observed fact of an unconfirmed cleanup stays
// outside the ledger. They never confirm anything.
type GuardianLost struct {
	Reason    LostReason `json:"reason"` // receipt_lost, helper_lost, pipes_closed, deadline
	TargetPID int        `json:"target_pid,omitempty"`
	// Receipt says a correlated receipt arrived; the facts below are its.
	Receipt            bool     `json:"receipt,omitempty"`
	StdinClosedAt      *Instant `json:"stdin_closed_at,omitempty"`
	StdoutClosedAt     *Instant `json:"stdout_closed_at,omitempty"`
	StderrClosedAt     *Instant `json:"stderr_closed_at,omitempty"`
	StdoutForced       bool     `json:"stdout_forced,omitempty"`
	StderrForced       bool     `json:"stderr_forced,omitempty"`
	DescendantsSeen    []int    `json:"descendants_seen,omitempty"`
	DescendantsKilled  []int    `json:"descendants_killed,omitempty"`
	DescendantsDropped int      `json:"descendants_dropped,omitempty"`
	StdinDroppedBytes  int64    `json:"stdin_dropped_bytes,omitempty"`
}

// Kind implements [Payload].
func (*GuardianLost) Kind() Kind { return "guardian.lost" }

// Validate implements [Payload].
func (p *GuardianLost) Validate() error {
	return checks{member("reason", p.Reason), nonNegative("target_pid", int64(p.TargetPID)),
		instant("stdin_closed_at", p.StdinClosedAt, false), instant("stdout_closed_at", p.StdoutClosedAt, false),
		instant("stderr_closed_at", p.StderrClosedAt, false), pids("descendants_seen", p.DescendantsSeen),
		pids("descendants_killed", p.DescendantsKilled), nonNegative("descendants_dropped", int64(p.DescendantsDropped)),
		nonNegative("stdin_dropped_bytes", p.StdinDroppedBytes)}.first()
}
