package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// Bounds of stored snapshots.
const (
	// MaxSnapshotBytes bounds one stored projection snapshot (the whole
	// snapshot for SaveSnapshot, its header for SaveSnapshotParts).
	MaxSnapshotBytes = 256 << 20
	// SnapshotChunkBytes is the most one stored value of a part holds: a
	// longer part is split into chunks of this size under consecutive
	// keys and read back whole, so that no single Pebble value grows with
	// one part (a retired activation with many never-confirmed resources)
	// and a large part never stops a snapshot by itself.
	SnapshotChunkBytes = 4 << 20
	// MaxSnapshotBatchBytes bounds everything one SaveSnapshotParts writes
	// (header and parts), below Pebble's 4 GiB batch limit: the only
	// bound of one part.
	MaxSnapshotBatchBytes = 1 << 30
	// MaxPartKeyLen bounds a part key (see ValidPartKey).
	MaxPartKeyLen = 2*events.MaxIDLen + 1
)

// Snapshot errors.
var (
	// ErrNoSnapshot is returned by LoadSnapshot when none is stored.
	ErrNoSnapshot = errors.New("ledger: no snapshot")
	// ErrSnapshotTooLarge is wrapped when a snapshot exceeds MaxSnapshotBytes.
	ErrSnapshotTooLarge = errors.New("ledger: snapshot too large")
	// ErrBeyondHead is wrapped when a snapshot would cover events that are
	// not durable.
	ErrBeyondHead = errors.New("ledger: beyond the durable head")
)

