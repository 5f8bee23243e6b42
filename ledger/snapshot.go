package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// MaxSnapshotBytes bounds one stored projection snapshot.
const MaxSnapshotBytes = 256 << 20

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
