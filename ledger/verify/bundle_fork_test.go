package verify_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

const bundleOrigin = "leaseledger.test/bundle"

// signedCheckpoint signs the checkpoint of l's current head.
func signedCheckpoint(t testing.TB, l *ledger.Ledger, s note.Signer) ([]byte, verify.Checkpoint) {
	t.Helper()
	c, err := verify.NewCheckpoint(context.Background(), l, bundleOrigin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

// extends opens bundle b and checks that it extends old.
func extends(b []byte, v note.Verifier, old verify.Checkpoint) error {
	br, err := verify.NewBundleReader(bytes.NewReader(b), v)
	if err != nil {
		return err
	}
	if err := br.Extends(old); err != nil {
		return err
	}
	for {
		if _, _, err := br.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// A bundle tied to a checkpoint the auditor trusts (--consistent-with)
// proves that its history extends it; a rewritten and re-sealed tail with
// a consistent m/head, signed with the same key, cannot be exported with
// that proof, and a bundle without it or with a forged one fails Extends.
func TestBundleConsistentWith(t *testing.T) {
	l, dir := bundleLedger(t)
	s, v := bundleKeys(t, "bundle-test")
	oldSigned, old := signedCheckpoint(t, l, s)
	interleave(t, l, map[string]int{"act-d": 3}, "act-d")
	head := l.Head().Seq

	// Honest: the log grew, the bundle proves it extends old.
	honest, rep := writeBundleWith(t, l, s, verify.BundleSelector{From: 10, To: head, ConsistentWith: [][]byte{oldSigned}})
	if err := extends(honest, v, old); err != nil {
		t.Fatalf("honest bundle: %v", err)
	}
	// The same checkpoint needs no proof; a bundle without the proof is
	// not proven to extend an older one.
	if err := extends(honest, v, rep.Checkpoint); err != nil {
		t.Fatalf("its own checkpoint: %v", err)
	}
	plain, _ := writeBundle(t, l, s, verify.BundleSelector{From: 10, To: head})
	wantFork(t, "no proof", extends(plain, v, old), old.Size)

	// A forged proof: one hash changed, re-encoded canonically.
	var h testHeader
	mustJSON(t, lines(honest)[0], &h)
	if len(h.Consistency) != 1 || len(h.Consistency[0].Proof) == 0 {
		t.Fatalf("header consistency: %+v", h.Consistency)
	}
	h.Consistency[0].Proof[0] = base64.StdEncoding.EncodeToString(make([]byte, 32))
	forged := join(append([][]byte{mustMarshal(t, h)}, lines(honest)[1:]...))
	wantFork(t, "forged proof", extends(forged, v, old), old.Size)
	// A proof dropped from the header.
	h.Consistency = nil
	dropped := join(append([][]byte{mustMarshal(t, h)}, lines(honest)[1:]...))
	wantFork(t, "proof dropped", extends(dropped, v, old), old.Size)

	// Fork: cut below old's size, append other events (m/head consistent),
	// same key.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ledgertest.Fork(t, dir, old.Size-5)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	interleave(t, l, map[string]int{"act-e": 3}, "act-e")
	var buf bytes.Buffer
	_, err = verify.WriteBundle(context.Background(), &buf, l, s, bundleOrigin, verify.BundleSelector{From: 1, To: 3, ConsistentWith: [][]byte{oldSigned}})
	if !errors.Is(err, verify.ErrBundle) || !(errors.Is(err, verify.ErrCheckpoint) || errors.Is(err, verify.ErrProof)) || !strings.Contains(err.Error(), "fork") {
		t.Fatalf("export of the forked log consistent with the original checkpoint: %v, want ErrBundle with ErrCheckpoint or ErrProof naming a fork", err)
	}
	// The forked bundle verifies alone (the same key signed it), but not
	// against the trusted checkpoint — even with a proof from a checkpoint
	// of its own history of the same size.
	forkedSigned, _ := signedCheckpoint(t, l, s)
	interleave(t, l, map[string]int{"act-f": 1}, "act-f")
	forked, _ := writeBundleWith(t, l, s, verify.BundleSelector{From: 1, To: 3, ConsistentWith: [][]byte{forkedSigned}})
	if _, err := verify.Bundle(bytes.NewReader(forked), v); err != nil {
		t.Fatalf("forked bundle alone: %v", err)
	}
	wantFork(t, "forked bundle", extends(forked, v, old), old.Size)
}

func wantFork(t testing.TB, what string, err error, size ledger.Seq) {
	t.Helper()
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Fault != verify.FaultFork || !errors.Is(err, verify.ErrVerify) ||
		!strings.Contains(err.Error(), "not an extension of the checkpoint of size "+itoa(size)) {
		t.Fatalf("%s: %v, want FaultFork naming size %d", what, err, size)
	}
}

func writeBundleWith(t testing.TB, l *ledger.Ledger, s note.Signer, sel verify.BundleSelector) ([]byte, verify.BundleReport) {
	t.Helper()
	return writeBundle(t, l, s, sel)
}

// Every single-bit change of the header and of an event line fails, and so
// do spellings the exporter never writes: trailing bytes after the header,
// a duplicated or differently cased key, a missing final newline.
func TestBundleEveryBitCounts(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	s, v := bundleKeys(t, "bundle-test")
	oldSigned, _ := signedCheckpoint(t, l, s)
	interleave(t, l, map[string]int{"act-d": 1}, "act-d")
	b, _ := writeBundle(t, l, s, verify.BundleSelector{Activation: "act-b", ConsistentWith: [][]byte{oldSigned}})
	if _, err := verify.Bundle(bytes.NewReader(b), v); err != nil {
		t.Fatal(err)
	}
	ls := lines(b)
	for li := range 2 {
		for pos := range ls[li] {
			for bit := range 8 {
				c := bytes.Clone(ls[li])
				c[pos] ^= 1 << bit
				mod := append(append(append([][]byte{}, ls[:li]...), c), ls[li+1:]...)
				if _, err := verify.Bundle(bytes.NewReader(join(mod)), v); err == nil {
					t.Fatalf("line %d byte %d bit %d (%q→%q) passes", li, pos, bit, ls[li][pos], c[pos])
				}
			}
		}
	}
	for name, mod := range map[string][]byte{
		"header trailing bytes": join(append([][]byte{append(bytes.Clone(ls[0]), ` {"x":1}`...)}, ls[1:]...)),
		"header key cased":      join(append([][]byte{bytes.Replace(ls[0], []byte(`"format"`), []byte(`"Format"`), 1)}, ls[1:]...)),
		"header key twice":      join(append([][]byte{bytes.Replace(ls[0], []byte(`{"format":`), []byte(`{"format":"x","format":`), 1)}, ls[1:]...)),
		"event key twice":       join(append(append([][]byte{ls[0]}, bytes.Replace(ls[1], []byte(`{"seq":`), []byte(`{"seq":999,"seq":`), 1)), ls[2:]...)),
		"event key cased":       join(append(append([][]byte{ls[0]}, bytes.Replace(ls[1], []byte(`"proof"`), []byte(`"Proof"`), 1)), ls[2:]...)),
		"no final newline":      bytes.TrimSuffix(b, []byte("\n")),
	} {
		if _, err := verify.Bundle(bytes.NewReader(mod), v); err == nil {
			t.Errorf("%s passes", name)
		}
	}
}

func itoa(n ledger.Seq) string { return strconv.FormatUint(uint64(n), 10) }
