package events

import (
	"bytes"
	"errors"
	"strconv"
)

// Seq is an event's position in the ledger. The first event is 1; seqs are
// gapless. It lives here, with the format, so that code which only appends
// or reads events (the runtime, remote clients) can name a position without
// importing the storage engine.
type Seq uint64

// ErrMalformed is returned by the header peeks when the bytes do not start
// like a canonical envelope. Stored events always do; bytes from elsewhere
// must go through [Decode].
var ErrMalformed = errors.New("events: malformed canonical envelope")

// The canonical encoder writes the envelope's leading fields in a fixed
// order with no whitespace: {"seq":N,"id":"…","time":"…","kind":"…",…
// The peeks below read those fields without decoding the envelope; they
// trust the layout, not the content (a full check is [Decode]).
const (
	// MaxKindLen bounds a kind's name (family.action) as PeekKind reads it.
	MaxKindLen = 64

	seqPrefix  = `{"seq":`
	kindMarker = `","kind":"`
)

// PeekSeq reads the seq of canonical envelope bytes without decoding them.
func PeekSeq(raw []byte) (Seq, error) {
	if !bytes.HasPrefix(raw, []byte(seqPrefix)) {
		return 0, ErrMalformed
	}
	rest := raw[len(seqPrefix):]
	end := bytes.IndexByte(rest, ',')
	if end <= 0 || end > 20 {
		return 0, ErrMalformed
	}
	n, err := strconv.ParseUint(string(rest[:end]), 10, 64)
	if err != nil || n == 0 {
		return 0, ErrMalformed
	}
	return Seq(n), nil
}

// PeekKind reads the kind of canonical envelope bytes without decoding
// them. The kind follows the time, and neither the ULID nor the time can
// contain a quote, so the first `","kind":"` is the kind's.
func PeekKind(raw []byte) (Kind, error) {
	i := bytes.Index(raw, []byte(kindMarker))
	if i < 0 {
		return "", ErrMalformed
	}
	rest := raw[i+len(kindMarker):]
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || end > MaxKindLen {
		return "", ErrMalformed
	}
	return Kind(rest[:end]), nil
}

// KindIs reports whether canonical envelope bytes have the given kind,
// without allocating.
func KindIs(raw []byte, kind Kind) bool {
	i := bytes.Index(raw, []byte(kindMarker))
	if i < 0 {
		return false
	}
	rest := raw[i+len(kindMarker):]
	return len(rest) > len(kind) && string(rest[:len(kind)]) == string(kind) && rest[len(kind)] == '"'
}
