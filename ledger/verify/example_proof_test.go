package verify_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

// ExampleInclusionProof makes signed checkpoints at two sizes, an inclusion
// proof of one event and a consistency proof between them, and checks both
// with only the verifier key.
func ExampleInclusionProof() {
	dir, _ := os.MkdirTemp("", "proof-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for i := range 5 {
		if _, err := l.Append(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "r", CallsInFlight: i}}); err != nil {
			panic(err)
		}
	}
	skey, vkey, _ := note.GenerateKey(rand.Reader, "example")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	sign := func(size ledger.Seq) []byte {
		c, err := verify.CheckpointAt(ctx, l, "example.org/log", size)
		if err != nil {
			panic(err)
		}
		signed, err := c.Sign(signer)
		if err != nil {
			panic(err)
		}
		return signed
	}
	old, new := sign(3), sign(5)

	incl, err := verify.ProveInclusion(ctx, l, new, 2)
	if err != nil {
		panic(err)
	}
	c, err := incl.Verify(verifier) // the key, the proof: nothing else
	fmt.Println("event 2 in the checkpoint of size", c.Size, "verifies:", err == nil)

	cons, err := verify.ProveConsistency(ctx, l, old, new)
	if err != nil {
		panic(err)
	}
	o, n, err := cons.Verify(verifier)
	fmt.Println("size", o.Size, "is a prefix of size", n.Size, "verifies:", err == nil)

	incl.Hashes[0][0] ^= 1
	_, err = incl.Verify(verifier)
	fmt.Println(err)
	// Output:
	// event 2 in the checkpoint of size 5 verifies: true
	// size 3 is a prefix of size 5 verifies: true
	// verify inclusion: failed at seq 2: proof: the audit path does not lead to the root of size 5
}
