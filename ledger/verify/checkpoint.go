package verify

import (
	"context"
	"crypto"
	_ "crypto/sha256" // registers SHA-256 for the RFC 6962 hasher
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// A checkpoint commits to a prefix of the log in a form that can be kept
// elsewhere and checked later by anyone holding the public key: it is a
// C2SP signed note (golang.org/x/mod/sumdb/note) whose text is a tlog
// checkpoint —
//
//	<origin>
//	<size>
//	<RFC 6962 Merkle root over the first size events' canonical bytes, base64>
//	chain <hash chain value of event size, hex>
//
// The Merkle root makes the prefix provable event by event (inclusion and
// consistency proofs are standard RFC 6962); the chain line binds it to the
// ledger's own hash chain. Unlike m/head, a signed checkpoint cannot be
// rewritten by someone who can write the data directory, so it exposes a
// truncated or rewritten tail.

// Checkpoint is the content of a signed checkpoint.
type Checkpoint struct {
	Origin string      // who keeps the log, e.g. "leaseledger.example/prod"
	Size   ledger.Seq  // number of events covered (seqs 1..Size)
	Root   []byte      // RFC 6962 Merkle tree hash over their canonical bytes
	Head   events.Hash // hash chain value of event Size
}

var hasher = rfc6962.New(crypto.SHA256)

// NewCheckpoint computes the checkpoint of l's durable head under origin.
// Sign it and keep it outside the data directory.
func NewCheckpoint(ctx context.Context, l *ledger.Ledger, origin string) (Checkpoint, error) {
	return CheckpointAt(ctx, l, origin, l.Head().Seq)
}

// CheckpointAt computes the checkpoint of l's first size events (size ≤ the
// durable head) under origin from its Merkle node index: O(log size) reads.
// The root signed is the index's, derived data: Ledger and Dir (the verify
// command) with Options.Tree check every stored node against the events.
func CheckpointAt(ctx context.Context, l *ledger.Ledger, origin string, size ledger.Seq) (Checkpoint, error) {
	if err := checkOrigin(origin); err != nil {
		return Checkpoint{}, err
	}
	root, err := l.TreeRoot(ctx, size)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	c := Checkpoint{Origin: origin, Size: size, Root: root}
	if size > 0 {
		env, err := l.Get(size)
		if err != nil {
			return Checkpoint{}, fmt.Errorf("%w: %w", ErrCheckpoint, err)
		}
		c.Head = env.Hash
	}
	return c, nil
}

func checkOrigin(origin string) error {
	if origin == "" || len(origin) > 256 || strings.ContainsAny(origin, "\n\r") {
		return fmt.Errorf("%w: the origin must be one non-empty line of at most 256 bytes", ErrCheckpoint)
	}
	return nil
}

// Text is the checkpoint's note text (the signed body).
func (c Checkpoint) Text() string {
	return fmt.Sprintf("%s\n%d\n%s\nchain %s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root), c.Head)
}

// Sign returns the signed note of c. Its error wraps ErrCheckpoint.
func (c Checkpoint) Sign(signer note.Signer) ([]byte, error) {
	b, err := note.Sign(&note.Note{Text: c.Text()}, signer)
	if err != nil {
		return nil, fmt.Errorf("%w: sign: %w", ErrCheckpoint, err)
	}
	return b, nil
}

// ParseCheckpoint opens a signed checkpoint, verifying its signature with
// verifier, and parses its text. Signatures must be in canonical base64, so
// that no changed byte of a checkpoint file still verifies.
func ParseCheckpoint(signed []byte, verifier note.Verifier) (Checkpoint, error) {
	n, err := openNote(signed, verifier)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return parseText(n.Text)
}

// openNote opens a signed note (a checkpoint, a bundle's manifest) with v
// and requires every signature in canonical base64, so that one signed
// note has one encoding. Errors start with "signature: ".
func openNote(signed []byte, v note.Verifier) (*note.Note, error) {
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	for _, s := range append(n.Sigs, n.UnverifiedSigs...) {
		b, err := base64.StdEncoding.Strict().DecodeString(s.Base64)
		if err != nil || base64.StdEncoding.EncodeToString(b) != s.Base64 {
			return nil, errors.New("signature: not canonical base64")
		}
	}
	return n, nil
}

// ParseCheckpointUnverified parses the text of a signed checkpoint without
// checking its signature: for one that is checked another way — against a
// log that holds its size (the collector, for a host it has no verifier
// key of) — and by whoever holds the key later. Errors wrap ErrCheckpoint.
func ParseCheckpointUnverified(signed []byte) (Checkpoint, error) { return parseUnverified(signed) }

// parseUnverified parses the text of a signed checkpoint without checking
// its signature (for the prover: whoever reads the proof checks it).
func parseUnverified(signed []byte) (Checkpoint, error) {
	text, _, ok := strings.Cut(string(signed), "\n\n")
	if !ok {
		return Checkpoint{}, fmt.Errorf("%w: not a signed note", ErrCheckpoint)
	}
	return parseText(text + "\n")
}

func parseText(text string) (Checkpoint, error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[3], "chain ") {
		return Checkpoint{}, fmt.Errorf("%w: text: want origin, size, root and chain lines", ErrCheckpoint)
	}
	var (
		c   Checkpoint
		err error
	)
	c.Origin = lines[0]
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: text: malformed size", ErrCheckpoint)
	}
	c.Size = ledger.Seq(size)
	if c.Root, err = base64.StdEncoding.DecodeString(lines[2]); err != nil || len(c.Root) != 32 {
		return Checkpoint{}, fmt.Errorf("%w: text: malformed root", ErrCheckpoint)
	}
	if err := c.Head.UnmarshalText([]byte(strings.TrimPrefix(lines[3], "chain "))); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: text: malformed chain hash", ErrCheckpoint)
	}
	return c, nil
}
