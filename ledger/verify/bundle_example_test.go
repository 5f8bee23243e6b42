package verify_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

// An evidence bundle of one activation is written from the ledger with the
// signer key and checked with nothing but the verifier key; a bundle with
// an event line dropped fails naming the missing seq.
func ExampleBundle() {
	dir, err := os.MkdirTemp("", "bundle-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i, a := range []string{"act-1", "act-2", "act-1", "act-1"} {
		if _, err := l.Append(ctx, events.Draft{Activation: a, Payload: &events.LeaseRevoked{Reason: "idle", CallsInFlight: i}}); err != nil {
			log.Fatal(err)
		}
	}
	skey, vkey, _ := note.GenerateKey(rand.Reader, "auditor-example")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)

	var bundle bytes.Buffer
	if _, err := verify.WriteBundle(ctx, &bundle, l, signer, "leaseledger.example/prod", verify.BundleSelector{Activation: "act-1"}); err != nil {
		log.Fatal(err)
	}
	rep, err := verify.Bundle(bytes.NewReader(bundle.Bytes()), verifier)
	fmt.Println(rep.Manifest.Events, "events of", rep.Manifest.Activation, "at seqs", rep.Manifest.Seqs, "verified:", err == nil)

	lines := bytes.SplitAfter(bundle.Bytes(), []byte("\n"))
	dropped := bytes.Join(append(lines[:2:2], lines[3:]...), nil) // the line of seq 3
	_, err = verify.Bundle(bytes.NewReader(dropped), verifier)
	var ve *verify.Error
	fmt.Println(errors.As(err, &ve), ve.Seq, ve.Fault)
	// Output:
	// 3 events of act-1 at seqs [{1 1} {3 4}] verified: true
	// true 3 missing
}
