package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// The request/reply API, whose subjects, headers and bodies package
// bus/busclient defines. Each handler answers only inbox reply subjects
// (the API's connection may publish nowhere else), bounds its own work and
// reports failures in busclient.HeaderError with static text that never
// echoes the request.

// MaxReplayScan bounds the events one replay request may examine: a chunk
// ends there even if it holds fewer than the chunk bounds (the client asks
// again from busclient.HeaderNext), so no request can keep the responder
// busy for long.
const MaxReplayScan = 64 << 10

// errChunkFull stops a chunk's scan.
var errChunkFull = errors.New("chunk full")

func (b *Bus) serveReplay(m *nats.Msg, r route, sp *space) {
	if !b.checkReply(m, r) {
		return
	}
	reply := nats.NewMsg(m.Reply)
	class := r.class
	if !b.admit(m, class) {
		return
	}
	var req busclient.ReplayRequest
	if err := parseReplay(m.Data, &req); err != nil {
		refuse(m, busclient.CodeBadRequest, "malformed replay request: "+err.Error())
		return
	}
	q := ledger.Query{From: req.From, To: req.To, Kind: req.Kind, Activation: req.Activation}
	if err := q.Validate(); err != nil {
		reply.Header.Set(busclient.HeaderError, "invalid replay request: "+err.Error())
		_ = m.RespondMsg(reply)
		return
	}
	head := sp.l.Head().Seq
	if q.To == 0 || q.To > head {
		q.To = head
	}
	maxEvents, maxBytes := b.replayChunk(class)
	if req.MaxEvents > 0 && req.MaxEvents < maxEvents {
		maxEvents = req.MaxEvents
	}
	// With both filters, the activation index is walked and the kind is
	// checked here, so that the work of one request is bounded by
	// MaxReplayScan events even when few of them match.
	kind := q.Kind
	if q.Activation != "" {
		q.Kind = ""
	}
	var body bytes.Buffer
	count, scanned := 0, 0
	next := max(q.From, 1)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	err := sp.l.Scan(ctx, q, func(seq ledger.Seq, raw []byte) error {
		if count == maxEvents || body.Len()+len(raw)+1 > maxBytes || scanned == MaxReplayScan {
			return errChunkFull
		}
		scanned++
		next = seq + 1
		if kind != "" && q.Kind == "" && !events.KindIs(raw, kind) {
			return nil
		}
		body.Write(raw)
		body.WriteByte('\n')
		count++
		return nil
	})
	end := err == nil
	if err != nil && !errors.Is(err, errChunkFull) {
		reply.Header.Set(busclient.HeaderError, replayFailure(err))
		b.opts.Logger.Error("bus: replay", sp.logAttrs("err", err)...)
		_ = m.RespondMsg(reply)
		return
	}
	if end {
		next = q.To + 1
	}
	reply.Data = body.Bytes()
	reply.Header.Set(busclient.HeaderNext, strconv.FormatUint(uint64(max(next, 1)), 10))
	reply.Header.Set(busclient.HeaderEnd, strconv.FormatBool(end))
	reply.Header.Set(busclient.HeaderHead, strconv.FormatUint(uint64(head), 10))
	_ = m.RespondMsg(reply)
}

// replayFailure is the error header of a replay the ledger could not
// serve. Damaged storage (ledger.ErrCorrupt) names the seqs that cannot be
// read: the request fails, the bus stays up, other ranges are still served
// and appends are still acknowledged while the write path works (the
// ledger counts such reads in Stats.CorruptReads and logs them).
func replayFailure(err error) string {
	var le *ledger.Error
	if !errors.Is(err, ledger.ErrCorrupt) || !errors.As(err, &le) || le.Seq == 0 {
		return "replay failed"
	}
	if le.Last > le.Seq {
		return fmt.Sprintf("replay failed: storage damaged, seqs %d-%d cannot be read", le.Seq, le.Last)
	}
	return fmt.Sprintf("replay failed: storage damaged, seq %d cannot be read", le.Seq)
}

