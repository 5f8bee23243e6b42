package busclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/nats-io/nats.go"
)

// Client reads a ledger over its NATS bus: replay, head, and tail (catch up
// by replay, then go live, without gap or duplicate). It needs only the
// read-only permissions; Append needs the writer user.
type Client struct {
	nc    *nats.Conn
	user  string      // the bus user whose request subjects are used (UserSubject)
	host  string      // the host whose space is used (HostSubject); "" bare
	retry RetryPolicy // of appends (see WithRetry)
}

// NewClient wraps a NATS connection to a ledger bus. Its requests go to the
// subjects of the user the connection authenticated as (nats.UserInfo, as
// UserOptions sets it; anonymous without one); a connection whose
// credentials came another way (in its URL) needs WithUser.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc, user: nc.Opts.User} }

// WithUser returns a copy of c whose requests use the subjects of user
// (UserSubject; "" for anonymous).
func (c *Client) WithUser(user string) *Client {
	cp := *c
	cp.user = user
	return &cp
}

func (c *Client) request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	return c.nc.RequestWithContext(ctx, UserSubject(c.subject(subject), c.user), data)
}

// rateLimitPause is how long a read (head, replay) waits before asking
// again after a rate-limit refusal (CodeRateLimited).
const rateLimitPause = 100 * time.Millisecond

// read sends a read request (head, replay) and returns its reply once it
// is no refusal: a rate-limit refusal (CodeRateLimited) is waited out
// (rateLimitPause) and asked again until ctx ends (then ErrRateLimited
// with ErrRemote); any other refusal (HeaderError) is an *Error wrapping
// ErrRemote with the bus's text.
func (c *Client) read(ctx context.Context, op, subject string, data []byte) (*nats.Msg, error) {
	for {
		m, err := c.request(ctx, subject, data)
		if err != nil {
			return nil, &Error{Op: op, Subject: c.subject(subject), Err: err}
		}
		e := m.Header.Get(HeaderError)
		if e == "" {
			return m, nil
		}
		cause := ErrRemote
		if m.Header.Get(HeaderErrorCode) == CodeRateLimited {
			if sleep(ctx, rateLimitPause) {
				continue // the bus bounds request rates: ask again a little later
			}
			cause = fmt.Errorf("%w: %w", ErrRemote, ErrRateLimited)
		}
		return nil, &Error{Op: op, Subject: c.subject(subject), Reply: e, Err: cause}
	}
}

// Head asks the bus for the durable head. Rate-limit refusals are waited
// out, other refusals are ErrRemote (read; TestHeadWaitsOutRateLimit).
func (c *Client) Head(ctx context.Context) (HeadReply, error) {
	m, err := c.read(ctx, "head", HeadSubject, nil)
	if err != nil {
		return HeadReply{}, err
	}
	var h HeadReply
	if err := json.Unmarshal(m.Data, &h); err != nil {
		return HeadReply{}, &Error{Op: "head", Subject: c.subject(HeadSubject), Err: ErrMalformedReply}
	}
	return h, nil
}

// TailFilter selects events by kind and activation; both map onto the
// event subject, so the filter applies on the server.
type TailFilter struct {
	Kind       events.Kind
	Activation string
}

// Subject is the NATS subject matching f.
func (f TailFilter) Subject() string {
	a := f.Activation
	if a == "" {
		a = events.Wildcard
	}
	return events.Subject(f.Kind, a)
}

// validate checks f's identifiers (they become subject tokens) with the
// rules of package events; the error wraps events.ErrInvalid.
func (f TailFilter) validate() error {
	if f.Activation != "" && !events.ValidID(f.Activation) {
		return &events.FieldError{Field: "activation", Reason: "want " + events.IDRule}
	}
	if f.Kind != "" && !events.Known(f.Kind) {
		return fmt.Errorf("%w: the filter's kind", events.ErrUnknownKind)
	}
	return nil
}

