package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/bus/bustest"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"
)

// startFleetWitness runs `witness --host-id host` against a fleet bus
// (anonymous) in-process.
func startFleetWitness(url, host, vkey, state string) *runningWitness {
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWitness{stop: cancel, done: make(chan int, 1), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	go func() {
		w.done <- run(ctx, []string{"witness", "--bus", url, "--host-id", host, "--vkey", vkey, "--state", state, "--retry", "200ms"},
			strings.NewReader(""), w.stdout, w.stderr)
	}()
	return w
}

// checkpointSub collects the checkpoints published in host's space on a
// fleet bus.
func checkpointSub(t *testing.T, url, host string) (*nats.Conn, *nats.Subscription) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync(busclient.HostSubject(host, busclient.CheckpointSubject))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc, sub
}

// A host signs checkpoints (serve --checkpoint-key); two collectors mirror
// it, one with its verifier key (--checkpoint-vkey) and one without. Each
// fleet bus republishes the host's checkpoint, byte for byte, once its
// mirror matches it, and answers it on the host's proof API; a witness
// with the host's key follows the host through each fleet bus (the
// consistency proofs are the mirror's, verified with the host's key), and
// an inclusion proof from the fleet bus verifies against the host's
// checkpoint. A checkpoint of another history, published on the host's
// subject by another member of the cluster, is republished by neither.
func TestCollectFleetCheckpoints(t *testing.T) {
	ctx := context.Background()
	skey, vkey := witnessKeys(t)
	hostVerifier, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	// The host signs only when asked (its proof API), so the test says
	// which sizes are signed.
	hostURL, route, stopHost := startServeHost(t, "--data-dir", t.TempDir(), "serve", "--port", "-1", "--host-id", "h1",
		"--cluster-listen", "127.0.0.1:-1", "--writer-user", "w", "--writer-password", "pw",
		"--checkpoint-key", skey, "--checkpoint-origin", "leaseledger.test/h1", "--checkpoint-interval", "1h")
	defer func() {
		if code := stopHost(); code != 0 {
			t.Errorf("serve exit %d", code)
		}
	}()
	hnc, err := nats.Connect(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	hostProofs := control.NewClient(hnc, "").WithHost("h1")
	in, _ := examples(t)
	lines := strings.SplitAfter(strings.TrimSpace(in)+"\n", "\n")
	appendLines := func(ls []string) ledger.Seq {
		t.Helper()
		r := runCLI(t, ctx, strings.Join(ls, ""), "append", "--nats", hostURL, "--host-id", "h1", "--user", "w", "--password", "pw")
		if r.code != 0 {
			t.Fatalf("append to h1: %+v", r)
		}
		h, err := busclient.NewClient(hnc).WithHost("h1").Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h.Seq
	}
	signed := func(size ledger.Seq) []byte {
		t.Helper()
		b, err := hostProofs.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cp, err := verify.ParseCheckpoint(b, hostVerifier); err != nil || cp.Size != size {
			t.Fatalf("the host's checkpoint %+v: %v, want size %d", cp, err, size)
		}
		return b
	}

	withKey := startCollect(t, t.TempDir(), []string{route}, "--hosts", "h1", "--checkpoint-vkey", "h1="+vkey)
	noKey := startCollect(t, t.TempDir(), []string{route}, "--hosts", "h1")
	collectors := map[string]*inProcessCollect{"with --checkpoint-vkey": withKey, "without": noKey}
	subs := map[string]*nats.Subscription{}
	fleetProofs := map[string]*control.Client{}
	for name, c := range collectors {
		nc, sub := checkpointSub(t, c.url, "h1")
		subs[name], fleetProofs[name] = sub, control.NewClient(nc, "").WithHost("h1")
		if _, err := fleetProofs[name].Checkpoint(ctx); err == nil {
			t.Fatalf("%s: a checkpoint on the fleet bus before the host signed any", name)
		}
	}
	// republished waits until collector name's fleet bus republished want
	// — and nothing but prev (asked for again by witnesses) before it — and
	// answers it on its proof API.
	republished := func(name string, prev, want []byte) {
		t.Helper()
		for {
			m, err := subs[name].NextMsg(60 * time.Second)
			if err != nil {
				t.Fatalf("%s: %v, want the host's %q republished", name, err, want)
			}
			if string(m.Data) == string(want) {
				break
			}
			if prev == nil || string(m.Data) != string(prev) {
				t.Fatalf("%s: republished %q, want the host's %q", name, m.Data, want)
			}
		}
		got, err := fleetProofs[name].Checkpoint(ctx)
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s: checkpoint of the fleet bus's proof API %v %q, want the host's %q", name, err, got, want)
		}
	}

	size1 := appendLines(lines[:10])
	cp1 := signed(size1)
	for name := range collectors {
		republished(name, nil, cp1)
	}
	witnesses := map[string]*runningWitness{}
	for name, c := range collectors {
		w := startFleetWitness(c.url, "h1", vkey, filepath.Join(t.TempDir(), "witness.state"))
		defer func() {
			w.stop()
			if code := <-w.done; code != 0 {
				t.Errorf("witness through %s: exit %d:\n%s", name, code, w.stderr)
			}
		}()
		w.waitAccepted(t, int(size1))
		witnesses[name] = w
	}

	// Another history of the next size, signed by a key the collector
	// without a verifier cannot tell from the host's, published on h1's
	// checkpoint subject by another member of the cluster.
	size2 := appendLines(lines[10:])
	for _, c := range collectors {
		c.waitHost(t, "h1", "h1 mirrored", func(s collector.HostStatus) bool { return s.Head == size2 })
	}
	forged := otherHistoryCheckpoint(t, "h1", size2)
	_, pc := bustest.StartPeer(t, bus.PeerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{route}}})
	for name, c := range collectors {
		c.waitHost(t, "h1", name+": the forged checkpoint rejected", func(s collector.HostStatus) bool {
			// Published until it reaches the collector (the peer's
			// routes to it come by gossip).
			if err := pc.Publish(busclient.HostSubject("h1", busclient.CheckpointSubject), forged); err != nil {
				t.Fatal(err)
			}
			return s.CheckpointsRejected > 0
		})
	}
	cp2 := signed(size2)
	for name := range collectors {
		republished(name, cp1, cp2) // and not the forged one before it
		witnesses[name].waitAccepted(t, int(size2))
		if s := collectors[name].host("h1"); s.State == collector.StateRefused || s.CheckpointSize != size2 {
			t.Fatalf("%s: h1 %+v, want checkpoint_size %d, not refused", name, s, size2)
		}
	}

	// An inclusion proof from the fleet bus verifies against the host's
	// checkpoint with the host's key.
	cp, err := verify.ParseCheckpoint(cp2, hostVerifier)
	if err != nil {
		t.Fatal(err)
	}
	for name := range collectors {
		for _, seq := range []uint64{1, 3, uint64(size2)} {
			r, err := fleetProofs[name].InclusionProof(ctx, seq, uint64(size2))
			if err != nil {
				t.Fatal(err)
			}
			if err := verify.VerifyInclusion(cp, ledger.Seq(seq), r.Event, r.Hashes); err != nil {
				t.Fatalf("%s: inclusion of seq %d: %v", name, seq, err)
			}
		}
	}
}

// otherHistoryCheckpoint is a checkpoint of size events of a chain bound
// to host that no host served, signed by a key of its own.
func otherHistoryCheckpoint(t *testing.T, host string, size ledger.Seq) []byte {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if _, err := l.BindHost(ctx, host); err != nil {
		t.Fatal(err)
	}
	for i := 0; l.Head().Seq < size; i++ {
		if _, err := l.Append(ctx, events.Draft{Activation: "other", Session: "s1", Server: "srv",
			Payload: &events.CallAdmitted{CallID: fmt.Sprintf("o%d", i), Tool: "echo", Digest: strings.Repeat("cd", 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	skey, _, err := note.GenerateKey(rand.Reader, "test-log")
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := verify.CheckpointAt(ctx, l, "leaseledger.test/h1", size)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cp.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
