package ledger

// Idempotent appends. A client that cannot tell whether its append was
// written (no answer in time, a lost connection) sends it again under the
// same key; the ledger answers the retry with the seqs of the first one
// instead of writing the events twice.
//
// The record: i/<key> → (order, first seq, count, content digest, time)
// (keys.IdemRecord), set in the very Pebble batch that holds the events, so
// it is durable exactly when they are: after a crash either both are there
// or neither is. Events, their bytes and the hash chain know nothing of
// keys.
//
// The window: the ledger remembers the last Options.IdempotencyWindow keys
// (DefaultIdempotencyWindow). The committer keeps them in memory, loaded at
// Open, in the order they were sealed; sealing a new key beyond the window
// deletes the oldest key's record in the same batch. A retry whose key has
// left the window cannot be matched any more. If the request says when its
// first attempt was sent (Idempotency.FirstSent) and that is not later
// than IdempotencyClockSlack after the sealing time of the newest evicted
// record (m/idem-evicted), the original may have been evicted: it is
// refused with ErrIdempotencyExpired and nothing is written (the caller
// stays in doubt). Otherwise — a later first attempt, or no FirstSent — an
// unknown key is a new append.
//
// The committer alone reads and writes the window, so a retry that arrives
// while the first request is still queued, being sealed or awaiting its
// fsync is matched too: it is acknowledged with the batch after the one
// holding the original (or at once when that is already acknowledged:
// durable and seen by Options.BeforeAck, so that a caller that retries and
// then reads a projection fed by BeforeAck finds its events there). A batch
// of such retries only writes nothing to Pebble.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

const (
	// DefaultIdempotencyWindow is how many idempotency keys the ledger
	// remembers (the most recently sealed ones) when
	// Options.IdempotencyWindow is zero. Each costs about 150 bytes of
	// memory and 60 bytes plus the key on disk.
	DefaultIdempotencyWindow = 1 << 16
	// MaxIdempotencyKeyLen bounds an idempotency key's length in bytes.
	MaxIdempotencyKeyLen = 128
	// IdempotencyClockSlack is the clock difference between a client and
	// the ledger that the expiry check (ErrIdempotencyExpired) tolerates.
	IdempotencyClockSlack = time.Minute
)

// Idempotency keys an append (see AppendIdempotent).
type Idempotency struct {
	// Key names the request: the same for every attempt of one request,
	// different for every request (see ValidIdempotencyKey).
	Key string
	// FirstSent is when the first attempt was sent, set on retries (zero
	// on a first attempt): a retry whose key may have left the window is
	// refused with ErrIdempotencyExpired instead of being written again.
	FirstSent time.Time
}

var (
	// ErrIdempotencyConflict is returned by AppendIdempotent when the key
	// is remembered for an append of different events: nothing is written.
	ErrIdempotencyConflict = errors.New("ledger: idempotency key already used for different events")
	// ErrIdempotencyKey is returned by AppendIdempotent for a key that is
	// empty, longer than MaxIdempotencyKeyLen or holds a byte outside
	// [A-Za-z0-9._:-]: nothing is written.
	ErrIdempotencyKey = errors.New("ledger: invalid idempotency key")
	// ErrIdempotencyExpired is returned by AppendIdempotent for a retry
	// (Idempotency.FirstSent set) whose key is not remembered although it
	// may have been: the window has evicted keys sealed after its first
	// attempt was sent. Nothing is written; whether the first attempt was
	// is unknown.
	ErrIdempotencyExpired = errors.New("ledger: idempotency key may have left the remembered window")
)

