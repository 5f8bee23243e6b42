package busclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	// Watched from before the subscription: a reconnection at any point
	// after it is caught up on.
	rw := watchReconnects(c.nc)
	defer rw.stop()
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
	var seen uint64 // reconnections caught up on
	for {
		wait := rw.waitContext(ctx)
		if g := rw.generation(); g != seen {
			// The connection was re-made (to the server it was given,
			// ConnectOptions): what was published while it was down did
			// not reach the subscription. Catch up by replay now rather
			// than at the next live event, which may never come.
			seen = g
			if err := c.catchUp(ctx, next, f, deliver); err != nil {
				return err
			}
			continue
		}
		m, err := sub.NextMsgWithContext(wait)
		if err != nil {
			if ctx.Err() != nil {
				return &Error{Op: "tail", Subject: subject, Err: ctx.Err()}
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				continue // the hole is filled below, on the next message
			}
			if wait.Err() != nil {
				continue // reconnected: caught up above
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

// Bounds of Tail's catch-up after a reconnection.
const (
	// TailCatchUpAttempts bounds the replay requests of one catch-up
	// after a reconnection while the server does not answer them (its
	// API may not be up yet when its client port already is); then Tail
	// fails with the last error.
	TailCatchUpAttempts = 20
	// tailCatchUpPause is the pause between two of them.
	tailCatchUpPause = 250 * time.Millisecond
)

// catchUp replays [from, head] into deliver after a reconnection. A
// request nobody answered (no responders, a timeout, the connection
// dropped again) is asked again after tailCatchUpPause, at most
// TailCatchUpAttempts times; deliver skips what it already delivered, so
// each attempt starts where delivery stands.
func (c *Client) catchUp(ctx context.Context, from events.Seq, f TailFilter, deliver func(events.Seq, []byte) error) error {
	var last error
	for range TailCatchUpAttempts {
		// deliver advances from itself: a failed attempt's delivered
		// events are skipped by the next one.
		_, err := c.Replay(ctx, from, 0, f, deliver)
		if err == nil {
			return nil
		}
		if !unanswered(err) || ctx.Err() != nil {
			return err
		}
		last = err
		if !sleep(ctx, tailCatchUpPause) {
			return &Error{Op: "tail", Subject: c.subject(ReplaySubject), Err: ctx.Err()}
		}
	}
	return &Error{Op: "tail", Subject: c.subject(ReplaySubject), Err: fmt.Errorf("catch-up after a reconnection: %d replay requests unanswered: %w", TailCatchUpAttempts, last)}
}

// unanswered reports whether a request got no answer at all (rather than
// a refusal or a malformed one): no responders, a timeout, or the
// connection dropping meanwhile.
func unanswered(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// reconnectWatch counts the reconnections of a connection and ends the
// current wait context (waitContext) at each, so a blocked read wakes up
// to catch up.
type reconnectWatch struct {
	mu     sync.Mutex
	gen    uint64             // reconnections so far
	wait   context.Context    // the current wait context
	cancel context.CancelFunc // ends wait
	done   chan struct{}
	ended  chan struct{}
}

func watchReconnects(nc *nats.Conn) *reconnectWatch {
	w := &reconnectWatch{done: make(chan struct{}), ended: make(chan struct{})}
	back := nc.StatusChanged(nats.CONNECTED)
	go func() {
		defer close(w.ended)
		defer nc.RemoveStatusListener(back)
		for {
			select {
			case _, ok := <-back:
				if !ok {
					return
				}
				w.mu.Lock()
				w.gen++
				if w.cancel != nil {
					w.cancel()
				}
				w.mu.Unlock()
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// waitContext returns a context that ends with ctx or at the next
// reconnection (a new one once the last has ended).
func (w *reconnectWatch) waitContext(ctx context.Context) context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wait == nil || w.wait.Err() != nil {
		if w.cancel != nil {
			w.cancel()
		}
		w.wait, w.cancel = context.WithCancel(ctx)
	}
	return w.wait
}

// generation is the number of reconnections so far.
func (w *reconnectWatch) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// stop ends the watch, its goroutine and its wait context.
func (w *reconnectWatch) stop() {
	close(w.done)
	<-w.ended
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
}