// SaveSnapshot durably stores a projection's serialised state under
// p/<name>, together with the seq it covers (every event up to and
// including covers has been applied). covers may not exceed the durable
// head: a snapshot never claims events that are not acknowledged.
func (l *Ledger) SaveSnapshot(name string, covers Seq, data []byte) error {
	if !events.ValidID(name) {
		return &Error{Op: "save snapshot", Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	if len(data) > MaxSnapshotBytes {
		return &Error{Op: "save snapshot", Err: fmt.Errorf("%w: %d bytes, limit MaxSnapshotBytes=%d", ErrSnapshotTooLarge, len(data), MaxSnapshotBytes)}
	}
	end, err := l.beginRead("save snapshot")
	if err != nil {
		return err
	}
	defer end()
	if err := l.failed(); err != nil { // ErrReadOnly, or the write path failed
		return &Error{Op: "save snapshot", Err: err}
	}
	if head := l.Head().Seq; covers > head {
		return &Error{Op: "save snapshot", Seq: covers, Err: fmt.Errorf("%w (head %d)", ErrBeyondHead, head)}
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(data)), uint64(covers))
	if err := l.db.Set([]byte(keys.PrefixSnapshot+name), append(v, data...), pebble.Sync); err != nil {
		return &Error{Op: "save snapshot", Err: err}
	}
	if err := l.failed(); err != nil { // a Pebble fatal error during the Set
		return &Error{Op: "save snapshot", Err: err}
	}
	return nil
}

// LoadSnapshot returns the stored snapshot of projection name and the seq
// it covers, or an error wrapping ErrNoSnapshot.
func (l *Ledger) LoadSnapshot(name string) (Seq, []byte, error) {
	if !events.ValidID(name) {
		return 0, nil, &Error{Op: "load snapshot", Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	end, err := l.beginRead("load snapshot")
	if err != nil {
		return 0, nil, err
	}
	defer end()
	v, closer, err := l.db.Get([]byte(keys.PrefixSnapshot + name))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil, &Error{Op: "load snapshot", Err: ErrNoSnapshot}
	}
	if err != nil {
		return 0, nil, l.readErr("load snapshot", 0, 0, err)
	}
	defer closer.Close()
	if len(v) < 8 {
		return 0, nil, &Error{Op: "load snapshot", Err: fmt.Errorf("%w: snapshot %s is malformed", ErrCorrupt, name)}
	}
	covers := Seq(binary.BigEndian.Uint64(v[:8]))
	if covers > l.Head().Seq {
		return 0, nil, &Error{Op: "load snapshot", Seq: covers, Err: fmt.Errorf("%w: snapshot %s covers an event beyond the head %d", ErrCorrupt, name, l.Head().Seq)}
	}
	return covers, append([]byte(nil), v[8:]...), nil
}

// SnapshotPart is one value stored beside a snapshot header, under
// p/<name>/<key> (key: see ValidPartKey). A nil Value deletes the part.
// A value longer than SnapshotChunkBytes is stored in chunks: the first
// under the key, the rest under <key> 0x00 <4-byte big-endian index>,
// which sort right after the key (identifier bytes are all above 0x00).
type SnapshotPart struct {
	Key   string
	Value []byte
}

// ValidPartKey reports whether k is a snapshot part key: one identifier
// (events.ValidID) or two joined by '.', which lets a caller keep several
// kinds of parts apart (a '.' is in no identifier, so "a.x" never equals
// an identifier or another kind's key).
func ValidPartKey(k string) bool {
	if len(k) > MaxPartKeyLen {
		return false
	}
	head, tail, dot := strings.Cut(k, ".")
	return events.ValidID(head) && (!dot || events.ValidID(tail))
}

// chunkKey is the key of chunk i (≥ 1) of the part stored under k.
func chunkKey(k []byte, i int) []byte {
	return binary.BigEndian.AppendUint32(append(k[:len(k):len(k)], 0), uint32(i))
}

// SaveSnapshotParts stores, in one synced Pebble batch, a snapshot header
// (as SaveSnapshot does, read back by LoadSnapshot) and parts beside it
// (read back by LoadSnapshotPart). Parts not named keep their stored value,
// so a snapshot writes only what changed since the previous one; with reset
// every stored part of name is deleted first (a snapshot that does not
// continue the stored one). A crash leaves either the previous snapshot
// with all its parts or this one: never a mix. A part of any size is
// stored (in chunks of SnapshotChunkBytes); the bounds are
// MaxSnapshotBytes for the header and MaxSnapshotBatchBytes in all, and
// exceeding one stores nothing and returns an error wrapping
// ErrSnapshotTooLarge.
func (l *Ledger) SaveSnapshotParts(name string, covers Seq, header []byte, parts []SnapshotPart, reset bool) error {
	const op = "save snapshot"
	if !events.ValidID(name) {
		return &Error{Op: op, Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	if len(header) > MaxSnapshotBytes {
		return &Error{Op: op, Err: fmt.Errorf("%w: header of %d bytes, limit MaxSnapshotBytes=%d", ErrSnapshotTooLarge, len(header), MaxSnapshotBytes)}
	}
	total := len(header)
	for _, p := range parts {
		if !ValidPartKey(p.Key) {
			return &Error{Op: op, Err: &events.FieldError{Field: "part key", Reason: "want " + partKeyRule}}
		}
		if total += len(p.Value) + len(p.Key); total > MaxSnapshotBatchBytes {
			return &Error{Op: op, Err: fmt.Errorf("%w: more than MaxSnapshotBatchBytes=%d in one snapshot", ErrSnapshotTooLarge, MaxSnapshotBatchBytes)}
		}
	}
	end, err := l.beginRead(op)
	if err != nil {
		return err
	}
	defer end()
	if err := l.failed(); err != nil {
		return &Error{Op: op, Err: err}
	}
	if head := l.Head().Seq; covers > head {
		return &Error{Op: op, Seq: covers, Err: fmt.Errorf("%w (head %d)", ErrBeyondHead, head)}
	}
	b := l.db.NewBatch()
	defer b.Close()
	prefix := partPrefix(name)
	if reset {
		// '/'+1 ends the prefix: identifiers contain no '/'.
		if err := b.DeleteRange(prefix, append(prefix[:len(prefix)-1:len(prefix)-1], '/'+1), nil); err != nil {
			return &Error{Op: op, Err: err}
		}
	}
	for _, p := range parts {
		if err := setPart(b, append(prefix[:len(prefix):len(prefix)], p.Key...), p.Value); err != nil {
			return &Error{Op: op, Err: err}
		}
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(header)), uint64(covers))
	if err := b.Set([]byte(keys.PrefixSnapshot+name), append(v, header...), nil); err != nil {
		return &Error{Op: op, Err: err}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return &Error{Op: op, Err: err}
	}
	if err := l.failed(); err != nil {
		return &Error{Op: op, Err: err}
	}
	return nil
}

// partKeyRule is ValidPartKey's rule as error messages state it.
const partKeyRule = events.IDRule + " or two of them joined by '.'"

// setPart writes (value nil: deletes) the part stored under k into b. A
// value of SnapshotChunkBytes or more deletes the chunks of the previous
// value first: a reader looks for chunks only after a full first chunk,
// so those a shorter value leaves behind are never read (and a reset, or
// the next long value, deletes them).
func setPart(b *pebble.Batch, k, value []byte) error {
	if value == nil || len(value) >= SnapshotChunkBytes {
		if err := b.DeleteRange(chunkKey(k, 0)[:len(k)+1], append(k[:len(k):len(k)], 1), nil); err != nil {
			return err
		}
	}
	if value == nil {
		return b.Delete(k, nil)
	}
	first := min(len(value), SnapshotChunkBytes)
	if err := b.Set(k, value[:first], nil); err != nil {
		return err
	}
	for i, off := 1, first; off < len(value); i++ {
		end := min(off+SnapshotChunkBytes, len(value))
		if err := b.Set(chunkKey(k, i), value[off:end], nil); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// LoadSnapshotPart returns the part key stored beside snapshot name, false
// when there is none. The parts belong to the snapshot LoadSnapshot
// returns (they are written in its batch).
func (l *Ledger) LoadSnapshotPart(name, key string) ([]byte, bool, error) {
	const op = "load snapshot"
	if !events.ValidID(name) {
		return nil, false, &Error{Op: op, Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	if !ValidPartKey(key) {
		return nil, false, &Error{Op: op, Err: &events.FieldError{Field: "part key", Reason: "want " + partKeyRule}}
	}
	end, err := l.beginRead(op)
	if err != nil {
		return nil, false, err
	}
	defer end()
	v, ok, err := loadPart(l.db, append(partPrefix(name), key...))
	if err != nil {
		return nil, false, l.readErr(op, 0, 0, err)
	}
	return v, ok, nil
}

// loadPart reads the whole part stored under k from r.
func loadPart(r pebble.Reader, k []byte) ([]byte, bool, error) {
	// The common case: one Get, no iterator. A part with chunks (a full
	// first chunk) is read again whole through one iterator, a consistent
	// view of all its chunks.
	v, closer, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	closer.Close()
	if len(out) < SnapshotChunkBytes {
		return out, true, nil
	}
	out = nil
	found := false
	err = scanParts(r, k, append(k[:len(k):len(k)], 1), func(_ []byte, v []byte) error {
		out, found = append([]byte(nil), v...), true
		return nil
	})
	return out, found, err
}

// scanParts calls fn with every whole part (its chunks joined) whose key
// is in [lower, upper), in key order, from one iterator: a consistent view.
// fn's value is valid only during the call.
func scanParts(r pebble.Reader, lower, upper []byte, fn func(key, value []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer it.Close()
	var key, buf []byte
	open, full := false, false
	emit := func() error {
		if !open {
			return nil
		}
		open = false
		return fn(key, buf)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if i := bytes.IndexByte(k, 0); i >= 0 {
			// A chunk: part of the open part when its first chunk was full
			// and the chunks so far were too; else left by a shorter value.
			if open && full && bytes.Equal(k[:i], key) && len(k) == i+5 && int(binary.BigEndian.Uint32(k[i+1:])) == len(buf)/SnapshotChunkBytes {
				buf = append(buf, v...)
				full = len(v) == SnapshotChunkBytes
			} else {
				full = false
			}
			continue
		}
		if err := emit(); err != nil {
			return err
		}
		key, buf = append(key[:0], k...), append(buf[:0], v...)
		open, full = true, len(v) == SnapshotChunkBytes
	}
	if err := it.Error(); err != nil {
		return err
	}
	return emit()
}

// partPrefix is p/<name>/, the prefix of the parts of snapshot name.
func partPrefix(name string) []byte {
	return []byte(keys.PrefixSnapshot + name + "/")
}

// ScanSnapshotParts calls fn with every part stored beside snapshot name
// whose key begins with prefix ("": all), in key order, from one
// consistent view of the store (a snapshot saved meanwhile is seen
// entirely or not at all). value is valid only during the call. An error
// from fn stops the scan and is returned.
func (l *Ledger) ScanSnapshotParts(ctx context.Context, name, prefix string, fn func(key string, value []byte) error) error {
	const op = "scan snapshot parts"
	if !events.ValidID(name) {
		return &Error{Op: op, Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	end, err := l.beginRead(op)
	if err != nil {
		return err
	}
	defer end()
	lower := append(partPrefix(name), prefix...)
	n := len(partPrefix(name))
	var ferr error
	err = scanParts(l.db, lower, keys.UpperBound(lower), func(k, v []byte) error {
		if ferr = ctx.Err(); ferr == nil {
			ferr = fn(string(k[n:]), v)
		}
		return ferr
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return l.readErr(op, 0, 0, err)
	}
	return nil
}

// PartsView reads the parts of one snapshot name from one consistent view
// of the store: every read sees the same snapshot batches (a batch saved
// after ViewSnapshotParts is not seen). Close it: the ledger's Close waits
// for it.
type PartsView struct {
	l      *Ledger
	snap   *pebble.Snapshot
	prefix []byte
	end    func()
}

// ViewSnapshotParts opens a consistent view of the parts of snapshot name.
func (l *Ledger) ViewSnapshotParts(name string) (*PartsView, error) {
	const op = "view snapshot parts"
	if !events.ValidID(name) {
		return nil, &Error{Op: op, Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	end, err := l.beginRead(op)
	if err != nil {
		return nil, err
	}
	return &PartsView{l: l, snap: l.db.NewSnapshot(), prefix: partPrefix(name), end: end}, nil
}

// Load returns the part key in the view, false when there is none.
func (v *PartsView) Load(key string) ([]byte, bool, error) {
	if !ValidPartKey(key) {
		return nil, false, &Error{Op: "load snapshot", Err: &events.FieldError{Field: "part key", Reason: "want " + partKeyRule}}
	}
	b, ok, err := loadPart(v.snap, append(v.prefix[:len(v.prefix):len(v.prefix)], key...))
	if err != nil {
		return nil, false, v.l.readErr("load snapshot", 0, 0, err)
	}
	return b, ok, nil
}

// Scan is ScanSnapshotParts over the view.
func (v *PartsView) Scan(ctx context.Context, prefix string, fn func(key string, value []byte) error) error {
	lower := append(v.prefix[:len(v.prefix):len(v.prefix)], prefix...)
	n := len(v.prefix)
	var ferr error
	err := scanParts(v.snap, lower, keys.UpperBound(lower), func(k, b []byte) error {
		if ferr = ctx.Err(); ferr == nil {
			ferr = fn(string(k[n:]), b)
		}
		return ferr
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return v.l.readErr("scan snapshot parts", 0, 0, err)
	}
	return nil
}

// Close releases the view. It is idempotent.
func (v *PartsView) Close() error {
	if v.snap == nil {
		return nil
	}
	err := v.snap.Close()
	v.snap = nil
	v.end()
	return err
}
