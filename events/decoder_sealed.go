package events

import (
	"bytes"
	"crypto/sha256"
	"errors"

	"github.com/oklog/ulid/v2"
)

// ErrHashMismatch is returned by [Decoder.DecodeSealed] for envelope bytes
// whose hash is not the chain hash of their own content after their prev.
var ErrHashMismatch = errors.New("events: the hash does not recompute")

// Where the canonical layout puts what the Header lacks: the id after the
// seq, the data after the identities, and the envelope ends with
// `,"prev":"<64 hex>","hash":"<64 hex>"}`; the hash is computed over the
// bytes without `,"hash":"<64 hex>"`, closed by '}'.
const (
	idMarker     = `,"id":"`
	dataMarker   = `,"data":`
	sealedTail   = len(`,"prev":"`) + 64 + len(`","hash":"`) + 64 + len(`"}`)
	hashFieldLen = len(`,"hash":"`) + 64 + len(`"}`)
)

// DecodeSealed reads sealed canonical envelope bytes (as a ledger stores
// them, from anywhere: another ledger, the bus) into a whole Envelope and
// checks that its own hash recomputes — not that its prev is the hash of
// any event before it, which is the chain's check. It accepts and yields
// what [Decode] followed by [Envelope.CheckHash] does, faster: the header
// through d's fast path, the id, data and hashes read where the canonical
// layout puts them, and the hash recomputed over raw itself. The layout is
// this package's, so this is where it is read: a mirror ledger imports
// through it rather than re-deriving offsets. Data aliases raw.
//
// A hash that does not recompute is [ErrHashMismatch]; every other
// failure is Decode's and wraps [ErrInvalid].
func (d *Decoder) DecodeSealed(raw []byte) (Envelope, error) {
	var h Header
	if _, err := d.Decode(raw, &h); err != nil {
		return Envelope{}, err
	}
	env := Envelope{Seq: h.Seq, Time: h.Time, Kind: h.Kind, V: Version,
		Activation: h.Activation, Session: h.Session, Server: h.Server}
	n := len(raw)
	data := bytes.Index(raw, []byte(dataMarker))
	idAt := bytes.Index(raw, []byte(idMarker))
	prevAt := n - sealedTail + len(`,"prev":"`)
	if data < 0 || idAt < 0 || n < sealedTail || data+len(dataMarker) > n-sealedTail ||
		idAt+len(idMarker)+ulid.EncodedSize > n ||
		env.Prev.UnmarshalText(raw[prevAt:prevAt+64]) != nil ||
		env.Hash.UnmarshalText(raw[n-66:n-2]) != nil ||
		env.ID.UnmarshalText(raw[idAt+len(idMarker):idAt+len(idMarker)+ulid.EncodedSize]) != nil {
		return decodeSealedStrict(raw) // not where the canonical layout puts them: let Decode say why
	}
	env.Data = raw[data+len(dataMarker) : n-sealedTail]
	sum := sha256.New()
	sum.Write(env.Prev[:])
	sum.Write(raw[:n-hashFieldLen])
	sum.Write([]byte{'}'})
	var got Hash
	sum.Sum(got[:0])
	if got != env.Hash {
		return Envelope{}, ErrHashMismatch
	}
	return env, nil
}

// decodeSealedStrict is the reference of DecodeSealed: Decode, then the
// hash recomputed from the decoded envelope.
func decodeSealedStrict(raw []byte) (Envelope, error) {
	env, err := Decode(raw)
	if err != nil {
		return Envelope{}, err
	}
	if !env.CheckHash() {
		return Envelope{}, ErrHashMismatch
	}
	return env, nil
}