func (b *Bus) serveHead(m *nats.Msg, r route, sp *space) {
	if !b.checkReply(m, r) || !b.admit(m, r.class) {
		return
	}
	if len(m.Data) != 0 {
		refuse(m, busclient.CodeBadRequest, "malformed head request: the body must be empty")
		return
	}
	h := sp.l.Head()
	data, _ := json.Marshal(busclient.HeadReply{Seq: h.Seq, Hash: h.Hash.String()})
	_ = m.Respond(data)
}

// admit takes a token of the request's rate limit; over the limit, it
// answers with busclient.CodeRateLimited and returns false.
func (b *Bus) admit(m *nats.Msg, c class) bool {
	if b.limiter.allow(m.Reply, c, time.Now()) {
		return true
	}
	refuse(m, busclient.CodeRateLimited, "rate limit exceeded: slow down and retry")
	return false
}

// refuse answers m with an error of the given code (static text).
func refuse(m *nats.Msg, code, text string) {
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set(busclient.HeaderError, text)
	reply.Header.Set(busclient.HeaderErrorCode, code)
	_ = m.RespondMsg(reply)
}

// parseReplay reads a replay request strictly: exactly one JSON object
// (not null, not an array), no unknown field, nothing after it, from not
// after to (unless to is 0: the head), max_events not negative. The error
// names the problem, never the request's bytes.
func parseReplay(data []byte, req *busclient.ReplayRequest) error {
	if err := strictJSON(data, req); err != nil {
		return err
	}
	switch {
	case req.To != 0 && req.From > req.To:
		return errors.New("from is after to")
	case req.MaxEvents < 0:
		return errors.New("max_events is negative")
	}
	return nil
}

// strictJSON decodes exactly one JSON object into v (a pointer to a
// struct): its keys must be v's JSON field names exactly (encoding/json
// alone would match them case-insensitively) and no value may be null
// (which encoding/json would skip), so that what it accepts is what a
// JSON Schema of v with "additionalProperties": false accepts.
func strictJSON(data []byte, v any) error {
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return errors.New("empty body, want a JSON object")
	}
	if t[0] != '{' {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return errors.New("field " + te.Field + " has the wrong type")
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return errors.New("unknown field")
		}
		return errors.New("not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing bytes after the JSON object")
	}
	return exactKeys(t, fieldNames(v))
}

// fieldNames returns the JSON names of the fields of the struct v points
// to (nil when it is no struct: keys are then not checked).
func fieldNames(v any) map[string]bool {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	t = t.Elem()
	names := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// exactKeys walks the valid JSON object t: its top-level keys must be in
// names (when names is not nil), and no value, at any depth, is null.
func exactKeys(t []byte, names map[string]bool) error {
	type frame struct{ object, key bool } // key: an object's next token is a key
	var stack []frame
	done := func() { // a value ended: its object expects a key next
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].key = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errors.New("not valid JSON")
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].key {
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				done()
				continue
			}
			if key, _ := tok.(string); n == 1 && names != nil && !names[key] {
				return errors.New("unknown field")
			}
			stack[n-1].key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, key: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			done()
		case nil:
			return errors.New("null value")
		default:
			done()
		}
	}
}

func (b *Bus) serveAppend(m *nats.Msg, r route) {
	if !b.checkReply(m, r) || r.class != classWriter {
		return
	}
	if !b.admit(m, r.class) {
		return
	}
	b.appendsMu.Lock()
	if b.closing {
		b.appendsMu.Unlock()
		return
	}
	b.appends.Add(1)
	b.appendsMu.Unlock()
	select {
	case b.appendSlots <- struct{}{}:
	case <-b.ctx.Done():
		b.appends.Done()
		return
	}
	go func() {
		defer b.appends.Done()
		defer func() { <-b.appendSlots }()
		reply := nats.NewMsg(m.Reply)
		acks, replayed, err := b.appendLines(m.Header, m.Data)
		if err != nil {
			reply.Header.Set(busclient.HeaderError, err.Error())
			switch {
			case inDoubt(err):
				reply.Header.Set(busclient.HeaderInDoubt, "true")
			case errors.Is(err, ledger.ErrIdempotencyConflict):
				reply.Header.Set(busclient.HeaderErrorCode, busclient.CodeIdempotencyConflict)
			case errors.Is(err, ledger.ErrIdempotencyExpired):
				reply.Header.Set(busclient.HeaderErrorCode, busclient.CodeIdempotencyExpired)
			case errors.Is(err, errBadRequest), errors.Is(err, ledger.ErrReservedKind): // only ledger.BindHost writes host.bound
				reply.Header.Set(busclient.HeaderErrorCode, busclient.CodeBadRequest)
			}
		}
		if replayed {
			reply.Header.Set(busclient.HeaderReplayed, "true")
		}
		var body bytes.Buffer
		for _, a := range acks {
			body.WriteString(busclient.Ack{Seq: a.Seq, ID: a.ID}.String())
			body.WriteByte('\n')
		}
		reply.Data = body.Bytes()
		_ = m.RespondMsg(reply)
	}()
}

