package ledger

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// ErrNotFound is returned by Get for a seq beyond the durable head.
var ErrNotFound = errors.New("ledger: no such event")

// Query selects events. From and To are inclusive; zero To means the
// durable head. At most one index is used, the most selective set field in
// the order Activation, Session, Kind; the other set fields filter.
type Query struct {
	From, To   Seq
	Kind       events.Kind
	Activation string
	Session    string
}

// Validate checks identifiers so that a query cannot address keys outside
// its index.
func (q Query) Validate() error {
	if q.Activation != "" && !events.ValidID(q.Activation) {
		return &Error{Op: "query", Err: &events.FieldError{Field: "activation", Reason: "want " + events.IDRule}}
	}
	if q.Session != "" && !events.ValidID(q.Session) {
		return &Error{Op: "query", Err: &events.FieldError{Field: "session", Reason: "want " + events.IDRule}}
	}
	if q.Kind != "" && !events.Known(q.Kind) {
		// Static text: the error may be sent to whoever asked (the bus's
		// replay error), so it never echoes the request.
		return &Error{Op: "query", Err: events.ErrUnknownKind}
	}
	return nil
}

// Get returns the durable event at seq.
func (l *Ledger) Get(seq Seq) (events.Envelope, error) {
	raw, err := l.GetRaw(seq)
	if err != nil {
		return events.Envelope{}, err
	}
	env, err := events.Decode(raw)
	if err != nil {
		return events.Envelope{}, &Error{Op: "get", Seq: seq, Err: err}
	}
	return env, nil
}

// GetRaw returns the stored bytes of the durable event at seq.
func (l *Ledger) GetRaw(seq Seq) ([]byte, error) {
	end, err := l.beginRead("get")
	if err != nil {
		return nil, err
	}
	defer end()
	if head := l.Head().Seq; seq == 0 || seq > head {
		return nil, &Error{Op: "get", Seq: seq, Err: fmt.Errorf("%w (head %d)", ErrNotFound, head)}
	}
	g := l.guard()
	v, closer, err := l.db.Get(keys.Event(seq))
	if err != nil {
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, &Error{Op: "get", Seq: seq, Err: fmt.Errorf("%w: missing below the head", ErrCorrupt)}
		}
		return nil, l.readErr("get", seq, 0, err)
	}
	raw := append([]byte(nil), v...)
	closer.Close()
	if err := g.check("get", seq, 0); err != nil {
		return nil, err
	}
	return raw, nil
}

// Scan calls fn with the seq and stored bytes of every durable event the
// query selects, in seq order. The bytes are only valid during the call.
// Scan stops at the first error fn returns and returns it unchanged; every
// other error is an *Error. Damaged storage ends the scan with an *Error
// wrapping ErrCorrupt whose Seq..Last is the range it could not read (from
// the first seq not yet handed to fn to the end of the query, narrowed to
// the damaged file's events when Pebble names them); the events before it
// have been handed to fn.
//
// Scan runs the iteration and fn one after the other on the caller's
// goroutine; ScanAhead gives the same calls with the iteration running
// ahead on a goroutine of its own.
func (l *Ledger) Scan(ctx context.Context, q Query, fn func(seq Seq, raw []byte) error) error {
	if err := q.Validate(); err != nil {
		return err
	}
	end, err := l.beginRead("scan")
	if err != nil {
		return err
	}
	defer end()
	return l.scan(ctx, q, fn)
}

// scan is Scan's iteration, for a validated query under a registered read.
func (l *Ledger) scan(ctx context.Context, q Query, fn func(seq Seq, raw []byte) error) error {
	head := l.Head().Seq
	from, to := max(q.From, 1), q.To
	if to == 0 || to > head {
		to = head
	}
	if from > to {
		return nil
	}
	var (
		prefix  []byte
		filters int
	)
	switch {
	case q.Activation != "":
		prefix = keys.IndexPrefix(keys.PrefixActivation, q.Activation)
		filters = boolInt(q.Session != "") + boolInt(q.Kind != "")
	case q.Session != "":
		prefix = keys.IndexPrefix(keys.PrefixSession, q.Session)
		filters = boolInt(q.Kind != "")
	case q.Kind != "":
		prefix = keys.IndexPrefix(keys.PrefixKind, string(q.Kind))
	}
	match := func(raw []byte) (bool, error) {
		if filters == 0 {
			return true, nil
		}
		env, err := events.Decode(raw)
		if err != nil {
			return false, err
		}
		return (q.Session == "" || env.Session == q.Session) && (q.Kind == "" || env.Kind == q.Kind), nil
	}

	// Without an index the iteration is over e/ itself and the value is at
	// hand; with one, each index key names a seq whose e/ value is fetched.
	lower, upper := keys.Event(from), keys.Event(to+1)
	if prefix != nil {
		lower = append(append([]byte(nil), prefix...), lower[len(keys.PrefixEvent):]...)
		upper = append(append([]byte(nil), prefix...), upper[len(keys.PrefixEvent):]...)
	}
	g := l.guard()
	it, err := l.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return l.readErr("scan", from, to, err)
	}
	defer it.Close()
	next := from // the first seq not yet visited
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return &Error{Op: "scan", Err: err}
		}
		seq, _ := keys.SeqOf(it.Key())
		if err := g.check("scan", next, to); err != nil {
			return err
		}
		if err := l.visit(it, prefix != nil, seq, match, fn); err != nil {
			return err
		}
		next = seq + 1
	}
	if err := it.Error(); err != nil {
		if ctx.Err() != nil {
			return &Error{Op: "scan", Err: err}
		}
		return l.readErr("scan", next, to, err)
	}
	return g.check("scan", next, to)
}

// visit hands one event to fn: the iterator's value on e/, or the e/ value
// an index entry names.
func (l *Ledger) visit(it *pebble.Iterator, indexed bool, seq Seq, match func([]byte) (bool, error), fn func(Seq, []byte) error) error {
	var raw []byte
	if indexed {
		v, closer, err := l.db.Get(keys.Event(seq))
		if err != nil {
			return l.readErr("scan", seq, 0, fmt.Errorf("the index names this event: %w", err))
		}
		defer closer.Close()
		raw = v
	} else {
		v, err := it.ValueAndErr()
		if err != nil {
			return l.readErr("scan", seq, 0, err)
		}
		raw = v
	}
	ok, err := match(raw)
	if err != nil {
		return &Error{Op: "scan", Seq: seq, Err: err}
	}
	if !ok {
		return nil
	}
	return fn(seq, raw)
}

// Events yields the decoded durable events the query selects, in seq order.
// An undecodable event ends the iteration with its error.
func (l *Ledger) Events(ctx context.Context, q Query) iter.Seq2[events.Envelope, error] {
	return func(yield func(events.Envelope, error) bool) {
		stopped := errors.New("stopped")
		err := l.Scan(ctx, q, func(seq Seq, raw []byte) error {
			env, err := events.Decode(raw)
			if err != nil {
				yield(events.Envelope{}, &Error{Op: "scan", Seq: seq, Err: err})
				return stopped
			}
			if !yield(env, nil) {
				return stopped
			}
			return nil
		})
		if err != nil && !errors.Is(err, stopped) {
			yield(events.Envelope{}, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
