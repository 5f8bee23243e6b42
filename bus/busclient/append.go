package busclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

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
// all or nothing, and names the first bad line in its refusal. The request
// carries a fresh idempotency key (NewIdempotencyKey) and is retried under
// the client's RetryPolicy while its outcome is in doubt, so that a stalled
// or restarting bus delays it without writing it twice. An error means what
// it means for Appender.Append.
func (c *Client) Append(ctx context.Context, lines []byte) ([]Ack, error) {
	return c.AppendWithKey(ctx, NewIdempotencyKey(), lines)
}

// AppendWithKey is Append under the caller's idempotency key: a caller
// that persists the key can retry the same lines after its own restart
// and get the original acknowledgements (within the bus's window).
func (c *Client) AppendWithKey(ctx context.Context, key string, lines []byte) ([]Ack, error) {
	if !validKey(key) {
		return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Err: ErrIdempotencyKey}
	}
	return c.appendBody(ctx, key, lines)
}

// NewIdempotencyKey returns a fresh idempotency key: a ULID (time-ordered,
// 80 random bits).
func NewIdempotencyKey() string { return ulid.Make().String() }

func validKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// RetryPolicy bounds how an append whose outcome is in doubt is sent again
// under its idempotency key. Zero fields take the defaults
// (DefaultRequestTimeout, DefaultAppendDeadline, DefaultAppendAttempts,
// DefaultAppendBackoff, DefaultMaxAppendBackoff); MaxAttempts 1 disables
// retrying.
type RetryPolicy struct {
	// RequestTimeout bounds one attempt.
	RequestTimeout time.Duration
	// Deadline bounds all attempts together, from the first.
	Deadline time.Duration
	// MaxAttempts bounds the attempts.
	MaxAttempts int
	// Backoff is the pause before the second attempt, doubled after each
	// attempt up to MaxBackoff (with up to 25 % random jitter).
	Backoff, MaxBackoff time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.RequestTimeout <= 0 {
		p.RequestTimeout = DefaultRequestTimeout
	}
	if p.Deadline <= 0 {
		p.Deadline = DefaultAppendDeadline
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultAppendAttempts
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultAppendBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxAppendBackoff
	}
	return p
}

// WithRetry returns a copy of c whose appends follow p.
func (c *Client) WithRetry(p RetryPolicy) *Client {
	cp := *c
	cp.retry = p
	return &cp
}