// Replay calls fn with every stored event in [from, to] (to 0: the head at
// the time of each request) that f selects, chunk by chunk, and returns the
// next seq to ask for: one past the range it covered. An error of fn is
// returned as it is; every other error is an *Error. Rate-limit refusals
// are waited out, as Head does (read).
func (c *Client) Replay(ctx context.Context, from, to events.Seq, f TailFilter, fn func(seq events.Seq, raw []byte) error) (events.Seq, error) {
	if err := f.validate(); err != nil {
		return from, &Error{Op: "replay", Subject: c.subject(ReplaySubject), Err: err}
	}
	from = max(from, 1)
	for {
		req, _ := json.Marshal(ReplayRequest{From: from, To: to, Kind: f.Kind, Activation: f.Activation})
		m, err := c.read(ctx, "replay", ReplaySubject, req)
		if err != nil {
			return from, err
		}
		next, err := strconv.ParseUint(m.Header.Get(HeaderNext), 10, 64)
		if err != nil {
			return from, &Error{Op: "replay", Subject: c.subject(ReplaySubject), Err: ErrMalformedReply}
		}
		for line := range bytes.SplitSeq(m.Data, []byte{'\n'}) {
			if len(line) == 0 {
				continue
			}
			seq, err := events.PeekSeq(line)
			if err != nil {
				return from, &Error{Op: "replay", Subject: c.subject(ReplaySubject), Err: fmt.Errorf("%w: %w", ErrMalformedReply, err)}
			}
			if err := fn(seq, line); err != nil {
				return from, err
			}
		}
		if events.Seq(next) > from {
			from = events.Seq(next)
		}
		if m.Header.Get(HeaderEnd) == "true" {
			return from, nil
		}
	}
}

// Tail calls fn with every event f selects from seq from onwards: first the
// stored ones through replay, then live ones as they are published, with no
// gap and no duplicate, until ctx ends (an *Error wrapping ctx.Err()) or fn
// returns an error (returned as it is). The live subscription is made
// before the replay, so nothing committed meanwhile is missed; events
// already replayed are skipped by seq. If the subscription drops messages
// (a slow consumer), the hole is filled by replay.
func (c *Client) Tail(ctx context.Context, from events.Seq, f TailFilter, fn func(seq events.Seq, raw []byte) error) error {
	if err := f.validate(); err != nil {
		return &Error{Op: "tail", Err: err}
	}
	subject := c.subject(f.Subject())
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		return &Error{Op: "tail", Subject: subject, Err: err}
	}
	defer sub.Unsubscribe()
	if err := c.nc.FlushTimeout(DefaultRequestTimeout); err != nil {
		return &Error{Op: "tail", Subject: subject, Err: err}
	}
	next := max(from, 1)
	deliver := func(seq events.Seq, raw []byte) error {
		if seq < next {
			return nil // already delivered
		}
		next = seq + 1
		return fn(seq, raw)
	}
	if next, err = c.Replay(ctx, next, 0, f, deliver); err != nil {
		return err
	}
	var dropped int
	reconnects := c.nc.Stats().Reconnects
	unfiltered := f.Kind == "" && f.Activation == ""
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return &Error{Op: "tail", Subject: subject, Err: ctx.Err()}
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				continue // the hole is filled below, on the next message
			}
			return &Error{Op: "tail", Subject: subject, Err: err}
		}
		// Only the ledger can publish on event subjects, but be strict
		// anyway: a message whose header and body disagree is skipped, not
		// trusted and not fatal.
		seq64, err := strconv.ParseUint(m.Header.Get(HeaderSeq), 10, 64)
		if err != nil {
			continue
		}
		if bodySeq, err := events.PeekSeq(m.Data); err != nil || uint64(bodySeq) != seq64 {
			continue
		}
		seq := events.Seq(seq64)
		if seq < next {
			continue
		}
		// A hole: certain when unfiltered (seqs are gapless); possible when
		// filtered if messages were dropped or the connection was re-made
		// (the server drops what it could not deliver meanwhile).
		d, _ := sub.Dropped()
		rc := c.nc.Stats().Reconnects
		if seq > next && (unfiltered || d != dropped || rc != reconnects) {
			dropped, reconnects = d, rc
			if _, err := c.Replay(ctx, next, seq-1, f, deliver); err != nil {
				return err
			}
		}
		if err := deliver(seq, m.Data); err != nil {
			return err
		}
	}
}
