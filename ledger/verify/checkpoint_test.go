package verify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/transparency-dev/merkle/compact"
	"golang.org/x/mod/sumdb/note"
)

func testKeys(t *testing.T) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "leaseledger-test")
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

// checkpointFixture appends n events, takes a signed checkpoint of them,
// closes the ledger and returns the raw DB and the parsed checkpoint.
func checkpointFixture(t *testing.T, n int) (*pebble.DB, Checkpoint) {
	t.Helper()
	signer, verifier := testKeys(t)
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := l.Append(context.Background(), events.Draft{Activation: "act-1",
			Payload: &events.LeaseRevoked{Reason: "r", CallsInFlight: i}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewCheckpoint(context.Background(), l, "leaseledger.test/log")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := c.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseCheckpoint(signed, verifier)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Size != ledger.Seq(n) || parsed.Head != l.Head().Hash || parsed.Text() != c.Text() {
		t.Fatalf("parsed checkpoint %+v, head %+v", parsed, l.Head())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: silent{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, parsed
}

func TestCheckpointVerifies(t *testing.T) {
	db, c := checkpointFixture(t, 20)
	if _, err := verifyDB(context.Background(), db, Options{Checkpoints: []Checkpoint{c}}); err != nil {
		t.Fatal(err)
	}
	// A checkpoint of the empty log verifies against any log.
	empty := Checkpoint{Origin: "x", Root: hasher.EmptyRoot()}
	if _, err := verifyDB(context.Background(), db, Options{Checkpoints: []Checkpoint{empty}}); err != nil {
		t.Fatal(err)
	}
}

// Someone who can write the data directory rewrites event 7 and re-seals
// every later event so that the hash chain, m/head, the indexes and the
// Merkle node index are consistent again: plain verify passes, the signed
// checkpoint does not.
func TestCheckpointCatchesResealedChain(t *testing.T) {
	db, c := checkpointFixture(t, 20)
	tree := (&compact.RangeFactory{Hash: hasher.HashChildren}).NewEmptyRange(0)
	var prev events.Hash
	for seq := ledger.Seq(1); seq <= 20; seq++ {
		env, err := events.Decode(mustGet(t, db, keys.Event(seq)))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := env.Payload()
		if seq == 7 {
			p = &events.LeaseRevoked{Reason: "forged"}
		}
		prep, err := events.Prepare(events.Draft{Activation: env.Activation, Session: env.Session, Server: env.Server, Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		sealed, raw := events.Seal(prep, seq, env.ID, env.Time, prev)
		prev = sealed.Hash
		_ = db.Set(keys.Event(seq), raw, pebble.NoSync)
		_ = tree.Append(hasher.HashLeaf(raw), func(id compact.NodeID, h []byte) {
			if id.Level >= keys.TreeStoredLevel {
				_ = db.Set(keys.TreeNode(id.Level, id.Index), h, pebble.NoSync)
			}
		})
	}
	_ = db.Set([]byte(keys.Head), keys.EncodeHead(20, prev), pebble.NoSync)
	if _, err := verifyDB(context.Background(), db, Options{}); err != nil {
		t.Fatalf("the re-sealed chain should be self-consistent: %v", err)
	}
	_, err := verifyDB(context.Background(), db, Options{Checkpoints: []Checkpoint{c}})
	var ve *Error
	if !errors.As(err, &ve) || ve.Fault != FaultCheckpoint || ve.Seq != 20 {
		t.Fatalf("verify with the checkpoint: %v", err)
	}
}

func TestCheckpointCatchesTruncation(t *testing.T) {
	db, c := checkpointFixture(t, 10)
	env9, _ := events.Decode(mustGet(t, db, keys.Event(9)))
	env10, _ := events.Decode(mustGet(t, db, keys.Event(10)))
	for _, k := range keys.For(&env10) {
		_ = db.Delete(k, pebble.NoSync)
	}
	_ = db.Set([]byte(keys.Head), keys.EncodeHead(9, env9.Hash), pebble.NoSync)
	_, err := verifyDB(context.Background(), db, Options{Checkpoints: []Checkpoint{c}})
	var ve *Error
	if !errors.As(err, &ve) || ve.Fault != FaultCheckpoint || ve.Seq != 10 {
		t.Fatalf("verify of a truncated log with the checkpoint: %v", err)
	}
}

func TestCheckpointSignatureRequired(t *testing.T) {
	signer, _ := testKeys(t)
	_, otherVerifier := testKeys(t)
	c := Checkpoint{Origin: "o", Size: 0, Root: hasher.EmptyRoot()}
	signed, err := c.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCheckpoint(signed, otherVerifier); err == nil {
		t.Fatal("a checkpoint signed by another key was accepted")
	}
	tampered := append([]byte("x"), signed...)
	if _, err := ParseCheckpoint(tampered, otherVerifier); err == nil {
		t.Fatal("a tampered checkpoint was accepted")
	}
}

// One helper opens every signed note (checkpoints, bundle manifests): a
// signature that verifies but is not in canonical base64 (padding bits
// set) is refused, so a signed note has one encoding.
func TestOpenNoteCanonical(t *testing.T) {
	signer, verifier := testKeys(t)
	signed, err := note.Sign(&note.Note{Text: "leaseledger.test/log\n1\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\nchain " + strings.Repeat("00", 32) + "\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openNote(signed, verifier); err != nil {
		t.Fatalf("canonical note: %v", err)
	}
	// The signature (4+64 bytes) ends in "X=": X carries 2 padding bits.
	i := bytes.LastIndexByte(signed, '=') - 1
	bad := bytes.Clone(signed)
	bad[i] = base64Alphabet[strings.IndexByte(base64Alphabet, bad[i])^1]
	if _, err := note.Open(bad, note.VerifierList(verifier)); err != nil {
		t.Fatalf("the lax decoder should still verify it: %v", err)
	}
	if _, err := openNote(bad, verifier); err == nil || !strings.Contains(err.Error(), "not canonical base64") {
		t.Fatalf("non-canonical signature: %v", err)
	}
	if _, err := ParseCheckpoint(bad, verifier); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("ParseCheckpoint: %v, want ErrCheckpoint", err)
	}
}

const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
