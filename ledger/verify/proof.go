package verify

// Proofs against signed checkpoints: an RFC 6962 inclusion proof ties one
// event's canonical bytes to a checkpoint, a consistency proof ties an
// older checkpoint to a newer one. Both are checked with nothing but the
// verifier key, the checkpoints and the proof — no data directory — so an
// auditor can keep them, pass them on and re-check them anywhere.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/transparency-dev/merkle/proof"
	"golang.org/x/mod/sumdb/note"
)

// ErrProof is wrapped by every proof that does not verify (with ErrVerify,
// in an *Error whose Fault is "proof").
var ErrProof = errors.New("verify: proof does not verify")

// faultProof is the Fault of a proof that does not verify: the value of
// FaultProof, declared with the bundle faults.
const faultProof Fault = "proof"

// Formats of the proof files.
const (
	InclusionFormat   = "leaseledger-inclusion-proof/1"
	ConsistencyFormat = "leaseledger-consistency-proof/1"
)

// proofErr is the *Error of a proof that does not verify; seq names the
// event (inclusion) or the first event the newer checkpoint adds
// (consistency).
func proofErr(op string, seq ledger.Seq, detail string, cause error) *Error {
	c := ErrProof
	if cause != nil {
		c = fmt.Errorf("%w: %w", ErrProof, cause)
	}
	return &Error{Op: op, Seq: seq, Fault: faultProof, Detail: detail, Err: ErrVerify, Cause: c}
}

// VerifyInclusion checks that event (its canonical bytes) is event seq of
// the log c commits to: it decodes as a canonical envelope carrying seq
// whose hash checks, hashes (from ledger.InclusionProof) lead from its leaf
// to c.Root, and, for the event at c.Size, its chain hash is c.Head.
func VerifyInclusion(c Checkpoint, seq ledger.Seq, event []byte, hashes [][]byte) error {
	const op = "inclusion"
	env, err := events.Decode(event)
	if err != nil {
		return proofErr(op, seq, "the event does not decode", err)
	}
	switch {
	case env.Seq != seq:
		return proofErr(op, seq, fmt.Sprintf("the event carries seq %d", env.Seq), nil)
	case !env.CheckHash():
		return proofErr(op, seq, "the event's hash does not check", nil)
	case seq == 0 || seq > c.Size:
		return proofErr(op, seq, fmt.Sprintf("not in a checkpoint of size %d", c.Size), nil)
	case seq == c.Size && env.Hash != c.Head:
		return proofErr(op, seq, "the event's chain hash is not the checkpoint's", nil)
	}
	if err := proof.VerifyInclusion(hasher, uint64(seq-1), uint64(c.Size), hasher.HashLeaf(event), hashes, c.Root); err != nil {
		return proofErr(op, seq, fmt.Sprintf("the audit path does not lead to the root of size %d", c.Size), err)
	}
	return nil
}

// VerifyConsistency checks that the log old commits to is a prefix of the
// one new commits to: same origin, old.Size ≤ new.Size, equal sizes have
// equal roots and chain hashes, and hashes (from ledger.ConsistencyProof)
// lead from old.Root to new.Root.
func VerifyConsistency(old, new Checkpoint, hashes [][]byte) error {
	const op = "consistency"
	switch {
	case old.Origin != new.Origin:
		return proofErr(op, 0, "the checkpoints have different origins", nil)
	case old.Size > new.Size:
		return proofErr(op, new.Size+1, fmt.Sprintf("the newer checkpoint (size %d) is shorter than the older (size %d): a rollback", new.Size, old.Size), nil)
	case old.Size == new.Size && old.Head != new.Head:
		return proofErr(op, old.Size, fmt.Sprintf("two checkpoints of size %d with different chain hashes: a fork", old.Size), nil)
	}
	if err := proof.VerifyConsistency(hasher, uint64(old.Size), uint64(new.Size), hashes, old.Root, new.Root); err != nil {
		return proofErr(op, old.Size+1, fmt.Sprintf("the tree of size %d is not a prefix of the tree of size %d", old.Size, new.Size), err)
	}
	return nil
}

// InclusionProof is a self-contained inclusion proof (a JSON file of
// 'leaseledger prove inclusion'): with the verifier key alone, Verify
// checks that Event is event Seq of the log Checkpoint commits to.
type InclusionProof struct {
	Format     string          `json:"format"`     // InclusionFormat
	Checkpoint string          `json:"checkpoint"` // signed note text
	Seq        ledger.Seq      `json:"seq"`
	Event      json.RawMessage `json:"event"`  // canonical event bytes, verbatim
	Hashes     [][]byte        `json:"hashes"` // audit path, leaf to root
}

// ProveInclusion makes the proof file of event seq against the signed
// checkpoint signed, from l. The signature is not checked here (the proof's
// reader checks it); the checkpoint must commit to l's first events, or the
// error wraps ErrCheckpoint.
func ProveInclusion(ctx context.Context, l *ledger.Ledger, signed []byte, seq ledger.Seq) (*InclusionProof, error) {
	c, err := matchCheckpoint(ctx, l, signed)
	if err != nil {
		return nil, err
	}
	if seq == 0 || seq > c.Size {
		return nil, fmt.Errorf("%w: seq %d is not in the checkpoint of size %d", ErrCheckpoint, seq, c.Size)
	}
	hashes, err := l.InclusionProof(ctx, seq, c.Size)
	if err != nil {
		return nil, err
	}
	raw, err := l.GetRaw(seq)
	if err != nil {
		return nil, err
	}
	return &InclusionProof{Format: InclusionFormat, Checkpoint: string(signed), Seq: seq, Event: raw, Hashes: hashes}, nil
}

