package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// TestDecodeProofStrict: the canonical bytes of a proof (with or without
// one trailing newline) decode and verify; the same proof with a key in
// another case, a base64 hash with non-zero padding bits, extra spacing or
// two trailing newlines is refused with ErrProofFile.
func TestDecodeProofStrict(t *testing.T) {
	p := newProofLedger(t)
	ctx := context.Background()
	incl, err := ProveInclusion(ctx, p.l, p.signed[1000], 777)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := ProveConsistency(ctx, p.l, p.signed[17], p.signed[1000])
	if err != nil {
		t.Fatal(err)
	}
	ib, _ := json.Marshal(incl)
	cb, _ := json.Marshal(cons)
	for _, b := range [][]byte{ib, append(ib, '\n')} {
		got, err := DecodeInclusionProof(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := got.Verify(p.v); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range [][]byte{cb, append(cb, '\n')} {
		got, err := DecodeConsistencyProof(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := got.Verify(p.v); err != nil {
			t.Fatal(err)
		}
	}
	// A 32-byte hash is 44 base64 characters ending in "=": the last
	// character before it carries 2 padding bits.
	padding := func(b []byte) []byte {
		i := bytes.Index(b, []byte(`"hashes":["`)) + len(`"hashes":["`) + 42
		c := append([]byte(nil), b...)
		c[i] ^= 1 // 'A'..: the lowest bit of the sextet is a padding bit
		return c
	}
	changed := map[string][]byte{
		"key case":       bytes.Replace(ib, []byte(`"seq"`), []byte(`"Seq"`), 1),
		"padding bits":   padding(ib),
		"spacing":        bytes.Replace(ib, []byte(`"seq":`), []byte(`"seq": `), 1),
		"two newlines":   append(append([]byte(nil), ib...), '\n', '\n'),
		"unknown field":  bytes.Replace(ib, []byte(`{`), []byte(`{"x":1,`), 1),
		"trailing bytes": append(append([]byte(nil), ib...), []byte("{}")...),
	}
	for name, b := range changed {
		if bytes.Equal(b, ib) {
			t.Fatalf("%s: nothing changed", name)
		}
		if _, err := DecodeInclusionProof(b); !errors.Is(err, ErrProofFile) {
			t.Errorf("%s: %v, want ErrProofFile", name, err)
		}
	}
	if _, err := DecodeConsistencyProof(padding(cb)); !errors.Is(err, ErrProofFile) {
		t.Errorf("consistency padding bits: %v, want ErrProofFile", err)
	}
}
