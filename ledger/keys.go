package ledger

import (
	"encoding/binary"

	"github.com/leaseledger/leaseledger/events"
)

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
const (
	prefixEvent      = "e/"
	prefixActivation = "a/"
	prefixSession    = "s/"
	prefixKind       = "k/"
	prefixSnapshot   = "p/"
	keyHead          = "m/head"
	keyFormat        = "m/format"
	keyspaceFormat   = "1"
)

func eventKey(seq Seq) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, 10), prefixEvent...), uint64(seq))
}

func indexPrefix(prefix, id string) []byte {
	b := make([]byte, 0, len(prefix)+len(id)+1+8)
	b = append(b, prefix...)
	b = append(b, id...)
	return append(b, '/')
}

func indexKey(prefix, id string, seq Seq) []byte {
	return binary.BigEndian.AppendUint64(indexPrefix(prefix, id), uint64(seq))
}

// seqFromKey returns the trailing 8-byte seq of an e/ or index key.
func seqFromKey(k []byte) (Seq, bool) {
	if len(k) < 8 {
		return 0, false
	}
	return Seq(binary.BigEndian.Uint64(k[len(k)-8:])), true
}

func encodeHead(h Head) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 40), uint64(h.Seq))
	return append(b, h.Hash[:]...)
}

func decodeHead(b []byte) (Head, bool) {
	if len(b) != 8+len(events.Hash{}) {
		return Head{}, false
	}
	var h Head
	h.Seq = Seq(binary.BigEndian.Uint64(b[:8]))
	copy(h.Hash[:], b[8:])
	return h, true
}

// upperBound returns the smallest key greater than every key with prefix p.
func upperBound(p []byte) []byte {
	out := append([]byte(nil), p...)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] < 0xff {
			out[i]++
			return out[:i+1]
		}
	}
	return nil
}

// KeysFor returns the keys the ledger writes for env: its e/ record key
// first, then its index entries. Tools that must reproduce the ledger's
// writes exactly (the append benchmark's raw baseline) use it.
func KeysFor(env *events.Envelope) [][]byte {
	seq := Seq(env.Seq)
	keys := [][]byte{eventKey(seq)}
	if env.Activation != "" {
		keys = append(keys, indexKey(prefixActivation, env.Activation, seq))
	}
	if env.Session != "" {
		keys = append(keys, indexKey(prefixSession, env.Session, seq))
	}
	return append(keys, indexKey(prefixKind, string(env.Kind), seq))
}
