package guardian

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// HelperName is the file name of the helper binary the host looks for
// beside its own executable.
const HelperName = "leaseledger-guardian"

// Default graces, used when a Spec leaves a grace at zero.
const (
	DefaultEOFGrace  = 2 * time.Second
	DefaultTermGrace = 2 * time.Second
	DefaultKillGrace = 2 * time.Second
	DefaultPipeGrace = 500 * time.Millisecond
)

// DefaultHelloTimeout bounds the hello and launch exchanges when Spec leaves
// HelloTimeout at zero (and the context has no earlier deadline).
const DefaultHelloTimeout = 5 * time.Second

// Bounds on a Spec and a Receipt. The launch request and the receipt each
// travel as one bounded frame, so these keep them small.
const (
	// MaxArgs bounds len(Spec.Args).
	MaxArgs = wire.MaxArgs
	// MaxEnv bounds len(Spec.Env).
	MaxEnv = wire.MaxEnv
	// MaxGrace bounds each of the Spec's graces.
	MaxGrace = wire.MaxGrace
	// MaxDescendants bounds how many descendant pids a Receipt lists; more
	// are counted in Receipt.DescendantsDropped.
	MaxDescendants = wire.MaxDescendants
)

// Spec describes one verified-stdio activation.
type Spec struct {
	// Command is the target executable; without a slash it is looked up on
	// the helper's PATH (the host's environment).
	Command string
	// Args are the target's arguments (at most MaxArgs), without argv[0].
	Args []string
	// Env is the target's environment; nil means the host's environment.
	Env []string
	// Dir is the target's working directory; empty means the helper's.
	Dir string
	// ActivationID correlates the receipt; [A-Za-z0-9_-]{1,128}.
	ActivationID string

	// Graces of the cleanup sequence; zero means the Default* value.
	EOFGrace  time.Duration // after closing stdin, before TERM
	TermGrace time.Duration // after TERM, before KILL
	KillGrace time.Duration // after KILL, waiting for the reap
	PipeGrace time.Duration // after the reap, waiting for stdout/stderr EOF

	// KillDescendants makes cleanup SIGKILL orphaned descendants that
	// reparented to the helper (they are always reported).
	KillDescendants bool

	// HelperPath is the helper binary; empty means HelperName beside the
	// running executable. There is deliberately no PATH search: the helper
	// becomes the parent of the target and must be the one configured.
	HelperPath string
	// HelperArgs are extra arguments the helper is started with, after
	// argv[0] (at most MaxArgs): a HelperPath that is a multi-command binary
	// (leaseledger itself) uses them to select its helper mode.
	HelperArgs []string
	// HelloTimeout bounds the hello and launch exchanges.
	HelloTimeout time.Duration
	// Stderr receives the target's stderr bytes. It is called from the
	// session's reader goroutine and must not block; nil discards.
	Stderr io.Writer
	// HelperStderr becomes the helper's own stderr; nil means /dev/null.
	HelperStderr *os.File
}

// CleanupBudget returns the longest the helper's cleanup sequence can take
// by the graces in s, plus a second for process exit: the least a Close
// context should allow.
func (s Spec) CleanupBudget() time.Duration {
	g := s.withDefaults()
	return g.EOFGrace + g.TermGrace + g.KillGrace + g.PipeGrace + time.Second
}

func (s Spec) withDefaults() Spec {
	if s.EOFGrace == 0 {
		s.EOFGrace = DefaultEOFGrace
	}
	if s.TermGrace == 0 {
		s.TermGrace = DefaultTermGrace
	}
	if s.KillGrace == 0 {
		s.KillGrace = DefaultKillGrace
	}
	if s.PipeGrace == 0 {
		s.PipeGrace = DefaultPipeGrace
	}
	if s.HelloTimeout == 0 {
		s.HelloTimeout = DefaultHelloTimeout
	}
	return s
}

// request is the launch request for s (with defaults applied), validated
// by the same rules the helper applies.
func (s Spec) request() (wire.LaunchRequest, error) {
	req := wire.LaunchRequest{
		ActivationID: s.ActivationID, Command: s.Command, Args: s.Args, Env: s.Env, InheritEnv: s.Env == nil,
		Dir: s.Dir, EOFGraceNS: int64(s.EOFGrace), TermGraceNS: int64(s.TermGrace), KillGraceNS: int64(s.KillGrace),
		PipeGraceNS: int64(s.PipeGrace), KillDescendants: s.KillDescendants,
	}
	if err := req.Validate(); err != nil {
		return req, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if len(s.HelperArgs) > MaxArgs {
		return req, fmt.Errorf("%w: more than MaxArgs=%d helper arguments", ErrInvalidSpec, MaxArgs)
	}
	return req, nil
}
