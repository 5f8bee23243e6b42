// Package keys owns the ledger's Pebble key layout: which key holds an
// event, its index entries, the head and the format version, and how the
// head is encoded. Package ledger writes these keys; verify and ledgerbench
// read or reproduce them. Nothing outside ledger/ may depend on the layout.
//
// Keyspace (one Pebble DB). Keys sort in seq order within each prefix, so a
// replay is one forward iteration:
//
//	e/<seq:8 BE>                  → canonical event bytes
//	a/<activation>/<seq:8 BE>     → empty (activation index)
//	s/<session>/<seq:8 BE>        → empty (session index)
//	k/<kind>/<seq:8 BE>           → empty (kind index)
//	m/head                        → <seq:8 BE><hash:32> of the last committed event
//	m/format                      → keyspace format version
//	p/<projection>                → snapshot (owned by the projector's user)
//
// Identifiers cannot contain '/', so "a/<activation>/" is an unambiguous
// prefix.
package keys

import (
	"encoding/binary"

	"github.com/leaseledger/leaseledger/events"
)

// Prefixes and fixed keys.
const (
	PrefixEvent      = "e/"
	PrefixActivation = "a/"
	PrefixSession    = "s/"
	PrefixKind       = "k/"
	PrefixSnapshot   = "p/"
	Head             = "m/head"
	Format           = "m/format"
	// FormatVersion is the value of m/format this build writes and reads.
	FormatVersion = "1"
)

// IndexPrefixes are the secondary index prefixes, in the order Activation,
// Session, Kind.
var IndexPrefixes = [3]string{PrefixActivation, PrefixSession, PrefixKind}

// Event is the key of the event at seq.
func Event(seq events.Seq) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, 10), PrefixEvent...), uint64(seq))
}

// IndexPrefix is the prefix of every entry of index prefix for id.
func IndexPrefix(prefix, id string) []byte {
	b := make([]byte, 0, len(prefix)+len(id)+1+8)
	b = append(b, prefix...)
	b = append(b, id...)
	return append(b, '/')
}

// Index is the index entry of prefix for id at seq.
func Index(prefix, id string, seq events.Seq) []byte {
	return binary.BigEndian.AppendUint64(IndexPrefix(prefix, id), uint64(seq))
}

// SeqOf returns the trailing 8-byte seq of an event or index key.
func SeqOf(k []byte) (events.Seq, bool) {
	if len(k) < 8 {
		return 0, false
	}
	return events.Seq(binary.BigEndian.Uint64(k[len(k)-8:])), true
}

// EncodeHead is the m/head value for the event at seq with chain hash h.
func EncodeHead(seq events.Seq, h events.Hash) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 40), uint64(seq))
	return append(b, h[:]...)
}

// DecodeHead reads an m/head value.
func DecodeHead(b []byte) (events.Seq, events.Hash, bool) {
	var h events.Hash
	if len(b) != 8+len(h) {
		return 0, h, false
	}
	copy(h[:], b[8:])
	return events.Seq(binary.BigEndian.Uint64(b[:8])), h, true
}

// UpperBound returns the smallest key greater than every key with prefix p.
func UpperBound(p []byte) []byte {
	out := append([]byte(nil), p...)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] < 0xff {
			out[i]++
			return out[:i+1]
		}
	}
	return nil
}

// For returns the keys the ledger writes for env: its e/ record key first,
// then its index entries.
func For(env *events.Envelope) [][]byte {
	seq := env.Seq
	ks := [][]byte{Event(seq)}
	if env.Activation != "" {
		ks = append(ks, Index(PrefixActivation, env.Activation, seq))
	}
	if env.Session != "" {
		ks = append(ks, Index(PrefixSession, env.Session, seq))
	}
	return append(ks, Index(PrefixKind, string(env.Kind), seq))
}
