// Package witness owns the checkpoint witness: the rules by which a
// follower of a log's signed checkpoints accepts the next one, and the
// on-disk state that keeps the last one it accepted across its restarts.
//
// A checkpoint (package ledger/verify) is accepted when its signature
// verifies, its origin is that of the state, and it extends what the
// state holds: the same size with the same root and chain hash, or a
// larger size with a consistency proof (from the stored size to its size)
// that verifies. A smaller size is a rollback; the same size with another
// root or chain hash, or a larger one whose proof fails, is a fork. Either
// leaves the state unchanged, so a witness restarted on it detects the
// same thing again.
//
// The package speaks no NATS: the proofs come from a Prover (the
// `leaseledger witness` command asks serve's proof API, package control).
package witness

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

// Errors callers branch on (errors.Is); each comes inside an *Error.
var (
	// ErrFork: the log showed a history that does not extend the one the
	// witness accepted (same size, other root or chain hash; or a larger
	// size whose consistency proof does not verify).
	ErrFork = errors.New("witness: fork")
	// ErrRollback: the log showed fewer events than the witness accepted.
	ErrRollback = errors.New("witness: rollback")
	// ErrCheckpoint: a checkpoint that is not a statement of this log
	// (bad signature, malformed, another origin). Nothing was accepted.
	ErrCheckpoint = errors.New("witness: checkpoint refused")
	// ErrProver: no consistency proof could be had (the prover failed or
	// refused); nothing was accepted, a later checkpoint tries again.
	ErrProver = errors.New("witness: no consistency proof")
	// ErrState: the state file cannot be read, parsed or written.
	ErrState = errors.New("witness: state")
)

// Error records a failed operation ("open", "observe", "store") with the
// checkpoints involved: Old is the accepted one (nil when none), New the
// one observed (nil when it did not parse).
type Error struct {
	Op       string
	Old, New *verify.Checkpoint
	Err      error
}

// Error says what was seen: both sizes and roots when there are two.
func (e *Error) Error() string {
	s := "witness " + e.Op + ": " + e.Err.Error()
	if e.Old != nil {
		s += "; accepted " + describe(*e.Old)
	}
	if e.New != nil {
		s += "; observed " + describe(*e.New)
	}
	return s
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

func describe(c verify.Checkpoint) string {
	return fmt.Sprintf("size %d root %s chain %s", c.Size, base64.StdEncoding.EncodeToString(c.Root), c.Head)
}

// Prover supplies consistency proofs: the RFC 6962 hashes proving that the
// log's tree of size from is a prefix of its tree of size to.
type Prover interface {
	ConsistencyProof(ctx context.Context, from, to ledger.Seq) ([][]byte, error)
}

// Outcome says what Observe did with an accepted checkpoint.
type Outcome int

const (
	// First: the state was empty; the checkpoint is stored (trusted on
	// first use: nothing earlier to check it against).
	First Outcome = iota + 1
	// Same: the checkpoint equals the stored one; nothing changed.
	Same
	// Advanced: a larger checkpoint whose consistency proof verified; it
	// replaced the stored one.
	Advanced
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case First:
		return "first"
	case Same:
		return "same"
	case Advanced:
		return "advanced"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Witness holds the last accepted checkpoint of one log and its state
// file. It is not safe for concurrent use.
type Witness struct {
	path   string
	v      note.Verifier
	latest *verify.Checkpoint // nil: none accepted yet
}

// Open reads the state file path (a signed checkpoint, verified with v);
// a missing file is an empty state, written at the first accepted
// checkpoint. Its error wraps ErrState.
func Open(path string, v note.Verifier) (*Witness, error) {
	w := &Witness{path: path, v: v}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return nil, &Error{Op: "open", Err: fmt.Errorf("%w: %w", ErrState, err)}
	}
	c, err := verify.ParseCheckpoint(b, v)
	if err != nil {
		return nil, &Error{Op: "open", Err: fmt.Errorf("%w: %s holds no checkpoint of this key: %w", ErrState, path, err)}
	}
	w.latest = &c
	return w, nil
}

// Latest returns the last accepted checkpoint (false when none).
func (w *Witness) Latest() (verify.Checkpoint, bool) {
	if w.latest == nil {
		return verify.Checkpoint{}, false
	}
	return *w.latest, true
}

// Observe checks the signed checkpoint against the accepted one (asking p
// for a consistency proof when it is larger) and stores it when it is
// accepted. Its errors are *Error wrapping ErrFork, ErrRollback,
// ErrCheckpoint, ErrProver or ErrState; on any error the state is unchanged.
func (w *Witness) Observe(ctx context.Context, signed []byte, p Prover) (Outcome, error) {
	c, err := verify.ParseCheckpoint(signed, w.v)
	if err != nil {
		return 0, &Error{Op: "observe", Old: w.latest, Err: fmt.Errorf("%w: %w", ErrCheckpoint, err)}
	}
	fail := func(err error) (Outcome, error) { return 0, &Error{Op: "observe", Old: w.latest, New: &c, Err: err} }
	old := w.latest
	switch {
	case old == nil:
		if err := w.store(signed, c); err != nil {
			return fail(err)
		}
		return First, nil
	case c.Origin != old.Origin:
		return fail(fmt.Errorf("%w: origin %q, the state's is %q", ErrCheckpoint, c.Origin, old.Origin))
	case c.Size < old.Size:
		return fail(ErrRollback)
	case c.Size == old.Size:
		if string(c.Root) != string(old.Root) || c.Head != old.Head {
			return fail(ErrFork)
		}
		return Same, nil
	}
	if old.Size > 0 { // the empty tree is a prefix of every tree
		hashes, err := p.ConsistencyProof(ctx, old.Size, c.Size)
		if err != nil {
			return fail(fmt.Errorf("%w: %w", ErrProver, err))
		}
		if err := verify.VerifyConsistency(*old, c, hashes); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrFork, err))
		}
	}
	if err := w.store(signed, c); err != nil {
		return fail(err)
	}
	return Advanced, nil
}

// store replaces the state file atomically (a temporary file written and
// synced, renamed over it, the directory synced): a crash leaves either
// the old state or the new one, never a mix.
func (w *Witness) store(signed []byte, c verify.Checkpoint) error {
	dir := filepath.Dir(w.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(w.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	tmp := f.Name()
	_, err = f.Write(signed)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, w.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	w.latest = &c
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
