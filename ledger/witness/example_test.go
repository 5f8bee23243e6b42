package witness_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/leaseledger/leaseledger/ledger/witness"
	"golang.org/x/mod/sumdb/note"
)

// A witness follows a growing ledger's checkpoints (the ledger itself is
// the Prover here; `leaseledger witness` asks serve's proof API) and
// refuses one that goes back.
func ExampleWitness_Observe() {
	ctx := context.Background()
	tmp, _ := os.MkdirTemp("", "witness-example")
	defer os.RemoveAll(tmp)
	l, _ := ledger.Open(ledger.Options{Dir: filepath.Join(tmp, "data")})
	defer l.Close()
	skey, vkey, _ := note.GenerateKey(rand.Reader, "example")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	checkpoint := func(size ledger.Seq) []byte {
		c, _ := verify.CheckpointAt(ctx, l, "leaseledger.example/prod", size)
		b, _ := c.Sign(signer)
		return b
	}
	grow := func(n int) {
		for range n {
			_, _ = l.Append(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: events.TerminatedSessionEnded}})
		}
	}

	w, _ := witness.Open(filepath.Join(tmp, "witness.state"), verifier)
	grow(5)
	out, err := w.Observe(ctx, checkpoint(5), l)
	fmt.Println(out, err)
	grow(20)
	out, err = w.Observe(ctx, checkpoint(25), l)
	fmt.Println(out, err)
	_, err = w.Observe(ctx, checkpoint(10), l)
	fmt.Println(errors.Is(err, witness.ErrRollback))
	c, _ := w.Latest()
	fmt.Println(c.Size)
	// Output:
	// first <nil>
	// advanced <nil>
	// true
	// 25
}
