package runtime

import (
	"context"
	"io"

	"github.com/leaseledger/leaseledger/guardian"
)

// child is one running MCP server as a lease sees it: the mechanism under
// the lease's policy. The lease decides when a child starts, which calls
// reach it and when it ends; the child only carries bytes and reports the
// facts of its start and of its cleanup.
//
// The production children are a guardian session (guardianChild, an
// entry's default "cleanup": "verified"), a process the host started
// itself (directChild, "cleanup": "direct", direct.go) and a remote HTTP
// session (httpChild). Keeping the
// policy behind this seam lets the tests drive single-flight, the cap,
// reaping, the call gate, revocation and session end against in-process
// children in milliseconds, without processes or Node.js.
type child interface {
	// stream is the child's MCP stdio stream (newline-delimited
	// JSON-RPC). Its Close detaches: it unblocks pending reads and writes
	// and does not end the child.
	stream() io.ReadWriteCloser
	// done is closed when the child's session has ended on its own (the
	// child exited, the helper was lost) or by close.
	done() <-chan struct{}
	// facts are what the launch established, for guardian.started and
	// lease.child_started.
	facts() childFacts
	// close runs the child's cleanup within ctx (its whole budget) and
	// returns the cleanup facts. The lease calls it once.
	close(ctx context.Context) guardian.CleanupResult
}

// childFacts are the facts of a started child.
type childFacts struct {
	TargetPID     int
	HelperPID     int
	HelperVersion string
	PIDFD         bool
}

// launchFunc starts one child for spec. A failure means no child exists.
type launchFunc func(ctx context.Context, spec guardian.Spec) (child, error)

// launchGuardian is the production launchFunc: the child runs under the
// guardian helper, which is its real parent and reports its cleanup.
func launchGuardian(ctx context.Context, spec guardian.Spec) (child, error) {
	s, err := guardian.Launch(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &guardianChild{s: s}, nil
}

// guardianChild is a child running under a guardian session.
type guardianChild struct {
	s     *guardian.Session
	probe procProbe // the target's liveness, read before each admission
}

func (g *guardianChild) stream() io.ReadWriteCloser { return g.s.Stream() }
func (g *guardianChild) done() <-chan struct{}      { return g.s.Done() }
func (g *guardianChild) close(ctx context.Context) guardian.CleanupResult {
	defer g.probe.close()
	return g.s.Close(ctx)
}
func (g *guardianChild) facts() childFacts {
	return childFacts{TargetPID: g.s.TargetPID(), HelperPID: g.s.HelperPID(), HelperVersion: g.s.HelperVersion(), PIDFD: g.s.PIDFD()}
}

// launchSpec is the guardian spec of a lease.
func (m *Manager) launchSpec(l *lease) guardian.Spec {
	return guardian.Spec{
		Command: l.cfg.Command, Args: l.cfg.Args, Env: l.cfg.envList(), Dir: l.cfg.Cwd, ActivationID: l.activation,
		EOFGrace: m.opts.EOFGrace, TermGrace: m.opts.TermGrace, KillGrace: m.opts.KillGrace, PipeGrace: m.opts.PipeGrace,
		KillDescendants: m.opts.KillDescendants, HelperPath: m.opts.HelperPath, HelperArgs: m.opts.HelperArgs, Stderr: stderrSink{l},
	}
}
