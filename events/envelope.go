package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Bounds on what one event may hold. They keep a single malformed or
// hostile event from costing unbounded memory anywhere downstream (ledger
// batch, NATS message, projector).
const (
	// MaxDataBytes bounds the canonical JSON of one event's payload.
	MaxDataBytes = 32 << 10
	// MaxEventBytes bounds the canonical JSON of one whole envelope; it is
	// MaxDataBytes plus generous room for the fixed envelope fields.
	MaxEventBytes = MaxDataBytes + 1024
	// MaxIDLen bounds activation, session and server identifiers.
	MaxIDLen = 128
	// Version is the envelope version written in the "v" field.
	Version = 1
)

// NoActivation is the NATS subject token used for events that carry no
// activation. It is therefore refused as an activation identifier.
const NoActivation = "_"

// Hash is a SHA-256 digest in the hash chain. Its JSON form is lowercase hex.
type Hash [sha256.Size]byte

// String returns the lowercase hex form of h.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText implements encoding.TextMarshaler (lowercase hex).
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts exactly 64
// lowercase hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	if !isHex64(string(b)) {
		return invalid("hash", "want 64 lowercase hex digits")
	}
	_, err := hex.Decode(h[:], b)
	return err
}

// Draft is an event as a producer states it: the kind (implied by the
// payload), the identities it concerns, and the payload facts. The ledger
// assigns everything else.
type Draft struct {
	Activation string
	Session    string
	Server     string
	Payload    Payload
}

// Prepared is a validated Draft with its payload already in canonical JSON.
// Preparing is the expensive, parallel half of an append; the ledger's
// committer only seals Prepared values.
type Prepared struct {
	Kind       Kind
	Activation string
	Session    string
	Server     string
	Data       []byte // canonical JSON of the payload

	middle []byte // precomputed canonical bytes from kind to prev (see appendMiddle)
}

// Envelope is one sealed ledger record.
type Envelope struct {
	Seq        Seq
	ID         ulid.ULID
	Time       time.Time
	Kind       Kind
	V          int
	Activation string
	Session    string
	Server     string
	Data       json.RawMessage // canonical JSON of the payload
	Prev       Hash
	Hash       Hash
}

// Prepare validates d and returns it with canonical payload bytes. Every
// failure wraps [ErrInvalid]. The payload must be of its kind's own type
// (the one [New] returns): a type embedding it or wrapping it is refused
// (TestPrepareRefusesOtherTypes). The payload is encoded by its generated
// appender (encode_fast.go), not by reflection; the bytes and errors are
// encoding/json's (TestPrepareFastMatchesReflect).
func Prepare(d Draft) (Prepared, error) { return prepare(d, true, MaxDataBytes) }

// payloadTypes maps each kind to the Go type of its payload (registry's
// constructors' type), the only type Prepare accepts for it. Built once,
// never written afterwards.
var payloadTypes = func() map[Kind]reflect.Type {
	m := make(map[Kind]reflect.Type, len(registry))
	for k, mk := range registry {
		m[k] = reflect.TypeOf(mk())
	}
	return m
}()

// preparedBytes is the capacity Prepare first gives the one buffer holding
// a Prepared's middle (and, inside it, its Data): room for the envelope
// fields and a typical payload; a larger one grows it.
const preparedBytes = 512

// prepare is Prepare with the payload bound as a parameter (Prepare passes
// MaxDataBytes; tests a small one to reach it); fast false encodes the
// payload with encoding/json (the reference the generated appenders are
// tested against).
func prepare(d Draft, fast bool, limit int) (Prepared, error) {
	if d.Payload == nil {
		return Prepared{}, invalid("data", "missing payload")
	}
	kind := d.Payload.Kind()
	if _, ok := registry[kind]; !ok {
		return Prepared{}, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
	}
	// Only the kind's own type: another type (one embedding it, or with
	// its own MarshalJSON) would inherit its generated appender and have
	// its extra fields or marshaler silently ignored.
	if want := payloadTypes[kind]; reflect.TypeOf(d.Payload) != want {
		return Prepared{}, fmt.Errorf("%w: %s payload has Go type %T, want %v", ErrInvalid, kind, d.Payload, want)
	}
	if err := validateIDs(d.Activation, d.Session, d.Server); err != nil {
		return Prepared{}, err
	}
	if err := d.Payload.Validate(); err != nil {
		return Prepared{}, fmt.Errorf("%s: %w", kind, err)
	}
	return encodePrepared(d, kind, fast, limit)
}

