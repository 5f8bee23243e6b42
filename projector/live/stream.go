package live

// The stream: the reducer fed stored log bytes outside a live projection,
// for the readers that fold a whole log once (the lease table, the
// audit of every activation) and then print.

import (
	"context"
	"errors"
	"fmt"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
)

// Stream defaults.
const (
	// DefaultSettleEvery is how many events an audit stream's Scan applies
	// between two settlements of retired activations. A settlement costs
	// one indexed read per retired activation in memory.
	DefaultSettleEvery = 4096
	// DefaultForgetEvery is how many events a lease stream applies between
	// two evictions of retired activations (cheap: nothing is read).
	DefaultForgetEvery = 10_000
)

// Stream errors.
var (
	// ErrNotAudit: Summary of a stream opened without StreamOptions.Audit,
	// which forgot retired activations as it went.
	ErrNotAudit = errors.New("live: the stream is not an audit stream")
	// ErrStreamEnded: Add or Scan after Summary, which ended the stream.
	ErrStreamEnded = errors.New("live: the stream has ended")
)

// StreamOptions configures NewStream.
type StreamOptions struct {
	// Audit makes the stream keep every activation until its verdict is
	// final, for Summary. Without it the stream forgets retired
	// activations (closed, no lease names them) as it goes: the lease
	// table, the open sessions and the anomalies never read them
	// (projector's TestLeaseTableIgnoresRetired).
	Audit bool
	// Limit is the number of unconfirmed activations Summary lists
	// (zero: audit.DefaultUnconfirmed; audit.All: every one).
	Limit int
	// Every is the number of events between two evictions of retired
	// activations: forgetting them (a lease stream), or, in Scan,
	// settling them (an audit stream). Zero: DefaultSettleEvery for an
	// audit stream, DefaultForgetEvery otherwise.
	Every int
	// Progress, when set, is called by Scan every Every events and once at
	// the end, with the events Scan applied and the head it started at.
	Progress func(done, head uint64)
}

// Stream is the reducer fed a log's stored bytes in seq order outside a
// live projection: `leaseledger leases` (from a data directory or over a
// serve's replay API), `audit --all` (from a data directory) and
// `audit --bundle` (the events of a verified bundle) fold through it and
// only print what it returns. Its memory follows live state, not history:
//
//   - a lease stream forgets every retired activation as it goes;
//   - an audit stream fed by Scan settles them: every Every events, each
//     retired activation the ledger's activation index shows no later
//     event for has its final verdict counted and is dropped. Summary
//     equals audit.Summarize of a plain replay of the same events
//     (TestStreamAuditTwin). An audit stream fed only by Add (no index to
//     ask) keeps every activation.
//
// A Stream is not safe for concurrent use. Its lifecycle: NewStream, then
// Add or Scan any number of times, then read (Seq, Leases) or end it
// (Summary).
type Stream struct {
	state *projector.State
	col   *audit.Collector // nil: a lease stream
	every uint64
	since uint64 // events since the last eviction
	prog  func(done, head uint64)
	ended bool
}

// NewStream returns an empty stream (at seq 0).
func NewStream(opts StreamOptions) *Stream {
	s := &Stream{state: projector.New(), prog: opts.Progress}
	// Only what no later event names is dropped, and nothing is stored.
	s.state.SetArchive(forgetful{})
	if opts.Audit {
		s.col = audit.NewCollector(opts.Limit)
	}
	switch {
	case opts.Every > 0:
		s.every = uint64(opts.Every)
	case opts.Audit:
		s.every = DefaultSettleEvery
	default:
		s.every = DefaultForgetEvery
	}
	return s
}

// Add applies the stored bytes of event seq (in seq order after the events
// already applied); its shape is that of ledger.Scan's and the bus
// client's replay callbacks. A lease stream forgets retired activations
// every Every events.
func (s *Stream) Add(seq ledger.Seq, raw []byte) error {
	if err := s.apply(seq, raw); err != nil {
		return err
	}
	if s.col == nil && s.since >= s.every {
		s.since = 0
		s.state.Evict(s.state.Seq())
	}
	return nil
}

