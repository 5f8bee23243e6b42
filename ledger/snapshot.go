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

// ErrNoSnapshot is returned by LoadSnapshot when none is stored.
var ErrNoSnapshot = errors.New("ledger: no snapshot")

// SaveSnapshot durably stores a projection's serialised state under
// p/<name>, together with the seq it covers (every event up to and
// including covers has been applied). covers may not exceed the durable
// head: a snapshot never claims events that are not acknowledged.
func (l *Ledger) SaveSnapshot(name string, covers Seq, data []byte) error {
	if !events.ValidID(name) {
		return fmt.Errorf("ledger: snapshot name: %w", &events.FieldError{Field: "name", Reason: "want [A-Za-z0-9_-]{1,128}"})
	}
	if len(data) > MaxSnapshotBytes {
		return fmt.Errorf("ledger: snapshot of %d bytes over MaxSnapshotBytes=%d", len(data), MaxSnapshotBytes)
	}
	end, err := l.beginRead()
	if err != nil {
		return err
	}
	defer end()
	if head := l.Head().Seq; covers > head {
		return fmt.Errorf("ledger: snapshot covers seq %d beyond the durable head %d", covers, head)
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(data)), uint64(covers))
	if err := l.db.Set([]byte(keys.PrefixSnapshot+name), append(v, data...), pebble.Sync); err != nil {
		return fmt.Errorf("ledger: save snapshot %s: %w", name, err)
	}
	return nil
}

// LoadSnapshot returns the stored snapshot of projection name and the seq
// it covers, or ErrNoSnapshot.
func (l *Ledger) LoadSnapshot(name string) (Seq, []byte, error) {
	if !events.ValidID(name) {
		return 0, nil, fmt.Errorf("ledger: snapshot name: %w", &events.FieldError{Field: "name", Reason: "want [A-Za-z0-9_-]{1,128}"})
	}
	end, err := l.beginRead()
	if err != nil {
		return 0, nil, err
	}
	defer end()
	v, closer, err := l.db.Get([]byte(keys.PrefixSnapshot + name))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil, ErrNoSnapshot
	}
	if err != nil {
		return 0, nil, fmt.Errorf("ledger: load snapshot %s: %w", name, err)
	}
	defer closer.Close()
	if len(v) < 8 {
		return 0, nil, fmt.Errorf("%w: snapshot %s is malformed", ErrCorrupt, name)
	}
	covers := Seq(binary.BigEndian.Uint64(v[:8]))
	if covers > l.Head().Seq {
		return 0, nil, fmt.Errorf("%w: snapshot %s covers seq %d beyond the head %d", ErrCorrupt, name, covers, l.Head().Seq)
	}
	return covers, append([]byte(nil), v[8:]...), nil
}
