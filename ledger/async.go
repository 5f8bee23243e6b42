package ledger

// Appends whose caller does not wait for the fsync. The commit pipeline's
// invariants (commit.go) hold unchanged: an async append is an ordinary
// request in the queue, and only its waiting is deferred.
//
//   - Order: the committer seals requests in queue order, so everything
//     enqueued after AppendAsync returned (by any goroutine) is sealed after
//     its events.
//   - Not lost silently: its failure is the ledger's sticky failure, so
//     every later append fails too, and its wait returns the error.

import (
	"context"
	"fmt"

	"github.com/leaseledger/leaseledger/events"
)

// AppendAsync validates drafts and queues them as one atomic append, like
// Append, but returns once they are queued, before their fsync: every
// append queued after AppendAsync returns is sealed after them. wait
// blocks until they are durable and returns their seqs, or the append's
// error (ErrUnacknowledged when ctx ends first: in doubt). wait may be
// called any number of times, from any goroutine. An error from
// AppendAsync itself (invalid drafts, ErrClosed, the sticky failure, ctx
// ended) means nothing was queued, and wait is nil. Close commits every
// queued append before it returns.
func (l *Ledger) AppendAsync(ctx context.Context, drafts ...events.Draft) (wait func(context.Context) ([]Seq, error), err error) {
	if len(drafts) == 0 {
		return func(context.Context) ([]Seq, error) { return nil, nil }, nil
	}
	if len(drafts) > MaxAppendEvents {
		return nil, &Error{Op: "append", Err: fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ErrTooManyEvents, len(drafts), MaxAppendEvents)}
	}
	prepared := make([]events.Prepared, len(drafts))
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, &Error{Op: "append", Err: fmt.Errorf("event %d of %d: %w", i, len(drafts), err)}
		}
		prepared[i] = p
	}
	return l.AppendPreparedAsync(ctx, prepared...)
}

// AppendPreparedAsync is AppendAsync for events already prepared
// (events.Prepare): a caller that must queue appends in a fixed order
// under its own lock prepares outside it. The ledger keeps prepared (the
// slice's elements) until the append completed: do not modify it.
func (l *Ledger) AppendPreparedAsync(ctx context.Context, prepared ...events.Prepared) (wait func(context.Context) ([]Seq, error), err error) {
	if len(prepared) == 0 {
		return func(context.Context) ([]Seq, error) { return nil, nil }, nil
	}
	if len(prepared) > MaxAppendEvents {
		return nil, &Error{Op: "append", Err: fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ErrTooManyEvents, len(prepared), MaxAppendEvents)}
	}
	req := &appendReq{prepared: prepared, done: make(chan struct{})}
	if err := l.enqueue(ctx, req); err != nil {
		return nil, &Error{Op: "append", Err: err}
	}
	return func(ctx context.Context) ([]Seq, error) {
		select {
		case <-req.done:
		case <-ctx.Done():
			return nil, &Error{Op: "append", Err: fmt.Errorf("%w: %w", ErrUnacknowledged, ctx.Err())}
		}
		if req.err != nil {
			return nil, &Error{Op: "append", Err: req.err}
		}
		seqs := make([]Seq, len(req.acks))
		for i, a := range req.acks {
			seqs[i] = a.Seq
		}
		return seqs, nil
	}, nil
}
