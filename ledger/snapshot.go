package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// Bounds of stored snapshots.
const (
	// MaxSnapshotBytes bounds one stored projection snapshot (the whole
	// snapshot for SaveSnapshot, its header for SaveSnapshotParts).
	MaxSnapshotBytes = 256 << 20
	// MaxSnapshotPartBytes bounds one part stored beside a snapshot header
	// (one retired activation of the projector).
	MaxSnapshotPartBytes = 16 << 20
	// MaxSnapshotBatchBytes bounds everything one SaveSnapshotParts writes
	// (header and parts), below Pebble's 4 GiB batch limit.
	MaxSnapshotBatchBytes = 1 << 30
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
// p/<name>/<key> (key: an identifier, see events.ValidID). A nil Value
// deletes the part.
type SnapshotPart struct {
	Key   string
	Value []byte
}

// SaveSnapshotParts stores, in one synced Pebble batch, a snapshot header
// (as SaveSnapshot does, read back by LoadSnapshot) and parts beside it
// (read back by LoadSnapshotPart). Parts not named keep their stored value,
// so a snapshot writes only what changed since the previous one; with reset
// every stored part of name is deleted first (a snapshot that does not
// continue the stored one). A crash leaves either the previous snapshot
// with all its parts or this one: never a mix. Every value is bounded
// (MaxSnapshotBytes for the header, MaxSnapshotPartBytes per part,
// MaxSnapshotBatchBytes in all); exceeding one stores nothing and returns
// an error wrapping ErrSnapshotTooLarge.
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
		if !events.ValidID(p.Key) {
			return &Error{Op: op, Err: &events.FieldError{Field: "part key", Reason: "want " + events.IDRule}}
		}
		if len(p.Value) > MaxSnapshotPartBytes {
			return &Error{Op: op, Err: fmt.Errorf("%w: part %s of %d bytes, limit MaxSnapshotPartBytes=%d", ErrSnapshotTooLarge, p.Key, len(p.Value), MaxSnapshotPartBytes)}
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
		k := append(prefix[:len(prefix):len(prefix)], p.Key...)
		if p.Value == nil {
			err = b.Delete(k, nil)
		} else {
			err = b.Set(k, p.Value, nil)
		}
		if err != nil {
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

// LoadSnapshotPart returns the part key stored beside snapshot name, false
// when there is none. The parts belong to the snapshot LoadSnapshot
// returns (they are written in its batch).
func (l *Ledger) LoadSnapshotPart(name, key string) ([]byte, bool, error) {
	const op = "load snapshot"
	if !events.ValidID(name) || !events.ValidID(key) {
		return nil, false, &Error{Op: op, Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	end, err := l.beginRead(op)
	if err != nil {
		return nil, false, err
	}
	defer end()
	v, closer, err := l.db.Get(append(partPrefix(name), key...))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, l.readErr(op, 0, 0, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// partPrefix is p/<name>/, the prefix of the parts of snapshot name.
func partPrefix(name string) []byte {
	return []byte(keys.PrefixSnapshot + name + "/")
}

// ScanSnapshotParts calls fn with every part stored beside snapshot name,
// in key order, from one consistent view of the store (a snapshot saved
// meanwhile is seen entirely or not at all). value is valid only during
// the call. An error from fn stops the scan and is returned.
func (l *Ledger) ScanSnapshotParts(ctx context.Context, name string, fn func(key string, value []byte) error) error {
	const op = "scan snapshot parts"
	if !events.ValidID(name) {
		return &Error{Op: op, Err: &events.FieldError{Field: "name", Reason: "want " + events.IDRule}}
	}
	end, err := l.beginRead(op)
	if err != nil {
		return err
	}
	defer end()
	prefix := partPrefix(name)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.UpperBound(prefix)})
	if err != nil {
		return l.readErr(op, 0, 0, err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return l.readErr(op, 0, 0, err)
		}
		if err := fn(string(it.Key()[len(prefix):]), v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return l.readErr(op, 0, 0, err)
	}
	return nil
}
