package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// Appender appends to the ledger behind a running bus: it is the remote
// counterpart of (*ledger.Ledger).Append, with the same signature, so that a
// producer (the runtime) can be given either.
//
// What it guarantees:
//
//   - Drafts are validated here first, exactly as the ledger does; an
//     invalid draft is refused with the same errors (wrapping
//     events.ErrInvalid, or ledger.ErrTooManyEvents) and nothing is sent.
//   - One call is one request, which the bus appends in one ledger Append:
//     all of the events are written, consecutively, or none is.
//   - Seqs are returned only once the bus has answered that they are
//     durable (fsynced), as the local Append does.
//   - An error wrapping ErrRemote means the bus refused the request and
//     wrote nothing (the bus finishes and answers every append it has taken
//     in, even while it closes).
//   - An error before the request left this process (connection closed,
//     ErrTooLarge, no responder on the append subject — nats.ErrNoResponders)
//     means nothing was written.
//   - Any failure after the request was sent — the caller's context ended,
//     the request timed out (DefaultRequestTimeout at most), the connection
//     dropped, the answer was unreadable — is reported as an *Error wrapping
//     ErrInDoubt (and the cause): the events may or may not be in the log.
//     The local ledger's counterpart is ledger.ErrUnacknowledged. To settle
//     the doubt, read the log from a head taken before the call (Client.Head,
//     Client.Replay) and look for the events.
//
// The connection must belong to the bus's writer user (see UserOptions);
// other users are not answered, which shows as ErrInDoubt after the
// timeout, or as nats.ErrNoResponders when the server reports it.
type Appender struct {
	c *Client
}

// NewAppender returns an Appender that appends through c.
func NewAppender(c *Client) *Appender { return &Appender{c: c} }

var _ interface {
	Append(context.Context, ...events.Draft) ([]events.Seq, error)
} = (*Appender)(nil)

// Append sends drafts to the bus's append API as one all-or-nothing request
// and returns their seqs once they are durable. See Appender for what an
// error means.
func (a *Appender) Append(ctx context.Context, drafts ...events.Draft) ([]events.Seq, error) {
	if len(drafts) == 0 {
		return nil, nil
	}
	if len(drafts) > ledger.MaxAppendEvents {
		return nil, &ledger.Error{Op: "append", Err: fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ledger.ErrTooManyEvents, len(drafts), ledger.MaxAppendEvents)}
	}
	body, err := encodeDrafts(drafts)
	if err != nil {
		return nil, err
	}
	if limit := a.c.nc.MaxPayload(); limit > 0 && int64(len(body)) > limit {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: fmt.Errorf("%w: %d bytes, the server takes %d", ErrTooLarge, len(body), limit)}
	}
	// Not c.request: its errors cannot tell "not sent" from "in doubt".
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: err}
	}
	if a.c.nc.IsClosed() {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: nats.ErrConnectionClosed}
	}
	rctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	m, err := a.c.nc.RequestWithContext(rctx, AppendSubject, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed):
		// The server told us nobody took the request in, or it never left.
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: err}
	case err != nil:
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: fmt.Errorf("%w: %w", ErrInDoubt, err)}
	}
	if e := m.Header.Get(HeaderError); e != "" {
		return nil, &Error{Op: "append", Subject: AppendSubject, Reply: e, Err: ErrRemote}
	}
	acks, err := parseAcks(m.Data)
	if err == nil && len(acks) != len(drafts) {
		err = ErrMalformedReply
	}
	if err != nil {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: fmt.Errorf("%w: %w", ErrInDoubt, err)}
	}
	seqs := make([]events.Seq, len(acks))
	for i, ack := range acks {
		seqs[i] = ack.Seq
	}
	return seqs, nil
}

// encodeDrafts validates each draft as the ledger would (events.Prepare)
// and writes it in the input form (events.Input) the append API reads, one
// JSON line per draft. The payload bytes are Prepare's canonical ones, so
// the bus stores exactly what a local Append would.
func encodeDrafts(drafts []events.Draft) ([]byte, error) {
	var body []byte
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, &ledger.Error{Op: "append", Err: fmt.Errorf("event %d of %d: %w", i, len(drafts), err)}
		}
		line, err := json.Marshal(events.Input{Kind: p.Kind, Activation: p.Activation, Session: p.Session, Server: p.Server, Data: p.Data})
		if err != nil {
			return nil, &ledger.Error{Op: "append", Err: fmt.Errorf("event %d of %d: %w: %v", i, len(drafts), events.ErrInvalid, err)}
		}
		body = append(append(body, line...), '\n')
	}
	return body, nil
}
