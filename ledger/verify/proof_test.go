package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"golang.org/x/mod/sumdb/note"
	"pgregory.net/rapid"
)

const proofOrigin = "leaseledger.test/proofs"

func appendProofEvents(t interface{ Fatal(...any) }, l *ledger.Ledger, n, batch int) {
	for i := 0; i < n; i += batch {
		ds := make([]events.Draft, min(batch, n-i))
		for j := range ds {
			ds[j] = events.Draft{Activation: fmt.Sprintf("act-%d", (i+j)%7), Session: "s1",
				Payload: &events.LeaseRevoked{Reason: "r", CallsInFlight: i + j}}
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
	}
}

// proofLedger is a 10,000-event ledger with signed checkpoints at sizes.
type proofLedger struct {
	l      *ledger.Ledger
	v      note.Verifier
	cps    map[ledger.Seq]Checkpoint
	signed map[ledger.Seq][]byte
}

var proofSizes = []ledger.Seq{1, 2, 16, 17, 1000, 4097, 9999, 10000}

func newProofLedger(t *testing.T) *proofLedger {
	t.Helper()
	s, v := testKeys(t)
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	appendProofEvents(t, l, 10000, 500)
	p := &proofLedger{l: l, v: v, cps: map[ledger.Seq]Checkpoint{}, signed: map[ledger.Seq][]byte{}}
	for _, size := range proofSizes {
		c, err := CheckpointAt(context.Background(), l, proofOrigin, size)
		if err != nil {
			t.Fatal(err)
		}
		// The index's root is the one recomputed from the events.
		root, head, err := merkleRoot(context.Background(), size, l.Scan)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(root, c.Root) || head != c.Head {
			t.Fatalf("CheckpointAt(%d) differs from the recomputed root", size)
		}
		if p.signed[size], err = c.Sign(s); err != nil {
			t.Fatal(err)
		}
		p.cps[size] = c
	}
	return p
}

// TestProofsVerify: the inclusion proof of every seq against several
// checkpoints, and every consistency pair among them, verifies.
func TestProofsVerify(t *testing.T) {
	p := newProofLedger(t)
	ctx := context.Background()
	for _, size := range []ledger.Seq{17, 4097, 10000} {
		c := p.cps[size]
		for seq := ledger.Seq(1); seq <= size; seq++ {
			hashes, err := p.l.InclusionProof(ctx, seq, size)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := p.l.GetRaw(seq)
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyInclusion(c, seq, raw, hashes); err != nil {
				t.Fatalf("seq %d in %d: %v", seq, size, err)
			}
		}
	}
	for _, a := range proofSizes {
		for _, b := range proofSizes {
			if a > b {
				continue
			}
			hashes, err := p.l.ConsistencyProof(ctx, a, b)
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyConsistency(p.cps[a], p.cps[b], hashes); err != nil {
				t.Fatalf("%d→%d: %v", a, b, err)
			}
			if a < b {
				if err := VerifyConsistency(p.cps[b], p.cps[a], hashes); !errors.Is(err, ErrProof) {
					t.Fatalf("rollback %d→%d verified: %v", b, a, err)
				}
			}
		}
	}
}

// flips calls fn with b having each of its bits flipped in turn.
func flips(b []byte, fn func(i, bit int)) {
	for i := range b {
		for bit := range 8 {
			b[i] ^= 1 << bit
			fn(i, bit)
			b[i] ^= 1 << bit
		}
	}
}

// TestProofBitFlips: every single-bit change of a proof hash, the event or
// the checkpoint makes the proof fail (sampled seqs).
func TestProofBitFlips(t *testing.T) {
	p := newProofLedger(t)
	ctx := context.Background()
	for _, tc := range []struct{ seq, size ledger.Seq }{{1, 10000}, {4097, 4097}, {9999, 10000}} {
		pf, err := ProveInclusion(ctx, p.l, p.signed[tc.size], tc.seq)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pf.Verify(p.v); err != nil {
			t.Fatalf("seq %d: %v", tc.seq, err)
		}
		c := p.cps[tc.size]
		fail := func(what string) func(i, bit int) {
			return func(i, bit int) {
				// The checkpoint is parsed once; its own bytes through Verify.
				err := VerifyInclusion(c, pf.Seq, pf.Event, pf.Hashes)
				if what == "checkpoint" {
					_, err = pf.Verify(p.v)
				}
				if err == nil {
					t.Fatalf("seq %d in %d: flipping bit %d of %s byte %d still verifies", tc.seq, tc.size, bit, what, i)
				}
			}
		}
		for _, h := range pf.Hashes {
			flips(h, fail("proof hash"))
		}
		flips(pf.Event, fail("event"))
		cp := []byte(pf.Checkpoint)
		flips(cp, func(i, bit int) {
			pf.Checkpoint = string(cp)
			fail("checkpoint")(i, bit)
		})
		pf.Checkpoint = string(cp)
		if _, err := pf.Verify(p.v); err != nil {
			t.Fatal(err)
		}
	}
	for _, pair := range [][2]ledger.Seq{{17, 10000}, {1000, 4097}} {
		pf, err := ProveConsistency(ctx, p.l, p.signed[pair[0]], p.signed[pair[1]])
		if err != nil {
			t.Fatal(err)
		}
		fail := func(i, bit int) {
			if err := VerifyConsistency(p.cps[pair[0]], p.cps[pair[1]], pf.Hashes); err == nil {
				t.Fatalf("%d→%d: flipping bit %d of hash byte %d still verifies", pair[0], pair[1], bit, i)
			}
		}
		for _, h := range pf.Hashes {
			flips(h, fail)
		}
		failCP := func(i, bit int) {
			if _, _, err := pf.Verify(p.v); err == nil {
				t.Fatalf("%d→%d: flipping bit %d of byte %d still verifies", pair[0], pair[1], bit, i)
			}
		}
		for _, s := range []*string{&pf.Old, &pf.New} {
			b := []byte(*s)
			orig := *s
			flips(b, func(i, bit int) { *s = string(b); failCP(i, bit) })
			*s = orig
		}
		if _, _, err := pf.Verify(p.v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProofFileRoundTrip: a proof file survives JSON and names its seq
// when it fails.
func TestProofFileRoundTrip(t *testing.T) {
	p := newProofLedger(t)
	pf, err := ProveInclusion(context.Background(), p.l, p.signed[1000], 777)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(pf)
	if err != nil {
		t.Fatal(err)
	}
	var back InclusionProof
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if c, err := back.Verify(p.v); err != nil || c.Size != 1000 {
		t.Fatalf("round trip: size %d, %v", c.Size, err)
	}
	back.Hashes[0][3] ^= 0x10
	_, err = back.Verify(p.v)
	var ve *Error
	if !errors.Is(err, ErrProof) || !errors.As(err, &ve) || ve.Seq != 777 {
		t.Fatalf("a changed hash: %v, want ErrProof at seq 777", err)
	}
	// A checkpoint the log does not hold is refused by the prover.
	other := p.cps[1000]
	other.Root = bytes.Repeat([]byte{1}, 32)
	s, _ := testKeys(t)
	signed, _ := other.Sign(s)
	if _, err := ProveInclusion(context.Background(), p.l, signed, 3); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("proof against a foreign checkpoint: %v", err)
	}
}

// TestTreeRootProperty: TreeRoot(size) equals the root recomputed from the
// events for random append batches (up to 256 and beyond) and reopens.
func TestTreeRootProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		open := func() *ledger.Ledger {
			l, err := ledger.Open(ledger.Options{Dir: dir})
			if err != nil {
				rt.Fatal(err)
			}
			return l
		}
		l := open()
		defer func() { l.Close() }()
		for range rapid.IntRange(1, 4).Draw(rt, "rounds") {
			n := rapid.SampledFrom([]int{1, 3, 15, 16, 17, 100, 256, 300}).Draw(rt, "n")
			batch := rapid.SampledFrom([]int{5, 64, 256}).Draw(rt, "batch")
			appendProofEvents(rt, l, n, batch)
			if rapid.Bool().Draw(rt, "reopen") {
				l.Close()
				l = open()
			}
			head := l.Head().Seq
			for _, size := range []ledger.Seq{head, head / 2, head - min(head, 1), ledger.Seq(rapid.Uint64Range(0, uint64(head)).Draw(rt, "size"))} {
				got, err := l.TreeRoot(context.Background(), size)
				if err != nil {
					rt.Fatal(err)
				}
				want, _, err := merkleRoot(context.Background(), size, l.Scan)
				if err != nil {
					rt.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					rt.Fatalf("TreeRoot(%d) at head %d differs from the recomputed root", size, head)
				}
			}
		}
	})
}
