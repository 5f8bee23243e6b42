package witness_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/leaseledger/leaseledger/ledger/witness"
	"go.uber.org/goleak"
	"golang.org/x/mod/sumdb/note"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const origin = "leaseledger.test/witness"

func keys(t *testing.T) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "test")
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func openLedger(t *testing.T, dir string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appendN appends n events whose reasons carry tag (different tags make
// different histories).
func appendN(t *testing.T, l *ledger.Ledger, n int, tag string) {
	t.Helper()
	for i := range n {
		if _, err := l.Append(context.Background(), events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: fmt.Sprintf("%s_%d", tag, i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

func signed(t *testing.T, l *ledger.Ledger, s note.Signer, size ledger.Seq) []byte {
	t.Helper()
	c, err := verify.CheckpointAt(context.Background(), l, origin, size)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// flipper hands out l's consistency proofs with one bit flipped.
type flipper struct {
	l        *ledger.Ledger
	hash, at int
}

func (f flipper) ConsistencyProof(ctx context.Context, from, to ledger.Seq) ([][]byte, error) {
	h, err := f.l.ConsistencyProof(ctx, from, to)
	if err != nil || len(h) == 0 {
		return h, err
	}
	h[f.hash%len(h)][f.at/8%32] ^= 1 << (f.at % 8)
	return h, nil
}

type failing struct{}

func (failing) ConsistencyProof(context.Context, ledger.Seq, ledger.Seq) ([][]byte, error) {
	return nil, errors.New("unreachable")
}

func observe(t *testing.T, w *witness.Witness, cp []byte, p witness.Prover, want witness.Outcome) {
	t.Helper()
	got, err := w.Observe(context.Background(), cp, p)
	if err != nil || got != want {
		t.Fatalf("observe: %v %v, want %v", got, err, want)
	}
}

func refused(t *testing.T, w *witness.Witness, state string, cp []byte, p witness.Prover, want error) *witness.Error {
	t.Helper()
	before, _ := os.ReadFile(state)
	_, err := w.Observe(context.Background(), cp, p)
	var we *witness.Error
	if !errors.Is(err, want) || !errors.As(err, &we) {
		t.Fatalf("observe: %v, want %v", err, want)
	}
	if after, _ := os.ReadFile(state); !bytes.Equal(before, after) {
		t.Fatal("a refused checkpoint changed the state file")
	}
	return we
}

// The witness accepts a growing log checkpoint after checkpoint, keeps
// the last one on disk, and a reopened witness starts from it.
func TestWitnessFollows(t *testing.T) {
	s, v := keys(t)
	l := openLedger(t, t.TempDir())
	defer l.Close()
	state := filepath.Join(t.TempDir(), "witness.state")
	w, err := witness.Open(state, v)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3, "a")
	observe(t, w, signed(t, l, s, 3), l, witness.First)
	for _, n := range []int{1, 15, 40} {
		appendN(t, l, n, "a")
		observe(t, w, signed(t, l, s, l.Head().Seq), l, witness.Advanced)
	}
	observe(t, w, signed(t, l, s, l.Head().Seq), l, witness.Same)
	w2, err := witness.Open(state, v)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := w2.Latest(); !ok || c.Size != l.Head().Seq {
		t.Fatalf("reopened state: %+v %v, want size %d", c, ok, l.Head().Seq)
	}
	refused(t, w2, state, signed(t, l, s, 10), l, witness.ErrRollback)
}

// Every single-bit change to a consistency proof is refused as a fork;
// the state stays as it was.
func TestWitnessRefusesFlippedProof(t *testing.T) {
	s, v := keys(t)
	l := openLedger(t, t.TempDir())
	defer l.Close()
	state := filepath.Join(t.TempDir(), "witness.state")
	w, err := witness.Open(state, v)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 21, "a")
	observe(t, w, signed(t, l, s, 21), l, witness.First)
	appendN(t, l, 30, "a")
	next := signed(t, l, s, 51)
	proof, err := l.ConsistencyProof(context.Background(), 21, 51)
	if err != nil || len(proof) == 0 {
		t.Fatal(len(proof), err)
	}
	for h := range proof {
		for bit := 0; bit < 256; bit += 7 {
			refused(t, w, state, next, flipper{l: l, hash: h, at: bit}, witness.ErrFork)
		}
	}
	refused(t, w, state, next, failing{}, witness.ErrProver)
	observe(t, w, next, l, witness.Advanced)
}

// A log rewritten from an earlier seq (ledgertest.Fork) and grown again
// with other events is a fork at the same size and at a larger one, a
// rollback at a smaller one — and a witness reopened on its state file
// detects it again.
func TestWitnessDetectsForkAndRollback(t *testing.T) {
	s, v := keys(t)
	dir := t.TempDir()
	l := openLedger(t, dir)
	appendN(t, l, 40, "a")
	state := filepath.Join(t.TempDir(), "witness.state")
	w, err := witness.Open(state, v)
	if err != nil {
		t.Fatal(err)
	}
	observe(t, w, signed(t, l, s, 40), l, witness.First)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ledgertest.Fork(t, dir, 30)
	l = openLedger(t, dir)
	defer l.Close()
	refused(t, w, state, signed(t, l, s, 30), l, witness.ErrRollback)
	appendN(t, l, 10, "b")
	we := refused(t, w, state, signed(t, l, s, 40), l, witness.ErrFork)
	if we.Old == nil || we.New == nil || !strings.Contains(we.Error(), "accepted size 40 root ") || !strings.Contains(we.Error(), "observed size 40 root ") {
		t.Fatalf("the fork's report does not show both checkpoints: %v", we)
	}
	appendN(t, l, 5, "b")
	refused(t, w, state, signed(t, l, s, 45), l, witness.ErrFork)
	w2, err := witness.Open(state, v)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, w2, state, signed(t, l, s, 45), l, witness.ErrFork)
	refused(t, w2, state, signed(t, l, s, 35), l, witness.ErrRollback)
}

// A checkpoint under another key or origin is not this log's statement.
func TestWitnessRefusesForeignCheckpoints(t *testing.T) {
	s, v := keys(t)
	other, _ := keys(t)
	l := openLedger(t, t.TempDir())
	defer l.Close()
	appendN(t, l, 5, "a")
	state := filepath.Join(t.TempDir(), "witness.state")
	w, err := witness.Open(state, v)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, w, state, signed(t, l, other, 5), l, witness.ErrCheckpoint)
	observe(t, w, signed(t, l, s, 5), l, witness.First)
	c, err := verify.CheckpointAt(context.Background(), l, "someone.else", 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, w, state, b, l, witness.ErrCheckpoint)
	if err := os.WriteFile(state, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := witness.Open(state, v); !errors.Is(err, witness.ErrState) {
		t.Fatalf("open a garbage state: %v", err)
	}
}