// encodePrepared is prepare after validation: it encodes d's payload of
// kind (with its generated appender, or with fast false encoding/json)
// and refuses one over limit bytes. Both ways give the same result and
// the same errors, also where the appender declines and encoding/json's
// error is taken (TestEncodePreparedLimitAndFallback).
func encodePrepared(d Draft, kind Kind, fast bool, limit int) (Prepared, error) {
	if f, ok := d.Payload.(jsonAppender); ok && fast {
		// One buffer: the middle, with Data a capped window onto it.
		b := appendMiddleHead(make([]byte, 0, preparedBytes+len(d.Activation)+len(d.Session)+len(d.Server)),
			kind, d.Activation, d.Session, d.Server)
		at := len(b)
		if b, ok = f.appendJSON(b); ok {
			end := len(b)
			if end-at > limit {
				return Prepared{}, tooLarge(kind, end-at, limit)
			}
			b = append(b, middleTail...)
			return Prepared{Kind: kind, Activation: d.Activation, Session: d.Session, Server: d.Server,
				Data: b[at:end:end], middle: b}, nil
		}
		// encoding/json refuses it too: take its error below.
	}
	data, err := json.Marshal(d.Payload)
	if err != nil {
		return Prepared{}, fmt.Errorf("%w: %s: encode payload: %v", ErrInvalid, kind, err)
	}
	if len(data) > limit {
		return Prepared{}, tooLarge(kind, len(data), limit)
	}
	return Prepared{Kind: kind, Activation: d.Activation, Session: d.Session, Server: d.Server, Data: data,
		middle: appendMiddle(make([]byte, 0, len(data)+200), kind, d.Activation, d.Session, d.Server, data)}, nil
}

// tooLarge is the error for a payload of kind that is n bytes, over limit
// (MaxDataBytes outside tests).
func tooLarge(kind Kind, n, limit int) error {
	return fmt.Errorf("%w: %s payload is %d bytes, limit MaxDataBytes=%d", ErrTooLarge, kind, n, limit)
}

// Seal turns p into the envelope at seq, chained after prev. It is what the
// ledger's committer calls, in seq order.
func Seal(p Prepared, seq Seq, id ulid.ULID, t time.Time, prev Hash) (Envelope, []byte) {
	e := Envelope{
		Seq: seq, ID: id, Time: t.UTC(), Kind: p.Kind, V: Version,
		Activation: p.Activation, Session: p.Session, Server: p.Server,
		Data: p.Data, Prev: prev,
	}
	middle := p.middle
	if middle == nil { // a Prepared built by hand, not by Prepare
		middle = appendMiddle(nil, p.Kind, p.Activation, p.Session, p.Server, p.Data)
	}
	// One allocation (TestSealAllocs): prev, then the body without the
	// hash, hashed in place as the chain rule says (ChainHash); then
	// `,"hash":"…"` is spliced over the body's final brace rather than
	// encoding everything twice, and the sealed bytes follow prev.
	buf := make([]byte, len(prev), len(prev)+maxLeadingBytes+len(middle)+sealTailBytes)
	copy(buf, prev[:])
	buf = appendLeading(buf, seq, id, e.Time)
	buf = append(buf, middle...)
	buf = hexAppend(buf, &prev)
	buf = append(buf, `"}`...)
	e.Hash = sha256.Sum256(buf)
	buf = append(buf[:len(buf)-1], `,"hash":"`...)
	buf = hexAppend(buf, &e.Hash)
	return e, append(buf, `"}`...)[len(prev):]
}

// Sizes Seal reserves around the precomputed middle: maxLeadingBytes is the
// longest `{"seq":…,"id":"…","time":"…` (a 20-digit seq), sealTailBytes
// what follows the middle: prev, `","hash":"`, the hash and `"}`.
const (
	maxLeadingBytes = len(`{"seq":`) + 20 + len(`,"id":"`) + ulid.EncodedSize + len(`","time":"`) + len(TimeLayout)
	sealTailBytes   = 2*sha256.Size + len(`","hash":"`) + 2*sha256.Size + len(`"}`)
)

// hexAppend appends the lowercase hex of h to b.
func hexAppend(b []byte, h *Hash) []byte {
	n := len(b)
	b = append(b, make([]byte, 2*len(h))...)
	hex.Encode(b[n:], h[:])
	return b
}

// ChainHash is the chain rule: SHA-256(prev ‖ canonical bytes without hash).
func ChainHash(prev Hash, canonicalWithoutHash []byte) Hash {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(canonicalWithoutHash)
	var out Hash
	h.Sum(out[:0])
	return out
}

// TimeLayout is the canonical time format: RFC 3339, UTC, always nine
// fractional digits, so that equal instants encode to equal bytes.
const TimeLayout = "2006-01-02T15:04:05.000000000Z"

// AppendCanonical appends the canonical JSON of e to b. Fields appear in a
// fixed order; empty identifiers are omitted; withHash selects whether the
// trailing "hash" field is written (it is not, when computing the hash).
func (e *Envelope) AppendCanonical(b []byte, withHash bool) []byte {
	b = appendLeading(b, e.Seq, e.ID, e.Time)
	b = appendMiddle(b, e.Kind, e.Activation, e.Session, e.Server, e.Data)
	b = hexAppend(b, &e.Prev)
	if withHash {
		b = append(b, `","hash":"`...)
		b = hexAppend(b, &e.Hash)
	}
	return append(b, `"}`...)
}