// appendBody sends one append under key, retrying while its outcome is in
// doubt, and classifies the result: "not written" only when no attempt may
// have been written; once one may have, every failure is ErrInDoubt.
func (c *Client) appendBody(ctx context.Context, key string, body []byte) ([]Ack, error) {
	if c.user == PeerClass {
		return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Err: ErrReadOnlyClass}
	}
	p := c.retry.withDefaults()
	if limit := c.nc.MaxPayload(); limit > 0 && int64(len(body)) > limit {
		return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Err: fmt.Errorf("%w: %d bytes, the server takes %d", ErrTooLarge, len(body), limit)}
	}
	ctx, cancel := context.WithTimeout(ctx, p.Deadline)
	defer cancel()
	var (
		doubt     error // the first attempt that may have been written
		firstSent time.Time
		backoff   = p.Backoff
	)
	for attempt := 1; ; attempt++ {
		acks, err, sent := c.appendOnce(ctx, key, firstSent, body, p.RequestTimeout)
		if err == nil {
			return acks, nil
		}
		if !sent.IsZero() && firstSent.IsZero() {
			firstSent = sent
		}
		inDoubt := errors.Is(err, ErrInDoubt)
		if inDoubt && doubt == nil {
			doubt = err
		}
		retry := inDoubt && !errors.Is(err, ErrIdempotencyExpired) ||
			errors.Is(err, ErrRateLimited) || errors.Is(err, nats.ErrNoResponders)
		if !retry || attempt >= p.MaxAttempts || c.nc.IsClosed() || ctx.Err() != nil || !sleep(ctx, jitter(backoff)) {
			if doubt == nil || inDoubt {
				return nil, err
			}
			// An earlier attempt may have been written: this one's failure
			// does not settle it.
			var be *Error
			if errors.As(err, &be) && be.Reply != "" {
				return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Reply: be.Reply, Err: fmt.Errorf("%w after %d attempts (the last: %w)", ErrInDoubt, attempt, errors.Unwrap(err))}
			}
			return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Err: fmt.Errorf("%w after %d attempts (the last: %w)", ErrInDoubt, attempt, err)}
		}
		backoff = min(2*backoff, p.MaxBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func jitter(d time.Duration) time.Duration { return d + time.Duration(rand.Int64N(int64(d)/4+1)) }

// appendOnce sends one attempt. sent is when the request was handed to
// NATS (zero: it was not, or the server says nobody took it in).

func (c *Client) appendOnce(ctx context.Context, key string, firstSent time.Time, body []byte, timeout time.Duration) (acks []Ack, err error, sent time.Time) {
	fail := func(err error) ([]Ack, error, time.Time) {
		return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Err: err}, sent
	}
	// An error of the request call cannot tell "not sent" from "sent, no
	// answer", so what is known not to have left is checked here first.
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	// A connection that is re-made (its server went away) takes the
	// attempt only once it is back: on the server it was given
	// (ConnectOptions), so the attempt goes to the same host.
	if err := awaitConnected(ctx, c.nc); err != nil {
		return fail(err)
	}
	msg := nats.NewMsg(UserSubject(c.subject(AppendSubject), c.user))
	msg.Data = body
	msg.Header.Set(HeaderIdempotencyKey, key)
	if !firstSent.IsZero() {
		msg.Header.Set(HeaderFirstSent, strconv.FormatInt(firstSent.UnixMilli(), 10))
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The answer to a request sent before the connection dropped is lost
	// with it: the attempt ends in doubt at the drop, not at its timeout,
	// and the next one is sent as soon as the connection is back.
	dropped := abortOnDrop(c.nc, cancel)
	defer dropped.stop()
	sent = time.Now()
	m, err := c.nc.RequestMsgWithContext(rctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// The server reported that no responder took the request in.
		return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Err: err}, time.Time{}
	case errors.Is(err, context.Canceled) && dropped.fired() && ctx.Err() == nil:
		// Ended by the drop (abortOnDrop), not by the caller.
		cause := nats.ErrDisconnected
		if c.nc.IsClosed() {
			cause = nats.ErrConnectionClosed
		}
		return fail(fmt.Errorf("%w: %w", ErrInDoubt, cause))
	case err != nil:
		// Anything else may come after the request was published: a
		// timeout, the context ending, the connection closing or dropping
		// while the reply was awaited (nats.ErrConnectionClosed,
		// nats.ErrDisconnected).
		return fail(fmt.Errorf("%w: %w", ErrInDoubt, err))
	}
	if e := m.Header.Get(HeaderError); e != "" {
		cause := ErrRemote
		switch {
		case m.Header.Get(HeaderInDoubt) == "true":
			cause = ErrInDoubt
		case m.Header.Get(HeaderErrorCode) == CodeIdempotencyExpired:
			cause = fmt.Errorf("%w: %w", ErrInDoubt, ErrIdempotencyExpired)
		case m.Header.Get(HeaderErrorCode) == CodeIdempotencyConflict:
			cause = fmt.Errorf("%w: %w", ErrRemote, ErrIdempotencyConflict)
		case m.Header.Get(HeaderErrorCode) == CodeRateLimited:
			cause = fmt.Errorf("%w: %w", ErrRemote, ErrRateLimited)
		}
		return nil, &Error{Op: "append", Subject: c.subject(AppendSubject), Reply: e, Err: cause}, sent
	}
	acks, err = parseAcks(m.Data)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInDoubt, err))
	}
	return acks, nil, sent
}

