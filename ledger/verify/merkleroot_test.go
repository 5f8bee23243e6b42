package verify

import (
	"context"
	"errors"
	"fmt"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/transparency-dev/merkle/compact"
)

// merkleRoot computes the RFC 6962 root over events 1..size read from scan,
// independently of the ledger's node index: the reference the tests hold
// CheckpointAt to.
func merkleRoot(ctx context.Context, size ledger.Seq, scan func(context.Context, ledger.Query, func(ledger.Seq, []byte) error) error) ([]byte, events.Hash, error) {
	if size == 0 {
		return hasher.EmptyRoot(), events.Hash{}, nil
	}
	rf := &compact.RangeFactory{Hash: hasher.HashChildren}
	r := rf.NewEmptyRange(0)
	var last events.Hash
	next := ledger.Seq(1)
	err := scan(ctx, ledger.Query{From: 1, To: size}, func(seq ledger.Seq, raw []byte) error {
		if seq != next {
			return fmt.Errorf("%w: seq %d missing", ErrCheckpoint, next)
		}
		next++
		env, err := events.Decode(raw)
		if err != nil {
			return fmt.Errorf("%w: seq %d: %w", ErrCheckpoint, seq, err)
		}
		last = env.Hash
		if err := r.Append(hasher.HashLeaf(raw), nil); err != nil {
			return fmt.Errorf("%w: merkle: %w", ErrCheckpoint, err)
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrCheckpoint) {
			err = fmt.Errorf("%w: read the log: %w", ErrCheckpoint, err) // closed ledger, context
		}
		return nil, events.Hash{}, err
	}
	if next != size+1 {
		return nil, events.Hash{}, fmt.Errorf("%w: the log holds %d events, the checkpoint covers %d", ErrCheckpoint, next-1, size)
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return nil, events.Hash{}, fmt.Errorf("%w: merkle root: %w", ErrCheckpoint, err)
	}
	return root, last, nil
}
