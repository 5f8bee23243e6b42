package events

import (
	"bufio"
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestDecodeSealedTwin: DecodeSealed (the Decoder and the fields read
// where the canonical layout puts them) accepts exactly what Decode and
// CheckHash accept, and yields the same envelope: over every example kind
// sealed into a chain, and over random damage to those bytes (a byte
// changed, dropped or doubled, a space inserted). A mirror ledger's Import
// relies on it.
func TestDecodeSealedTwin(t *testing.T) {
	raws := sealedExamples(t)
	if len(raws) < len(InputKinds()) {
		t.Fatalf("%d example events for %d input kinds", len(raws), len(InputKinds()))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var d Decoder
	accepted, refused := 0, 0
	check := func(raw []byte) {
		t.Helper()
		if twinAgree(t, &d, raw) {
			accepted++
		} else {
			refused++
		}
	}
	for _, raw := range raws {
		check(raw)
		for range 300 {
			m := bytes.Clone(raw)
			i := rng.IntN(len(m))
			switch rng.IntN(4) {
			case 0:
				m[i] = "0aZ\"{}:,. \\-1f"[rng.IntN(14)]
			case 1:
				m = append(m[:i], m[i+1:]...)
			case 2:
				m = append(m[:i+1], m[i:]...)
			default:
				m = append(m[:i], append([]byte{' '}, m[i:]...)...)
			}
			check(m)
		}
	}
	if accepted < len(raws) || refused == 0 {
		t.Fatalf("accepted %d, refused %d: the twin compared too little", accepted, refused)
	}
}

// FuzzDecodeSealedTwin is TestDecodeSealedTwin over fuzzed bytes.
func FuzzDecodeSealedTwin(f *testing.F) {
	for _, raw := range sealedExamples(f) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var d Decoder
		twinAgree(t, &d, raw)
	})
}

// twinAgree fails t unless DecodeSealed and decodeSealedStrict both
// refuse raw or both accept it with the same envelope; it reports
// acceptance.
func twinAgree(t testing.TB, d *Decoder, raw []byte) bool {
	t.Helper()
	fast, ferr := d.DecodeSealed(raw)
	slow, serr := decodeSealedStrict(raw)
	switch {
	case (ferr == nil) != (serr == nil):
		t.Fatalf("%s\nfast: %v, strict: %v", raw, ferr, serr)
	case ferr != nil:
		return false
	case !bytes.Equal(fast.AppendCanonical(nil, true), slow.AppendCanonical(nil, true)) || !bytes.Equal(fast.Data, slow.Data) ||
		!fast.Time.Equal(slow.Time) || fast.Hash != slow.Hash:
		t.Fatalf("%s\nfast %+v\nstrict %+v", raw, fast, slow)
	}
	return true
}

// sealedExamples seals every line of examples/events.jsonl into a chain.
func sealedExamples(t testing.TB) [][]byte {
	t.Helper()
	f, err := os.Open("../examples/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var raws [][]byte
	var prev Hash
	tm := time.Date(2026, 12, 1, 6, 0, 0, 123456789, time.UTC)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		d, err := ParseInput(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		p, err := Prepare(d)
		if err != nil {
			t.Fatal(err)
		}
		env, raw := Seal(p, Seq(len(raws)+1), ulid.Make(), tm, prev)
		prev = env.Hash
		raws = append(raws, raw)
	}
	return raws
}

// TestDecodeSealedHashMismatch: bytes that decode but whose hash is not
// their own are ErrHashMismatch, not ErrInvalid, from both paths — a
// mirror tells a forged hash from malformed bytes.
func TestDecodeSealedHashMismatch(t *testing.T) {
	raw := sealedExamples(t)[0]
	bad := bytes.Clone(raw)
	i := len(bad) - 3 // the hash's last hex digit
	bad[i] = "01"[btoi(bad[i] == '0')]
	var d Decoder
	_, ferr := d.DecodeSealed(bad)
	_, serr := decodeSealedStrict(bad)
	if !errors.Is(ferr, ErrHashMismatch) || !errors.Is(serr, ErrHashMismatch) || errors.Is(ferr, ErrInvalid) {
		t.Fatalf("fast %v, strict %v: want ErrHashMismatch", ferr, serr)
	}
	if _, err := d.DecodeSealed(raw); err != nil {
		t.Fatalf("undamaged: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