// awaitConnected returns once nc is connected, or nats.ErrConnectionClosed
// once it is closed, or ctx's error when ctx ends first. A connection
// that is re-made is waited for; any other state (draining) is left to
// the request to report.
func awaitConnected(ctx context.Context, nc *nats.Conn) error {
	changed := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(changed)
	for {
		switch nc.Status() {
		case nats.CLOSED:
			return nats.ErrConnectionClosed
		case nats.RECONNECTING, nats.CONNECTING, nats.DISCONNECTED:
		default:
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// dropWatch calls abort once when its connection drops (reconnecting,
// disconnected or closed) before stop.
type dropWatch struct {
	done    chan struct{}
	ended   chan struct{}
	dropped atomic.Bool
}

func abortOnDrop(nc *nats.Conn, abort context.CancelFunc) *dropWatch {
	w := &dropWatch{done: make(chan struct{}), ended: make(chan struct{})}
	lost := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	if nc.Status() != nats.CONNECTED {
		// It dropped before the watch began.
		w.dropped.Store(true)
		abort()
	}
	go func() {
		defer close(w.ended)
		defer nc.RemoveStatusListener(lost)
		select {
		case <-lost:
			w.dropped.Store(true)
			abort()
		case <-w.done:
		}
	}()
	return w
}

// fired reports whether the connection dropped (and the attempt was aborted).
func (w *dropWatch) fired() bool { return w.dropped.Load() }

// stop ends the watch and waits for its goroutine.
func (w *dropWatch) stop() {
	close(w.done)
	<-w.ended
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
// Retries: each call carries a fresh idempotency key. An attempt whose
// outcome is in doubt (no answer within RetryPolicy.RequestTimeout, the
// connection dropped while the answer was awaited, the bus's ledger cannot
// tell), a rate-limit refusal and "no responders" (the bus restarting) are
// retried under the same key with backoff, within the client's
// RetryPolicy (see Client.WithRetry: attempts, overall deadline). An
// attempt whose connection drops is in doubt at the drop (its answer is
// lost with the connection), and the next attempt waits for the
// connection to be back — on the servers it was given (ConnectOptions),
// so a retry goes to the same host, never to another server of its
// cluster (TestAppendRetriedOnSameServerAfterRestart). The bus
// answers a retry of an append it has written with the original seqs and
// writes nothing, so a stalled or restarting bus delays the call; it does
// not make it give up or write twice.
//
// What an error means — nothing was written only when that is known:
//
//   - An error wrapping ErrRemote, when no earlier attempt was in doubt:
//     the bus refused the request and wrote nothing (the bus finishes and
//     answers every append it has taken in, even while it closes).
//   - An error raised before any attempt was sent: the caller's context
//     had already ended, the connection was already closed (checked just
//     before sending), ErrTooLarge, ErrTooManyEvents, an invalid draft; or
//     nats.ErrNoResponders on every attempt (nobody took the request in).
//     Nothing was written.
//   - Every other error is an *Error wrapping ErrInDoubt (and the last
//     attempt's cause): some attempt may have been written and no later
//     one settled it before the caller's context, the policy's deadline or
//     attempts ran out or the connection closed; or the bus refused a
//     retry with ErrIdempotencyExpired (the key may have left its window).
//     The events may or may not be in the log (once at most). The local
//     ledger's counterpart is ledger.ErrUnacknowledged. To settle the
//     doubt, read the log from a head taken before the call
//     (Client.Head, Client.Replay) and look for the events.
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
	acks, err := a.c.appendBody(ctx, NewIdempotencyKey(), body)
	if err != nil {
		return nil, err
	}
	if len(acks) != len(drafts) {
		return nil, &Error{Op: "append", Subject: a.c.subject(AppendSubject), Err: fmt.Errorf("%w: %w: %d acknowledgements for %d events", ErrInDoubt, ErrMalformedReply, len(acks), len(drafts))}
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
