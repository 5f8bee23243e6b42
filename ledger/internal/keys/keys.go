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
//	p/<projection>/<part>         → a part stored beside it in the same batch (a retired activation)
//	i/<idempotency key>           → IdemRecord of the keyed append (see EncodeIdem)
//	t/<level:1><index:8 BE>       → 32-byte RFC 6962 hash of Merkle node (level, index), level ≥ TreeStoredLevel
//	m/tree                        → <size:8 BE>: how many leaves the stored t/ nodes cover
//
// The Merkle tree is RFC 6962's over the events' canonical bytes: leaf i
// (0-based) is event seq i+1, node (level, index) covers leaves
// index·2^level … (index+1)·2^level − 1. Only perfect subtrees of at least
// 2^TreeStoredLevel leaves are stored (written in the batch of the event that
// completes them, with m/tree); smaller ones are recomputed from the events.
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
	// PrefixIdem holds the idempotency records of keyed appends, written in
	// the batch of the events they acknowledge. They are not events: no
	// index, no chain, and FormatVersion is unchanged (a build that does not
	// know them ignores them).
	PrefixIdem = "i/"
	Head       = "m/head"
	Format     = "m/format"
	// IdemEvicted holds the sealing time (Unix nanoseconds, 8 bytes BE) of
	// the newest idempotency record evicted so far.
	IdemEvicted = "m/idem-evicted"
	// PrefixTree holds the stored Merkle nodes (see TreeNode). Like i/, they
	// are derived data: FormatVersion is unchanged, and a ledger without
	// them gets them built on its next writable Open.
	PrefixTree = "t/"
	// TreeSize holds how many leaves (events 1..size) the stored t/ nodes
	// cover (EncodeTreeSize).
	TreeSize = "m/tree"
	// Mirror marks a mirror ledger (ledger.Options.Mirror), written once
	// when the mirror is created: its events are imported verbatim from
	// another ledger and never appended. Like m/tree it changes no event
	// key, so FormatVersion is unchanged.
	Mirror = "m/mirror"
	// FormatVersion is the value of m/format this build writes and reads.
	FormatVersion = "1"
)

// TreeStoredLevel is the lowest level of the Merkle nodes stored under t/:
// nodes covering 16 leaves and more. It bounds the index to about 1/8 of a
// hash per event while any lower node is recomputed from at most 8 events.
const TreeStoredLevel = 4

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

// Idem is the idempotency record key of an append keyed k.
func Idem(k string) []byte { return append([]byte(PrefixIdem), k...) }

// IdemRecord is what the ledger remembers of a keyed append: its place in
// the remembered window (Order, increasing), the seqs it was assigned
// (First..First+Count-1, consecutive: one append is one batch), the digest
// of its content and when it was sealed (Unix nanoseconds).
type IdemRecord struct {
	Order  uint64
	First  events.Seq
	Count  uint32
	Digest [32]byte
	At     int64
}

// idemLen is the encoded size of an IdemRecord.
const idemLen = 8 + 8 + 4 + 32 + 8

// EncodeIdem is the value of an idempotency record.
func EncodeIdem(r IdemRecord) []byte {
	b := make([]byte, 0, idemLen)
	b = binary.BigEndian.AppendUint64(b, r.Order)
	b = binary.BigEndian.AppendUint64(b, uint64(r.First))
	b = binary.BigEndian.AppendUint32(b, r.Count)
	b = append(b, r.Digest[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(r.At))
}

// DecodeIdem reads an idempotency record's value.
func DecodeIdem(b []byte) (IdemRecord, bool) {
	if len(b) != idemLen {
		return IdemRecord{}, false
	}
	r := IdemRecord{Order: binary.BigEndian.Uint64(b), First: events.Seq(binary.BigEndian.Uint64(b[8:])), Count: binary.BigEndian.Uint32(b[16:])}
	copy(r.Digest[:], b[20:52])
	r.At = int64(binary.BigEndian.Uint64(b[52:]))
	return r, true
}

// treeNodeLen is the length of a t/ key.
const treeNodeLen = len(PrefixTree) + 1 + 8

// TreeNode is the key of the stored Merkle node (level, index).
func TreeNode(level uint, index uint64) []byte {
	b := append(make([]byte, 0, treeNodeLen), PrefixTree...)
	b = append(b, byte(level))
	return binary.BigEndian.AppendUint64(b, index)
}

// DecodeTreeNode reads a t/ key.
func DecodeTreeNode(k []byte) (level uint, index uint64, ok bool) {
	if len(k) != treeNodeLen || string(k[:len(PrefixTree)]) != PrefixTree {
		return 0, 0, false
	}
	return uint(k[len(PrefixTree)]), binary.BigEndian.Uint64(k[len(PrefixTree)+1:]), true
}

// EncodeTreeSize is the m/tree value for a tree of size leaves.
func EncodeTreeSize(size events.Seq) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(size))
}

// DecodeTreeSize reads an m/tree value.
func DecodeTreeSize(b []byte) (events.Seq, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return events.Seq(binary.BigEndian.Uint64(b)), true
}
