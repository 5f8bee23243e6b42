package busclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// Ack is what the bus acknowledged for one appended, durable event.
type Ack struct {
	Seq events.Seq
	ID  ulid.ULID // the event's id, as events.Envelope.ID
}

// Append sends JSON Lines of input-form events to the bus's append API and
// returns their acknowledgements once they are durable. The connection's
// user must be the bus's writer. The server appends the lines in one call,
// all or nothing, and names the first bad line in its refusal. An error
// means what it means for Appender.Append: wrapping ErrRemote (or raised
// before the request left: a closed connection, ErrTooLarge,
// nats.ErrNoResponders), nothing was written; wrapping ErrInDoubt, the
// events may or may not have been written.
func (c *Client) Append(ctx context.Context, lines []byte) ([]Ack, error) {
	return c.appendBody(ctx, lines)
}

// appendBody sends one append request and classifies its failure: "not
// written" only when the request certainly did not leave or the bus
// refused it; everything else is ErrInDoubt.
func (c *Client) appendBody(ctx context.Context, body []byte) ([]Ack, error) {
	fail := func(err error) ([]Ack, error) {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: err}
	}
	if limit := c.nc.MaxPayload(); limit > 0 && int64(len(body)) > limit {
		return fail(fmt.Errorf("%w: %d bytes, the server takes %d", ErrTooLarge, len(body), limit))
	}
	// Not c.request's error handling: an error of the request call cannot
	// tell "not sent" from "sent, no answer", so what is known not to have
	// left is checked here first.
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if c.nc.IsClosed() {
		return fail(nats.ErrConnectionClosed)
	}
	m, err := c.request(ctx, AppendSubject, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// The server reported that no responder took the request in.
		return fail(err)
	case err != nil:
		// Anything else may come after the request was published: a
		// timeout, the context ending, the connection closing or dropping
		// while the reply was awaited (nats.ErrConnectionClosed,
		// nats.ErrDisconnected).
		return fail(fmt.Errorf("%w: %w", ErrInDoubt, err))
	}
	if e := m.Header.Get(HeaderError); e != "" {
		if m.Header.Get(HeaderInDoubt) == "true" {
			return nil, &Error{Op: "append", Subject: AppendSubject, Reply: e, Err: ErrInDoubt}
		}
		return nil, &Error{Op: "append", Subject: AppendSubject, Reply: e, Err: ErrRemote}
	}
	acks, err := parseAcks(m.Data)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInDoubt, err))
	}
	return acks, nil
}

// parseAcks reads the append API's reply: "<seq> <ulid>" per event.
func parseAcks(data []byte) ([]Ack, error) {
	var acks []Ack
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		seqText, idText, ok := bytes.Cut(line, []byte{' '})
		seq, err := strconv.ParseUint(string(seqText), 10, 64)
		if !ok || err != nil {
			return nil, ErrMalformedReply
		}
		id, err := ulid.ParseStrict(string(idText))
		if err != nil {
			return nil, ErrMalformedReply
		}
		acks = append(acks, Ack{Seq: events.Seq(seq), ID: id})
	}
	return acks, nil
}

// String is a's line in the append API's reply, without its newline:
// "<seq> <ulid>".
func (a Ack) String() string { return strconv.FormatUint(uint64(a.Seq), 10) + " " + a.ID.String() }

// Appender appends to the ledger behind a running bus: it is the remote
// counterpart of (*ledger.Ledger).Append, with the same signature, so that a
// producer (the runtime) can be given either.
//
// What it guarantees:
//
//   - Drafts are validated here first, exactly as the ledger does; an
//     invalid draft is refused with the same events errors (wrapping
//     events.ErrInvalid), more than MaxAppendEvents drafts with
//     ErrTooManyEvents, and nothing is sent.
//   - One call is one request, which the bus appends in one ledger Append:
//     all of the events are written, consecutively, or none is.
//   - Seqs are returned only once the bus has answered that they are
//     durable (fsynced), as the local Append does.
//
// What an error means — nothing was written only when that is known:
//
//   - An error wrapping ErrRemote: the bus refused the request and wrote
//     nothing (the bus finishes and answers every append it has taken in,
//     even while it closes).
//   - An error raised before the request was sent: the caller's context
//     had already ended, the connection was already closed (checked just
//     before sending), ErrTooLarge, ErrTooManyEvents, an invalid draft; or
//     nats.ErrNoResponders (the server reports that nobody took the
//     request in). Nothing was written.
//   - Every other error is an *Error wrapping ErrInDoubt (and its cause):
//     any error of the request call itself — the caller's context ended,
//     the request timed out (DefaultRequestTimeout at most), the
//     connection closed or dropped while the answer was awaited
//     (nats.ErrConnectionClosed, nats.ErrDisconnected) —, an unreadable
//     answer, and an answer in which the bus says its ledger cannot tell
//     either (HeaderInDoubt: the ledger's storage failed, ledger.ErrFailed,
//     or its append was not acknowledged, ledger.ErrUnacknowledged). The
//     events may or may not be in the log. The local ledger's counterpart
//     is ledger.ErrUnacknowledged. To settle the doubt, read the log from a
//     head taken before the call (Client.Head, Client.Replay) and look for
//     the events.
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
	if len(drafts) > MaxAppendEvents {
		return nil, &Error{Op: "append", Err: fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ErrTooManyEvents, len(drafts), MaxAppendEvents)}
	}
	body, err := encodeDrafts(drafts)
	if err != nil {
		return nil, err
	}
	acks, err := a.c.appendBody(ctx, body)
	if err != nil {
		return nil, err
	}
	if len(acks) != len(drafts) {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: fmt.Errorf("%w: %w: %d acknowledgements for %d events", ErrInDoubt, ErrMalformedReply, len(acks), len(drafts))}
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
			return nil, &Error{Op: "append", Err: fmt.Errorf("event %d of %d: %w", i, len(drafts), err)}
		}
		line, err := json.Marshal(events.Input{Kind: p.Kind, Activation: p.Activation, Session: p.Session, Server: p.Server, Data: p.Data})
		if err != nil {
			return nil, &Error{Op: "append", Err: fmt.Errorf("event %d of %d: %w: %v", i, len(drafts), events.ErrInvalid, err)}
		}
		body = append(append(body, line...), '\n')
	}
	return body, nil
}