// appendLeading writes the fields the ledger assigns: seq, id and time.
func appendLeading(b []byte, seq Seq, id ulid.ULID, t time.Time) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, uint64(seq), 10)
	b = append(b, `,"id":"`...)
	var ids [ulid.EncodedSize]byte
	_ = id.MarshalTextTo(ids[:])
	b = append(b, ids[:]...)
	b = append(b, `","time":"`...)
	return appendTime(b, t)
}

// appendTime appends t in TimeLayout, as t.UTC().AppendFormat(b,
// TimeLayout) does (TestAppendTimeTwin), without parsing the layout each
// time; years outside 0…9999 take AppendFormat itself.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, TimeLayout)
	}
	hour, minute, sec := t.Clock()
	ns := t.Nanosecond()
	n := len(b)
	b = append(b, TimeLayout...)
	d := b[n:]
	put := func(at, v, width int) {
		for i := at + width - 1; i >= at; i-- {
			d[i] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, year, 4)
	put(5, int(month), 2)
	put(8, day, 2)
	put(11, hour, 2)
	put(14, minute, 2)
	put(17, sec, 2)
	put(20, ns, 9)
	return b
}

// appendMiddle writes everything from the kind up to the opening quote of
// prev. It depends only on what the producer stated, so Prepare computes it
// in the caller's goroutine and the committer only copies it.
func appendMiddle(b []byte, kind Kind, activation, session, server string, data []byte) []byte {
	b = appendMiddleHead(b, kind, activation, session, server)
	b = append(b, data...)
	return append(b, middleTail...)
}

// middleTail follows the data in the middle.
const middleTail = `,"prev":"`