// ProveConsistency makes the proof file between the signed checkpoints old
// and new, from l; both must commit to l's first events (ErrCheckpoint).
func ProveConsistency(ctx context.Context, l *ledger.Ledger, old, new []byte) (*ConsistencyProof, error) {
	co, err := matchCheckpoint(ctx, l, old)
	if err != nil {
		return nil, fmt.Errorf("old checkpoint: %w", err)
	}
	cn, err := matchCheckpoint(ctx, l, new)
	if err != nil {
		return nil, fmt.Errorf("new checkpoint: %w", err)
	}
	if co.Size > cn.Size {
		return nil, fmt.Errorf("%w: the old checkpoint (size %d) is larger than the new one (size %d)", ErrCheckpoint, co.Size, cn.Size)
	}
	var hashes [][]byte
	if co.Size > 0 {
		if hashes, err = l.ConsistencyProof(ctx, co.Size, cn.Size); err != nil {
			return nil, err
		}
	}
	return &ConsistencyProof{Format: ConsistencyFormat, Old: string(old), New: string(new), Hashes: hashes}, nil
}

// matchCheckpoint parses signed (unverified) and checks that l holds the
// log it commits to.
func matchCheckpoint(ctx context.Context, l *ledger.Ledger, signed []byte) (Checkpoint, error) {
	c, err := parseUnverified(signed)
	if err != nil {
		return Checkpoint{}, err
	}
	if head := l.Head().Seq; c.Size > head {
		return Checkpoint{}, fmt.Errorf("%w: the checkpoint covers %d events, the log holds %d", ErrCheckpoint, c.Size, head)
	}
	mine, err := CheckpointAt(ctx, l, c.Origin, c.Size)
	if err != nil {
		return Checkpoint{}, err
	}
	if !bytes.Equal(mine.Root, c.Root) || mine.Head != c.Head {
		return Checkpoint{}, fmt.Errorf("%w: the log's first %d events are not the ones the checkpoint commits to", ErrCheckpoint, c.Size)
	}
	return c, nil
}

// Verify checks the checkpoint's signature with v and the proof; it returns
// the checkpoint.
func (p *InclusionProof) Verify(v note.Verifier) (Checkpoint, error) {
	if p.Format != InclusionFormat {
		return Checkpoint{}, proofErr("inclusion", p.Seq, "not a "+InclusionFormat+" file", nil)
	}
	c, err := ParseCheckpoint([]byte(p.Checkpoint), v)
	if err != nil {
		return Checkpoint{}, err
	}
	return c, VerifyInclusion(c, p.Seq, p.Event, p.Hashes)
}

// ConsistencyProof is a self-contained consistency proof (a JSON file of
// 'leaseledger prove consistency'): with the verifier key alone, Verify
// checks that the log Old commits to is a prefix of the one New commits to.
type ConsistencyProof struct {
	Format string   `json:"format"` // ConsistencyFormat
	Old    string   `json:"old"`    // signed note text
	New    string   `json:"new"`    // signed note text
	Hashes [][]byte `json:"hashes"`
}

// ErrProofFile is wrapped when proof file bytes are not exactly the
// canonical encoding of a proof (what 'leaseledger prove' writes).
var ErrProofFile = errors.New("verify: not a canonical proof file")

// DecodeInclusionProof reads an inclusion proof file strictly: b must be
// exactly the canonical encoding of the proof (json.Marshal of it, with one
// trailing newline allowed), so that no changed byte — a key's case, the
// padding bits of a base64 hash, spacing — is accepted. Verify it next.
func DecodeInclusionProof(b []byte) (*InclusionProof, error) {
	var p InclusionProof
	if err := decodeCanonical(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// DecodeConsistencyProof reads a consistency proof file strictly (as
// DecodeInclusionProof).
func DecodeConsistencyProof(b []byte) (*ConsistencyProof, error) {
	var p ConsistencyProof
	if err := decodeCanonical(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// decodeCanonical decodes b into p and requires b to be p re-encoded:
// encoding/json accepts keys in any case and base64 with non-zero padding
// bits, so without this check several files would verify as one proof.
func decodeCanonical(b []byte, p any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return fmt.Errorf("%w: %w", ErrProofFile, err)
	}
	want, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProofFile, err)
	}
	if !bytes.Equal(bytes.TrimSuffix(b, []byte("\n")), want) {
		return fmt.Errorf("%w: the bytes differ from the proof's canonical encoding", ErrProofFile)
	}
	return nil
}

// Verify checks both checkpoints' signatures with v and the proof; it
// returns the checkpoints.
func (p *ConsistencyProof) Verify(v note.Verifier) (old, new Checkpoint, err error) {
	if p.Format != ConsistencyFormat {
		return Checkpoint{}, Checkpoint{}, proofErr("consistency", 0, "not a "+ConsistencyFormat+" file", nil)
	}
	if old, err = ParseCheckpoint([]byte(p.Old), v); err != nil {
		return Checkpoint{}, Checkpoint{}, fmt.Errorf("old checkpoint: %w", err)
	}
	if new, err = ParseCheckpoint([]byte(p.New), v); err != nil {
		return Checkpoint{}, Checkpoint{}, fmt.Errorf("new checkpoint: %w", err)
	}
	return old, new, VerifyConsistency(old, new, p.Hashes)
}