// apply folds one event and counts it.
func (s *Stream) apply(seq ledger.Seq, raw []byte) error {
	if s.ended {
		return ErrStreamEnded
	}
	if err := s.state.ApplyRaw(raw); err != nil {
		return fmt.Errorf("live: stream seq %d: %w", seq, err)
	}
	s.since++
	return nil
}

// Scan applies every event of l after the stream's seq, the log read ahead
// on a goroutine of its own (ledger.ScanAhead) while this one applies. An
// audit stream settles retired activations every Every events (see
// Stream), reading l's activation index; a lease stream forgets them.
func (s *Stream) Scan(ctx context.Context, l *ledger.Ledger) error {
	if s.ended {
		return ErrStreamEnded
	}
	head := uint64(l.Head().Seq)
	var done uint64
	s.since = 0
	err := l.ScanAhead(ctx, ledger.Query{From: ledger.Seq(s.state.Seq() + 1)}, func(seq ledger.Seq, raw []byte) error {
		if err := s.apply(seq, raw); err != nil {
			return err
		}
		if done++; s.since < s.every {
			return nil
		}
		s.since = 0
		s.progress(done, head)
		if s.col == nil {
			s.state.Evict(s.state.Seq())
			return nil
		}
		return s.settle(ctx, l)
	})
	if err != nil {
		return err
	}
	s.progress(done, head)
	return nil
}

func (s *Stream) progress(done, head uint64) {
	if s.prog != nil {
		s.prog(done, head)
	}
}

// settle counts and drops every retired activation in memory that l names
// in no event after the stream's seq: no lease can name it again, so its
// verdict is final.
func (s *Stream) settle(ctx context.Context, l *ledger.Ledger) error {
	for _, act := range s.state.Retired() {
		later := false
		err := l.Scan(ctx, ledger.Query{Activation: act.ID, From: ledger.Seq(s.state.Seq() + 1)}, func(ledger.Seq, []byte) error {
			later = true
			return errStopScan
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return fmt.Errorf("live: settling %s: %w", act.ID, err)
		}
		if later {
			continue
		}
		v, reasons, omitted := projector.RetiredVerdict(act)
		s.col.Add(act.ID, v, reasons, omitted, act.Connection.Report != nil)
		s.state.Drop(act.ID)
	}
	return nil
}

// errStopScan ends settle's look for a later event at the first one.
var errStopScan = errors.New("live: stop scan")

// Seq returns the seq of the last event applied.
func (s *Stream) Seq() uint64 { return s.state.Seq() }

// Leases returns the lease table at Seq (projector.State.Leases): the
// state's own leases, which the caller reads and does not keep past the
// next Add or Scan.
func (s *Stream) Leases() []*projector.Lease { return s.state.Leases() }

// Summary ends an audit stream and returns the audit of every activation
// it applied (settled or still in memory), with the chain's bound host
// and its access policy: what audit.Summarize returns for a plain replay
// of the same events.
// Add and Scan fail afterwards, and so does a second Summary.
func (s *Stream) Summary() (audit.Summary, error) {
	if s.col == nil {
		return audit.Summary{}, ErrNotAudit
	}
	if s.ended {
		return audit.Summary{}, ErrStreamEnded
	}
	s.ended = true
	for _, id := range s.state.ActivationIDs() {
		v, reasons, omitted := s.state.Verdict(id)
		_, closed := s.state.CloseReport(id)
		s.col.Add(id, v, reasons, omitted, closed)
	}
	sum := s.col.Summary(s.state.Applied(), s.state.Anomalies())
	sum.Host, sum.Policy = s.state.Host(), s.state.Policy()
	return sum, nil
}

// forgetful is an Archive that keeps nothing: a stream drops only what no
// later event names (settle) or what its reader never reads (a lease
// stream's retired activations), so nothing need come back.
type forgetful struct{}

func (forgetful) Load(string) (*projector.Activation, bool, error) { return nil, false, nil }
