package control_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"
)

// A bus serving the proof API with a Checkpointer, and an auditor who
// holds only the verifier key: it asks for a checkpoint and an inclusion
// proof and checks them itself.
func ExampleClient_InclusionProof() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "control-proof-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	if _, err := l.Append(ctx, leaseDrafts("act-1", "s-1", "github", false, true)...); err != nil {
		panic(err)
	}
	signer, err := note.NewSigner(testSignerKey)
	if err != nil {
		panic(err)
	}
	cp := control.NewCheckpointer(l, "leaseledger.example/prod", signer)
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, Services: control.ProofServices(l, cp)})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	cp.SetPublish(b.PublishCheckpoint) // and cp.Run(ctx, interval, logf) to publish as the head moves

	nc, err := nats.Connect(b.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c := control.NewClient(nc, "")
	verifier, err := note.NewVerifier(testVerifierKey)
	if err != nil {
		panic(err)
	}
	signed, err := c.Checkpoint(ctx)
	if err != nil {
		panic(err)
	}
	head, err := verify.ParseCheckpoint(signed, verifier)
	if err != nil {
		panic(err)
	}
	p, err := c.InclusionProof(ctx, 2, uint64(head.Size))
	if err != nil {
		panic(err)
	}
	fmt.Println(head.Origin, head.Size, "events")
	fmt.Println("event 2 included:", verify.VerifyInclusion(head, 2, p.Event, p.Hashes) == nil)
	p.Event[len(p.Event)-2] ^= 1
	fmt.Println("changed event included:", verify.VerifyInclusion(head, 2, p.Event, p.Hashes) == nil)
	// Output:
	// leaseledger.example/prod 5 events
	// event 2 included: true
	// changed event included: false
}

// A relay serves a checkpoint someone else signed — the host's, on the
// collector's fleet bus — untouched: the auditor checks it with the
// signer's key.
func ExampleNewCheckpointRelay() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "control-relay-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	if _, err := l.Append(ctx, leaseDrafts("act-1", "s-1", "github", false, true)...); err != nil {
		panic(err)
	}
	signer, err := note.NewSigner(testSignerKey)
	if err != nil {
		panic(err)
	}
	head, err := verify.NewCheckpoint(ctx, l, "leaseledger.example/h1")
	if err != nil {
		panic(err)
	}
	signed, err := head.Sign(signer) // by the host that keeps the log
	if err != nil {
		panic(err)
	}

	relay := control.NewCheckpointRelay()
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, Services: control.ProofServices(l, relay)})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	relay.SetPublish(b.PublishCheckpoint)
	if err := relay.Relay(ctx, signed); err != nil {
		panic(err)
	}

	nc, err := nats.Connect(b.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	got, err := control.NewClient(nc, "").Checkpoint(ctx)
	if err != nil {
		panic(err)
	}
	verifier, err := note.NewVerifier(testVerifierKey)
	if err != nil {
		panic(err)
	}
	cp, err := verify.ParseCheckpoint(got, verifier)
	fmt.Println(cp.Origin, cp.Size, "events, the signer's bytes:", err == nil && string(got) == string(signed))
	// Output:
	// leaseledger.example/h1 5 events, the signer's bytes: true
}