// ValidIdempotencyKey reports whether k may key an append: 1 to
// MaxIdempotencyKeyLen bytes of [A-Za-z0-9._:-].
func ValidIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// AppendIdempotent is AppendAcks under an idempotency key. The first call
// with a key appends and records the key with its acknowledgements in the
// same batch. A later call with the same key and the same drafts (compared
// by a SHA-256 digest of their kinds, identifiers and canonical payloads)
// writes nothing and returns the original acknowledgements with replayed
// true, once they are durable and Options.BeforeAck has seen them — even if
// the original call has not returned yet. The same key with different drafts fails with
// ErrIdempotencyConflict. Keys are remembered within the window described
// at the top of this file; errors mean what they mean for Append.
func (l *Ledger) AppendIdempotent(ctx context.Context, id Idempotency, drafts ...events.Draft) (acks []Ack, replayed bool, err error) {
	key := id.Key
	if !ValidIdempotencyKey(key) {
		return nil, false, &Error{Op: "append", Err: ErrIdempotencyKey}
	}
	if len(drafts) == 0 {
		return nil, false, nil
	}
	if len(drafts) > MaxAppendEvents {
		return nil, false, &Error{Op: "append", Err: fmt.Errorf("%w: %d, limit MaxAppendEvents=%d", ErrTooManyEvents, len(drafts), MaxAppendEvents)}
	}
	prepared := make([]events.Prepared, len(drafts))
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, false, &Error{Op: "append", Err: fmt.Errorf("event %d of %d: %w", i, len(drafts), err)}
		}
		prepared[i] = p
	}
	req := &appendReq{prepared: prepared, key: key, digest: contentDigest(prepared), done: make(chan struct{})}
	if !id.FirstSent.IsZero() {
		// A first attempt cannot have been sent later than now (give or
		// take the clocks' difference); beyond that the value is refused,
		// which also keeps UnixNano from overflowing.
		if id.FirstSent.After(time.Now().Add(IdempotencyClockSlack)) {
			return nil, false, &Error{Op: "append", Err: fmt.Errorf("%w: its first-sent time is more than %v in the future", ErrIdempotencyKey, IdempotencyClockSlack)}
		}
		req.firstSent = id.FirstSent.UnixNano()
	}
	acks, err = l.await(ctx, req)
	if err != nil || req.dupCount == 0 {
		return acks, false, err
	}
	acks, err = l.readAcks(req.dupFirst, req.dupCount)
	if err != nil {
		// The events are durable (the key matched a sealed record), but
		// their acknowledgements cannot be read: the caller cannot be told
		// they were written, and must not be told they were not.
		return nil, true, &Error{Op: "append", Err: fmt.Errorf("%w: the key's events are durable but their acknowledgements cannot be read: %w", ErrUnacknowledged, err)}
	}
	return acks, true, nil
}

// readAcks rebuilds the acknowledgements of the durable events first..first+n-1.
func (l *Ledger) readAcks(first Seq, n uint32) ([]Ack, error) {
	acks := make([]Ack, n)
	for i := range acks {
		env, err := l.Get(first + Seq(i))
		if err != nil {
			return nil, err
		}
		acks[i] = Ack{Seq: env.Seq, ID: env.ID, Hash: env.Hash}
	}
	return acks, nil
}

