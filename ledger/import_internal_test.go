package ledger

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/oklog/ulid/v2"
)

// TestImportRecordTwin: importRecord (events.Decoder and the fields sliced
// from the bytes) accepts exactly what strictRecord (events.Decode and
// CheckHash) accepts, and yields the same envelope: over every example
// kind sealed into a chain, and over random damage to those bytes (a byte
// changed, dropped or doubled, a space inserted).
func TestImportRecordTwin(t *testing.T) {
	raws := sealedExamples(t)
	if len(raws) < len(events.InputKinds()) {
		t.Fatalf("%d example events for %d input kinds", len(raws), len(events.InputKinds()))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var d events.Decoder
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

// FuzzImportRecordTwin is TestImportRecordTwin over fuzzed bytes.
func FuzzImportRecordTwin(f *testing.F) {
	for _, raw := range sealedExamples(f) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var d events.Decoder
		twinAgree(t, &d, raw)
	})
}

// twinAgree fails t unless importRecord and strictRecord both refuse raw
// or both accept it with the same envelope; it reports acceptance.
func twinAgree(t testing.TB, d *events.Decoder, raw []byte) bool {
	t.Helper()
	fast, ferr := importRecord(d, raw)
	slow, serr := strictRecord(raw)
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
	var prev events.Hash
	tm := time.Date(2026, 12, 1, 6, 0, 0, 123456789, time.UTC)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		d, err := events.ParseInput(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		p, err := events.Prepare(d)
		if err != nil {
			t.Fatal(err)
		}
		env, raw := events.Seal(p, events.Seq(len(raws)+1), ulid.Make(), tm, prev)
		prev = env.Hash
		raws = append(raws, raw)
	}
	return raws
}
