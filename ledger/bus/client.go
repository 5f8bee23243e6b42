package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// Client reads a ledger over its NATS bus: replay, head, and tail (catch up
// by replay, then go live, without gap or duplicate). It needs only the
// read-only permissions.
type Client struct {
	nc *nats.Conn
}

// DefaultRequestTimeout bounds one bus request when the caller's context
// has no earlier deadline, so a vanished responder cannot hang a client.
const DefaultRequestTimeout = 10 * time.Second

func (c *Client) request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	return c.nc.RequestWithContext(ctx, subject, data)
}

// UserOptions returns the NATS options a named bus user connects with: its
// credentials and its own reply-inbox prefix (the bus lets each named user
// subscribe only to InboxPrefix(user)). An empty user means anonymous.
func UserOptions(user, password string) []nats.Option {
	if user == "" {
		return nil
	}
	return []nats.Option{nats.UserInfo(user, password), nats.CustomInboxPrefix(InboxPrefix(user))}
}

// NewClient wraps a NATS connection to a ledger bus.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

// Head asks the bus for the durable head.
func (c *Client) Head(ctx context.Context) (HeadReply, error) {
	m, err := c.request(ctx, HeadSubject, nil)
	if err != nil {
		return HeadReply{}, &Error{Op: "head", Subject: HeadSubject, Err: err}
	}
	var h HeadReply
	if err := json.Unmarshal(m.Data, &h); err != nil {
		return HeadReply{}, &Error{Op: "head", Subject: HeadSubject, Err: ErrMalformedReply}
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

func (f TailFilter) validate() error {
	return ledger.Query{Kind: f.Kind, Activation: f.Activation}.Validate()
}

// Replay calls fn with every stored event in [from, to] (to 0: the head at
// the time of each request) that f selects, chunk by chunk, and returns the
// next seq to ask for: one past the range it covered.
func (c *Client) Replay(ctx context.Context, from, to ledger.Seq, f TailFilter, fn func(seq ledger.Seq, raw []byte) error) (ledger.Seq, error) {
	if err := f.validate(); err != nil {
		return from, err
	}
	from = max(from, 1)
	for {
		req, _ := json.Marshal(ReplayRequest{From: uint64(from), To: uint64(to), Kind: f.Kind, Activation: f.Activation})
		m, err := c.request(ctx, ReplaySubject, req)
		if err != nil {
			return from, &Error{Op: "replay", Subject: ReplaySubject, Err: err}
		}
		if e := m.Header.Get(HeaderError); e != "" {
			return from, &Error{Op: "replay", Subject: ReplaySubject, Reply: e, Err: ErrRemote}
		}
		next, err := strconv.ParseUint(m.Header.Get(HeaderNext), 10, 64)
		if err != nil {
			return from, &Error{Op: "replay", Subject: ReplaySubject, Err: ErrMalformedReply}
		}
		for line := range bytes.SplitSeq(m.Data, []byte{'\n'}) {
			if len(line) == 0 {
				continue
			}
			seq, err := events.PeekSeq(line)
			if err != nil {
				return from, &Error{Op: "replay", Subject: ReplaySubject, Err: fmt.Errorf("%w: %w", ErrMalformedReply, err)}
			}
			if err := fn(seq, line); err != nil {
				return from, err
			}
		}
		if ledger.Seq(next) > from {
			from = ledger.Seq(next)
		}
		if m.Header.Get(HeaderEnd) == "true" {
			return from, nil
		}
	}
}

// Tail calls fn with every event f selects from seq from onwards: first the
// stored ones through replay, then live ones as they are published, with no
// gap and no duplicate, until ctx ends or fn returns an error. The live
// subscription is made before the replay, so nothing committed meanwhile is
// missed; events already replayed are skipped by seq. If the subscription
// drops messages (a slow consumer), the hole is filled by replay.
func (c *Client) Tail(ctx context.Context, from ledger.Seq, f TailFilter, fn func(seq ledger.Seq, raw []byte) error) error {
	if err := f.validate(); err != nil {
		return err
	}
	sub, err := c.nc.SubscribeSync(f.Subject())
	if err != nil {
		return &Error{Op: "tail", Subject: f.Subject(), Err: err}
	}
	defer sub.Unsubscribe()
	if err := c.nc.FlushTimeout(DefaultRequestTimeout); err != nil {
		return &Error{Op: "tail", Subject: f.Subject(), Err: err}
	}
	next := max(from, 1)
	deliver := func(seq ledger.Seq, raw []byte) error {
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
				return ctx.Err()
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				continue // the hole is filled below, on the next message
			}
			return &Error{Op: "tail", Subject: f.Subject(), Err: err}
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
		seq := ledger.Seq(seq64)
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

// Append sends JSON Lines of input-form events to the bus's append API and
// returns their acknowledgements (seq and ULID; Hash is left zero). The
// connection's user must be the bus's writer. The server appends the lines
// in one call, all or nothing, and names the first bad line in its error
// (an *Error wrapping ErrRemote, the text in Reply). An error after the
// request was sent (a timeout, a lost connection) does not say whether the
// events were written; Appender.Append reports that case as ErrInDoubt.
func (c *Client) Append(ctx context.Context, lines []byte) ([]ledger.Ack, error) {
	m, err := c.request(ctx, AppendSubject, lines)
	if err != nil {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: err}
	}
	if e := m.Header.Get(HeaderError); e != "" {
		return nil, &Error{Op: "append", Subject: AppendSubject, Reply: e, Err: ErrRemote}
	}
	acks, err := parseAcks(m.Data)
	if err != nil {
		return nil, &Error{Op: "append", Subject: AppendSubject, Err: err}
	}
	return acks, nil
}

// parseAcks reads the append API's reply: "<seq> <ulid>" per event.
func parseAcks(data []byte) ([]ledger.Ack, error) {
	var acks []ledger.Ack
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
		acks = append(acks, ledger.Ack{Seq: ledger.Seq(seq), ID: id})
	}
	return acks, nil
}
