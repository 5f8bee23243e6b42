package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Kind names an event kind: "<family>.<action>", both lowercase snake case.
// Family and action become the two NATS subject tokens after
// "leaseledger.events.".
type Kind string

// Family returns the part of k before the dot ("lease" for "lease.acquired").
func (k Kind) Family() string { f, _, _ := strings.Cut(string(k), "."); return f }

// Action returns the part of k after the dot ("acquired" for "lease.acquired").
func (k Kind) Action() string { _, a, _ := strings.Cut(string(k), "."); return a }

// Payload is the kind-specific data of an event. Every kind has exactly one
// Go type implementing Payload; its JSON encoding (encoding/json of the
// struct, so fields in declaration order) is the canonical payload form.
type Payload interface {
	// Kind returns the kind this payload type belongs to.
	Kind() Kind
	// Validate reports the first violated rule as an error wrapping ErrInvalid.
	Validate() error
}

// registry maps each kind to a constructor of its zero payload. It is built
// once from kindList and never written afterwards.
var registry = func() map[Kind]func() Payload {
	m := make(map[Kind]func() Payload, len(kindList))
	for _, mk := range kindList {
		k := mk().Kind()
		if _, dup := m[k]; dup {
			panic("events: duplicate kind " + string(k)) // programming error at init
		}
		m[k] = mk
	}
	return m
}()

// Kinds returns every registered kind in sorted order.
func Kinds() []Kind {
	out := make([]Kind, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Known reports whether k is a registered kind.
func Known(k Kind) bool { _, ok := registry[k]; return ok }

// SystemOnly reports whether events of kind k are written by the ledger
// itself and never taken as input: host.bound, which only ledger.BindHost
// writes. Every append entry point of the ledger refuses such a kind
// (ledger.ErrReservedKind); a mirror's Import stores it verbatim. This is
// the one list of such kinds.
func SystemOnly(k Kind) bool {
	switch k {
	case KindHostBound:
		return true
	}
	return false
}

// InputKinds returns, in sorted order, every registered kind that is not
// SystemOnly: the kinds an append may carry, each with one line in
// examples/events.jsonl.
func InputKinds() []Kind {
	return slices.DeleteFunc(Kinds(), SystemOnly)
}

// New returns a new zero payload of kind k.
func New(k Kind) (Payload, error) {
	mk, ok := registry[k]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKind, k)
	}
	return mk(), nil
}

// DecodePayload decodes data strictly into kind's payload type and
// validates it. Beyond encoding/json's rules it refuses unknown fields,
// trailing bytes, keys that match a field only case-insensitively, nulls,
// missing required fields and explicit empty values in optional fields:
// whatever it accepts means the same as its canonical re-encoding.
func DecodePayload(kind Kind, data []byte) (Payload, error) {
	p, err := decodePayload(kind, data)
	if err != nil {
		return nil, err
	}
	canonical, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: re-encode payload: %v", ErrInvalid, kind, err)
	}
	if !bytes.Equal(canonical, data) && !sameJSON(canonical, data) {
		return nil, fmt.Errorf("%w: %s data: missing required field, null, empty optional field or misspelt key", ErrInvalid, kind)
	}
	return p, nil
}

// sameJSON reports whether a and b decode to equal generic JSON values
// (field order and spacing aside).
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// decodePayload is DecodePayload without the canonical-meaning check; Decode
// uses it and then compares the whole envelope's bytes instead.
func decodePayload(kind Kind, data []byte) (Payload, error) {
	p, err := New(kind)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, invalid("data", "missing")
	}
	if len(data) > MaxDataBytes {
		return nil, tooLarge(kind, len(data), MaxDataBytes)
	}
	if err := strictUnmarshal(data, p); err != nil {
		return nil, fmt.Errorf("%w: %s data: %v", ErrInvalid, kind, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	return p, nil
}

// Instant is a point in time observed as a fact (a signal sent, a pipe
// closed). It encodes like the envelope time: RFC 3339 UTC, nine digits.
type Instant struct{ time.Time }

// At returns t as an Instant pointer, for optional fact fields.
func At(t time.Time) *Instant { return &Instant{t} }

// MarshalJSON implements json.Marshaler. It must be declared here: the
// embedded time.Time's own MarshalJSON would otherwise be promoted and
// write local offsets and variable precision. Times outside ValidTime's
// range are refused: the canonical layout could not read them back.
func (i Instant) MarshalJSON() ([]byte, error) {
	if !ValidTime(i.Time) {
		return nil, invalid("time", "outside 1970-01-01 … 9999-12-31")
	}
	b := append(make([]byte, 0, len(TimeLayout)+2), '"')
	b = i.UTC().AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler; it accepts only TimeLayout.
func (i *Instant) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return invalid("time", "want a string in "+TimeLayout)
	}
	t, err := time.Parse(TimeLayout, string(b[1:len(b)-1]))
	if err != nil {
		return invalid("time", "want "+TimeLayout)
	}
	i.Time = t
	return nil
}