// errBadRequest marks a request whose headers are malformed.
var errBadRequest = errors.New("bad request")

// appendLines parses JSON Lines of input-form events and appends them in one
// call: all or nothing; under the request's idempotency key when it has one
// (replayed: the key was remembered and nothing was written). Error texts
// name the line and the field, never the offending value.
func (b *Bus) appendLines(h nats.Header, data []byte) (acks []ledger.Ack, replayed bool, err error) {
	var id ledger.Idempotency
	if keys := h.Values(busclient.HeaderIdempotencyKey); len(keys) > 0 {
		if len(keys) > 1 || !ledger.ValidIdempotencyKey(keys[0]) {
			return nil, false, fmt.Errorf("%w: %s must be one key of 1 to %d bytes of [A-Za-z0-9._:-]", errBadRequest, busclient.HeaderIdempotencyKey, busclient.MaxIdempotencyKeyLen)
		}
		id.Key = keys[0]
		if v := h.Get(busclient.HeaderFirstSent); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms <= 0 {
				return nil, false, fmt.Errorf("%w: %s must be Unix milliseconds", errBadRequest, busclient.HeaderFirstSent)
			}
			// Compared in milliseconds: a far-future value must not
			// overflow the ledger's nanoseconds.
			if ms > time.Now().Add(ledger.IdempotencyClockSlack).UnixMilli() {
				return nil, false, fmt.Errorf("%w: %s is in the future (more than %v ahead of the server's clock)", errBadRequest, busclient.HeaderFirstSent, ledger.IdempotencyClockSlack)
			}
			id.FirstSent = time.UnixMilli(ms)
		}
	}
	drafts, err := parseLines(data)
	if err != nil {
		return nil, false, err
	}
	// Not b.ctx: an append taken in is finished and answered even while the
	// bus closes (Close waits for it), so an error means "not written"
	// unless inDoubt says otherwise.
	if id.Key != "" {
		return b.l.AppendIdempotent(context.Background(), id, drafts...)
	}
	acks, err = b.l.AppendAcks(context.Background(), drafts...)
	return acks, false, err
}

func parseLines(data []byte) ([]events.Draft, error) {
	var drafts []events.Draft
	n := 0
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		n++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(drafts) == busclient.MaxAppendEvents {
			return nil, fmt.Errorf("%w: limit MaxAppendEvents=%d", ledger.ErrTooManyEvents, busclient.MaxAppendEvents)
		}
		d, err := events.ParseInput(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		drafts = append(drafts, d)
	}
	return drafts, nil
}

// inDoubt reports whether an append error leaves it unknown whether the
// events were written: the ledger's storage failed (ErrFailed: a commit or
// sync of this batch, or of an earlier one — the client cannot tell which)
// or the append was not acknowledged (ErrUnacknowledged). Such replies
// carry busclient.HeaderInDoubt, and clients report them as
// busclient.ErrInDoubt, never as a refusal.
func inDoubt(err error) bool {
	return errors.Is(err, ledger.ErrFailed) || errors.Is(err, ledger.ErrUnacknowledged)
}

// The append limit is the client's and the ledger's: one request is one
// Append call. (Compiles only while they are equal.)
const _ = uint(busclient.MaxAppendEvents-ledger.MaxAppendEvents) + uint(ledger.MaxAppendEvents-busclient.MaxAppendEvents)

// So is the idempotency key's length bound.
const _ = uint(busclient.MaxIdempotencyKeyLen-ledger.MaxIdempotencyKeyLen) + uint(ledger.MaxIdempotencyKeyLen-busclient.MaxIdempotencyKeyLen)