// contentDigest is the SHA-256 of an append's content: each event's kind,
// activation, session, server and canonical payload, length-prefixed.
func contentDigest(ps []events.Prepared) [32]byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	for _, p := range ps {
		field([]byte(p.Kind))
		field([]byte(p.Activation))
		field([]byte(p.Session))
		field([]byte(p.Server))
		field(p.Data)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// idemWindow is the committer's memory of the remembered keys.
type idemWindow struct {
	limit int
	byKey map[string]keys.IdemRecord
	ring  []string // keys in sealing order, oldest at ring[start]
	start int
	next  uint64 // Order of the next key
	// evictedAt is the sealing time (Unix ns) of the newest evicted record.
	evictedAt int64
}

func (w *idemWindow) push(k string) {
	if len(w.ring) < w.limit {
		w.ring = append(w.ring, k)
		return
	}
	w.ring[w.start] = k
	w.start = (w.start + 1) % w.limit
}

// loadIdempotency reads the remembered keys into the committer's window,
// in sealing order. Records beyond the window (a smaller
// Options.IdempotencyWindow than before) are deleted, oldest first.
func (l *Ledger) loadIdempotency() error {
	limit := l.opts.IdempotencyWindow
	if limit <= 0 {
		limit = DefaultIdempotencyWindow
	}
	w := &idemWindow{limit: limit, byKey: map[string]keys.IdemRecord{}}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte(keys.PrefixIdem), UpperBound: keys.UpperBound([]byte(keys.PrefixIdem))})
	if err != nil {
		return &Error{Op: "open", Err: fmt.Errorf("read idempotency records: %w", err)}
	}
	type rec struct {
		key string
		r   keys.IdemRecord
	}
	var recs []rec
	for it.First(); it.Valid(); it.Next() {
		r, ok := keys.DecodeIdem(it.Value())
		if !ok {
			it.Close()
			return &Error{Op: "open", Err: fmt.Errorf("%w: malformed idempotency record", ErrCorrupt)}
		}
		recs = append(recs, rec{string(it.Key()[len(keys.PrefixIdem):]), r})
	}
	if err := it.Close(); err != nil {
		return &Error{Op: "open", Err: fmt.Errorf("read idempotency records: %w", err)}
	}
	slices.SortFunc(recs, func(a, b rec) int { return cmp.Compare(a.r.Order, b.r.Order) })
	if extra := len(recs) - limit; extra > 0 {
		b := l.db.NewBatch()
		for _, r := range recs[:extra] {
			_ = b.Delete(keys.Idem(r.key), nil)
		}
		_ = b.Set([]byte(keys.IdemEvicted), binary.BigEndian.AppendUint64(nil, uint64(recs[extra-1].r.At)), nil)
		if err := b.Commit(pebble.Sync); err != nil {
			return &Error{Op: "open", Err: fmt.Errorf("trim idempotency records: %w", err)}
		}
		recs = recs[extra:]
	}
	if v, closer, err := l.db.Get([]byte(keys.IdemEvicted)); err == nil {
		if len(v) == 8 {
			w.evictedAt = int64(binary.BigEndian.Uint64(v))
		}
		closer.Close()
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return &Error{Op: "open", Err: fmt.Errorf("read %s: %w", keys.IdemEvicted, err)}
	}
	for _, r := range recs {
		w.byKey[r.key] = r.r
		w.push(r.key)
		w.next = r.r.Order + 1
	}
	l.idem = w
	return nil
}

// matchIdem is called by the committer for a keyed request before sealing
// it. It returns true when the request is answered without being sealed:
// a conflict (r.err set) or a retry of a remembered append (r.dupFirst,
// r.dupCount set; the caller makes sure the original is durable and through
// BeforeAck before r is woken).
func (l *Ledger) matchIdem(r *appendReq) bool {
	rec, ok := l.idem.byKey[r.key]
	if !ok {
		if r.firstSent != 0 && l.idem.evictedAt != 0 && r.firstSent <= l.idem.evictedAt+int64(IdempotencyClockSlack) {
			r.err = ErrIdempotencyExpired
			return true
		}
		return false
	}
	if rec.Digest != r.digest {
		r.err = ErrIdempotencyConflict
		return true
	}
	r.dupFirst, r.dupCount = rec.First, rec.Count
	return true
}

// recordIdem remembers r's key in batch b (r is sealed: r.acks are set) and
// evicts the oldest key beyond the window, in the same batch.
func (l *Ledger) recordIdem(b *pebble.Batch, r *appendReq, unixNanos int64) {
	w := l.idem
	rec := keys.IdemRecord{Order: w.next, First: r.acks[0].Seq, Count: uint32(len(r.acks)), Digest: r.digest, At: unixNanos}
	w.next++
	if len(w.ring) == w.limit {
		old := w.ring[w.start]
		w.evictedAt = max(w.evictedAt, w.byKey[old].At)
		delete(w.byKey, old)
		_ = b.Delete(keys.Idem(old), nil)
		_ = b.Set([]byte(keys.IdemEvicted), binary.BigEndian.AppendUint64(nil, uint64(w.evictedAt)), nil)
	}
	w.byKey[r.key] = rec
	w.push(r.key)
	_ = b.Set(keys.Idem(r.key), keys.EncodeIdem(rec), nil)
}