// appendMiddleHead is appendMiddle up to the data.
func appendMiddleHead(b []byte, kind Kind, activation, session, server string) []byte {
	b = append(b, `","kind":"`...)
	b = append(b, kind...)
	b = append(b, `","v":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = appendID(b, "activation", activation)
	b = appendID(b, "session", session)
	b = appendID(b, "server", server)
	return append(b, `,"data":`...)
}

func appendID(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

// wireEnvelope is the decoding shape of a sealed envelope.
type wireEnvelope struct {
	Seq        *uint64         `json:"seq"`
	ID         string          `json:"id"`
	Time       string          `json:"time"`
	Kind       Kind            `json:"kind"`
	V          int             `json:"v"`
	Activation string          `json:"activation"`
	Session    string          `json:"session"`
	Server     string          `json:"server"`
	Data       json.RawMessage `json:"data"`
	Prev       string          `json:"prev"`
	Hash       string          `json:"hash"`
}

// Decode parses a sealed envelope and checks that b is exactly its
// canonical encoding, that the kind is known and the payload valid for it.
// It does not check the chain (see [Envelope.CheckHash]). Every failure
// wraps [ErrInvalid].
func Decode(b []byte) (Envelope, error) {
	if len(b) > MaxEventBytes {
		return Envelope{}, fmt.Errorf("%w: event is %d bytes, limit MaxEventBytes=%d", ErrTooLarge, len(b), MaxEventBytes)
	}
	var w wireEnvelope
	if err := strictUnmarshal(b, &w); err != nil {
		return Envelope{}, fmt.Errorf("%w: envelope: %v", ErrInvalid, err)
	}
	if w.Seq == nil || *w.Seq == 0 {
		return Envelope{}, invalid("seq", "missing or zero")
	}
	e := Envelope{Seq: Seq(*w.Seq), Kind: w.Kind, V: w.V, Activation: w.Activation, Session: w.Session, Server: w.Server}
	var err error
	if e.ID, err = ulid.ParseStrict(w.ID); err != nil {
		return Envelope{}, invalid("id", "not a ULID")
	}
	if e.Time, err = time.Parse(TimeLayout, w.Time); err != nil {
		return Envelope{}, invalid("time", "want "+TimeLayout)
	}
	if e.V != Version {
		return Envelope{}, invalid("v", "unsupported envelope version "+strconv.Itoa(e.V))
	}
	if err := e.Prev.UnmarshalText([]byte(w.Prev)); err != nil {
		return Envelope{}, invalid("prev", "want 64 lowercase hex digits")
	}
	if err := e.Hash.UnmarshalText([]byte(w.Hash)); err != nil {
		return Envelope{}, invalid("hash", "want 64 lowercase hex digits")
	}
	if err := validateIDs(e.Activation, e.Session, e.Server); err != nil {
		return Envelope{}, err
	}
	p, err := decodePayload(e.Kind, w.Data)
	if err != nil {
		return Envelope{}, err
	}
	// Re-encode the payload so that Data is canonical even if the stored
	// bytes were not; the byte comparison below then catches non-canonical
	// input anywhere in the envelope.
	if e.Data, err = json.Marshal(p); err != nil {
		return Envelope{}, fmt.Errorf("%w: %s: re-encode payload: %v", ErrInvalid, e.Kind, err)
	}
	if !bytes.Equal(e.AppendCanonical(nil, true), b) {
		return Envelope{}, fmt.Errorf("%w: envelope bytes are not canonical", ErrInvalid)
	}
	return e, nil
}

// CheckHash reports whether e.Hash is the chain hash of e after e.Prev.
func (e *Envelope) CheckHash() bool {
	return ChainHash(e.Prev, e.AppendCanonical(nil, false)) == e.Hash
}

// Payload decodes e's data into its kind's Go type.
func (e *Envelope) Payload() (Payload, error) { return DecodePayload(e.Kind, e.Data) }

// Subject is the NATS subject an envelope is published on (see [Subject]).
func (e *Envelope) Subject() string {
	a := e.Activation
	if a == "" {
		a = NoActivation
	}
	return Subject(e.Kind, a)
}

// SubjectPrefix begins every event subject.
const SubjectPrefix = "leaseledger.events."

// Wildcard matches any one subject token (NATS "*").
const Wildcard = "*"

// Subject builds the event subject
// leaseledger.events.<family>.<action>.<activation>, the one place subjects
// are spelt. An empty kind matches every kind (family and action become
// [Wildcard]); activation is used as given, so pass [Wildcard] to match any
// activation and [NoActivation] for events without one. Callers validate
// kind and activation first (both are subject tokens).
func Subject(kind Kind, activation string) string {
	b := make([]byte, 0, len(SubjectPrefix)+len(kind)+len(activation)+4)
	return string(AppendSubjectTokens(append(b, SubjectPrefix...), kind, activation))
}

// AppendSubjectTokens appends to dst what [Subject] puts after
// [SubjectPrefix] — family, action and activation, dot-separated — for a
// caller that builds subjects without allocating, under another prefix
// (a host's subject space).
func AppendSubjectTokens(dst []byte, kind Kind, activation string) []byte {
	fam, act := Wildcard, Wildcard
	if kind != "" {
		fam, act = kind.Family(), kind.Action()
	}
	dst = append(append(dst, fam...), '.')
	dst = append(append(dst, act...), '.')
	return append(dst, activation...)
}

// Input is the JSON Lines input form that `leaseledger append` reads and
// examples/events.jsonl holds: the kind, the identities and the payload.
type Input struct {
	Kind       Kind            `json:"kind"`
	Activation string          `json:"activation,omitempty"`
	Session    string          `json:"session,omitempty"`
	Server     string          `json:"server,omitempty"`
	Data       json.RawMessage `json:"data"`
}

// ParseInput decodes one input line into a Draft. Unknown fields, unknown
// kinds and invalid payloads are refused with errors wrapping [ErrInvalid].
func ParseInput(line []byte) (Draft, error) {
	if len(line) > MaxEventBytes {
		return Draft{}, fmt.Errorf("%w: input line is %d bytes, limit MaxEventBytes=%d", ErrTooLarge, len(line), MaxEventBytes)
	}
	var in Input
	if err := strictUnmarshal(line, &in); err != nil {
		return Draft{}, fmt.Errorf("%w: input: %v", ErrInvalid, err)
	}
	p, err := DecodePayload(in.Kind, in.Data)
	if err != nil {
		return Draft{}, err
	}
	d := Draft{Activation: in.Activation, Session: in.Session, Server: in.Server, Payload: p}
	if err := validateIDs(d.Activation, d.Session, d.Server); err != nil {
		return Draft{}, err
	}
	return d, nil
}

// MarshalJSON encodes the envelope canonically.
func (e Envelope) MarshalJSON() ([]byte, error) { return e.AppendCanonical(nil, true), nil }

// strictUnmarshal decodes exactly one JSON value into v, refusing unknown
// fields and trailing data. Its errors are sanitised (see jsonProblem): they
// never carry text from the input.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	// Nothing but whitespace may follow the value.
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) != 0 {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// jsonProblem turns an encoding/json error into static text plus numbers
// and our own field names. encoding/json quotes input (an unknown key, a
// string that is not a number) in its messages, and input may be
// provider-controlled, so those messages are never passed on.
func jsonProblem(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		return fe // ours (e.g. from Instant.UnmarshalJSON)
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Errorf("field %s has the wrong JSON type (want %s)", typ.Field, typ.Type)
		}
		return fmt.Errorf("wrong JSON type (want %s)", typ.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return errors.New("unknown field")
	}
	return errors.New("malformed JSON")
}
