package control_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/leaseledger/leaseledger/schemas"
	"golang.org/x/mod/sumdb/note"
)

// The checkpoint key of the tests' proof API.
const (
	testSignerKey   = "PRIVATE+KEY+control-test+ac32e98b+ASQyUIHkw7X1pO+bJ4y0Ty1VkxqTAZ7eQKwYToqNJNWP"
	testVerifierKey = "control-test+ac32e98b+AfBTGnd/Up57XnPKCBzN+zr2M9PT9vDhuOBfXHaqLA12"
	testOrigin      = "leaseledger.test/control"
)

func testKeys(t testing.TB) (note.Signer, note.Verifier) {
	t.Helper()
	s, err := note.NewSigner(testSignerKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(testVerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// A read-only user gets a signed checkpoint of the head (published on the
// checkpoint subject too), an inclusion proof of every event and
// consistency proofs from several sizes, all of which verify.
func TestProofAPI(t *testing.T) {
	ctx := context.Background()
	p := openProjection(t)
	fixture(t, p)
	l := p.Ledger()
	b := startAPI(t, p, &fakeRuntime{}, bus.Options{})
	_, v := testKeys(t)
	nc := dial(t, b, roUser, roPass)
	sub, err := nc.SubscribeSync(busclient.CheckpointSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := control.NewClient(nc, roUser)
	signed, err := c.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(m.Data) != string(signed) {
		t.Fatalf("published checkpoint: %v, %q", err, m.Data)
	}
	cp, err := verify.ParseCheckpoint(signed, v)
	if err != nil || cp.Size != l.Head().Seq || cp.Origin != testOrigin || cp.Size < 40 {
		t.Fatalf("checkpoint %+v: %v", cp, err)
	}
	for seq := uint64(1); seq <= uint64(cp.Size); seq++ {
		r, err := c.InclusionProof(ctx, seq, uint64(cp.Size))
		if err != nil {
			t.Fatal(err)
		}
		if err := verify.VerifyInclusion(cp, ledger.Seq(seq), r.Event, r.Hashes); err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
	}
	for _, from := range []ledger.Seq{1, 2, 15, 16, 17, cp.Size - 1, cp.Size} {
		old, err := verify.CheckpointAt(ctx, l, testOrigin, from)
		if err != nil {
			t.Fatal(err)
		}
		hashes, err := c.ConsistencyProof(ctx, uint64(from), uint64(cp.Size))
		if err != nil {
			t.Fatal(err)
		}
		if err := verify.VerifyConsistency(old, cp, hashes); err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
	}
	vd := validator(t)
	for subject, body := range map[string]string{control.ProofCheckpointSubject: `{}`, control.InclusionSubject: `{"seq":3,"size":40}`,
		control.ConsistencySubject: `{"from":7,"to":40}`} {
		reply := raw(t, nc, roUser, subject, body)
		if err := vd.ValidateAPI(schemas.APIReplyPath(control.Name(subject)), reply); err != nil {
			t.Fatalf("%s: %v\n%s", subject, err, reply)
		}
	}
	size := uint64(cp.Size)
	_, err = c.InclusionProof(ctx, size+1, size+1)
	refusedWith(t, err, control.ErrNotFound, "")
	_, err = c.InclusionProof(ctx, 3, 2)
	refusedWith(t, err, control.ErrInvalid, "")
	_, err = c.ConsistencyProof(ctx, 1, size+1)
	refusedWith(t, err, control.ErrNotFound, "")
	_, err = c.ConsistencyProof(ctx, 0, 1)
	refusedWith(t, err, control.ErrInvalid, "")
}

// Without a checkpoint key the checkpoint is refused as unavailable; the
// proofs are still served. A Checkpointer publishes at its interval only
// when the head moved.
func TestCheckpointerWithoutKeyAndInterval(t *testing.T) {
	ctx := context.Background()
	p := openProjection(t)
	fixture(t, p)
	b, err := bus.Start(p.Ledger(), bus.Options{Port: bus.RandomPort, Services: control.ProofServices(p.Ledger(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := client(t, b, "", "")
	_, err = c.Checkpoint(ctx)
	refusedWith(t, err, control.ErrUnavailable, "")
	if _, err := c.ConsistencyProof(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}

	s, v := testKeys(t)
	cp := control.NewCheckpointer(p.Ledger(), testOrigin, s)
	published := make(chan []byte, 16)
	cp.SetPublish(func(b []byte) error { published <- b; return nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); cp.Run(runCtx, 20*time.Millisecond, func(err error) { t.Error(err) }) }()
	defer func() { stop(); <-done }()
	first := <-published
	select {
	case b := <-published:
		t.Fatalf("published again with the head unmoved: %q", b)
	case <-time.After(200 * time.Millisecond):
	}
	appendDrafts(t, p, leaseDrafts("act-9", "s-9", "alpha", false, false))
	second := <-published
	c1, err1 := verify.ParseCheckpoint(first, v)
	c2, err2 := verify.ParseCheckpoint(second, v)
	if err1 != nil || err2 != nil || c2.Size != c1.Size+4 {
		t.Fatalf("checkpoints %+v %+v: %v %v", c1, c2, err1, err2)
	}
}

// countingSigner counts the signatures made with the wrapped signer.
type countingSigner struct {
	note.Signer
	n atomic.Int32
}

func (s *countingSigner) Sign(msg []byte) ([]byte, error) {
	s.n.Add(1)
	return s.Signer.Sign(msg)
}

// A checkpoint asked for while the head has not moved re-sends the last
// signed note (published again, same bytes) without signing again; once
// the head moves, a new one is signed.
func TestCheckpointerResendsUnmoved(t *testing.T) {
	ctx := context.Background()
	p := openProjection(t)
	fixture(t, p)
	s, v := testKeys(t)
	cs := &countingSigner{Signer: s}
	cp := control.NewCheckpointer(p.Ledger(), testOrigin, cs)
	var published [][]byte
	cp.SetPublish(func(b []byte) error { published = append(published, b); return nil })
	first, err := cp.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cp.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(first) || len(published) != 2 || string(published[1]) != string(first) || cs.n.Load() != 1 {
		t.Fatalf("unmoved head: %d signatures, %d published, same bytes %v; want 1, 2, true", cs.n.Load(), len(published), string(again) == string(first))
	}
	appendDrafts(t, p, leaseDrafts("act-9", "s-9", "alpha", false, false))
	third, err := cp.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c1, err1 := verify.ParseCheckpoint(first, v)
	c3, err3 := verify.ParseCheckpoint(third, v)
	if err1 != nil || err3 != nil || c3.Size != c1.Size+4 || cs.n.Load() != 2 {
		t.Fatalf("moved head: sizes %d → %d, %d signatures: %v %v", c1.Size, c3.Size, cs.n.Load(), err1, err3)
	}
}

// A relay (NewCheckpointRelay) signs nothing: before the first Relay the
// checkpoint is refused as unavailable; then the proof API answers, and
// publishes, the relayed checkpoint byte for byte — the signer's, which
// verifies with the signer's key, as do the proofs against it. Relay on a
// signing Checkpointer is ErrNotRelay.
func TestCheckpointRelay(t *testing.T) {
	ctx := context.Background()
	p := openProjection(t)
	fixture(t, p)
	l := p.Ledger()
	relay := control.NewCheckpointRelay()
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, Services: control.ProofServices(l, relay)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	relay.SetPublish(b.PublishCheckpoint)
	c := client(t, b, "", "")
	_, err = c.Checkpoint(ctx)
	refusedWith(t, err, control.ErrUnavailable, "")

	s, v := testKeys(t)
	signing := control.NewCheckpointer(l, testOrigin, s)
	if err := signing.Relay(ctx, []byte("x")); !errors.Is(err, control.ErrNotRelay) {
		t.Fatalf("Relay on a signing checkpointer: %v, want ErrNotRelay", err)
	}
	signing.SetPublish(func([]byte) error { return nil })
	signed, err := signing.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nc := dial(t, b, "", "")
	sub, err := nc.SubscribeSync(busclient.CheckpointSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := relay.Relay(ctx, signed); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != string(signed) {
		t.Fatalf("relayed checkpoint published: %v, %q", err, m.Data)
	}
	got, err := c.Checkpoint(ctx)
	if err != nil || string(got) != string(signed) {
		t.Fatalf("checkpoint through the relay: %v, %q; want the signer's %q", err, got, signed)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != string(signed) {
		t.Fatalf("checkpoint asked for, published again: %v, %q", err, m.Data)
	}
	cp, err := verify.ParseCheckpoint(got, v)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.InclusionProof(ctx, 3, uint64(cp.Size))
	if err != nil {
		t.Fatal(err)
	}
	if err := verify.VerifyInclusion(cp, 3, r.Event, r.Hashes); err != nil {
		t.Fatal(err)
	}
}
