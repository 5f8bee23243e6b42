package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

// witnessServe is one serve process (run in-process, as the other e2e
// tests do) with a checkpoint key, on a fixed port so that a restarted
// serve is found again by a following witness.
type witnessServe struct {
	stop func()
	done chan int
	url  string
}

func startWitnessServe(t *testing.T, dir, skey string, port int) *witnessServe {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &witnessServe{stop: cancel, done: make(chan int, 1)}
	go func() {
		s.done <- run(ctx, []string{"--data-dir", dir, "serve", "--port", strconv.Itoa(port),
			"--read-only-user", "ro", "--read-only-password", "pw", "--writer-user", "w", "--writer-password", "pw2",
			"--checkpoint-key", skey, "--checkpoint-origin", "leaseledger.test/witness", "--checkpoint-interval", "100ms"},
			strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "leaseledger: NATS listening on "); ok {
			s.url = u
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if s.url == "" {
		cancel()
		t.Fatalf("serve did not start (exit %d)", <-s.done)
	}
	return s
}

func (s *witnessServe) close(t *testing.T) {
	t.Helper()
	s.stop()
	if code := <-s.done; code != 0 {
		t.Fatalf("serve exit %d", code)
	}
}

// runningWitness is `leaseledger witness` in a goroutine.
type runningWitness struct {
	stop   func()
	done   chan int
	stdout *lockedBuffer
	stderr *lockedBuffer
}

func startWitness(url, vkey, state string) *runningWitness {
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWitness{stop: cancel, done: make(chan int, 1), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	go func() {
		w.done <- run(ctx, []string{"witness", "--bus", url, "--user", "ro", "--password", "pw", "--vkey", vkey, "--state", state, "--retry", "200ms"},
			strings.NewReader(""), w.stdout, w.stderr)
	}()
	return w
}

var acceptedLine = regexp.MustCompile(`accepted size ([0-9]+)`)

// waitAccepted waits until the witness accepted a checkpoint of size.
func (w *runningWitness) waitAccepted(t *testing.T, size int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range acceptedLine.FindAllStringSubmatch(w.stdout.String(), -1) {
			if m[1] == strconv.Itoa(size) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the witness did not accept size %d:\n%s\n%s", size, w.stdout, w.stderr)
}

// waitExit waits for the witness to exit with code.
func (w *runningWitness) waitExit(t *testing.T, code int, says string) {
	t.Helper()
	select {
	case got := <-w.done:
		if got != code || !strings.Contains(w.stderr.String(), says) {
			t.Fatalf("witness exit %d, want %d saying %q:\n%s\n%s", got, code, says, w.stdout, w.stderr)
		}
	case <-time.After(15 * time.Second):
		w.stop()
		<-w.done
		t.Fatalf("the witness did not exit:\n%s\n%s", w.stdout, w.stderr)
	}
}

func witnessKeys(t *testing.T) (skey, vkey string) {
	t.Helper()
	skey = filepath.Join(t.TempDir(), "signer.key")
	r := runCLI(t, context.Background(), "", "checkpoint", "keygen", "--name", "test-log", "--out", skey)
	if r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	return skey, strings.TrimSpace(r.stdout)
}

// appendDifferent appends n events to the closed data directory dir,
// unlike any serve wrote (a rewritten history's new tail).
func appendDifferent(t *testing.T, dir string, n int) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := l.Append(context.Background(), events.Draft{Activation: "act-forged", Payload: &events.LeaseRevoked{Reason: fmt.Sprintf("forged_%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// The witness follows several checkpoints; serve is stopped, its tail
// rewritten (ledgertest.Fork plus other events, a consistent m/head) to a
// longer log and restarted: the witness reconnects and exits with
// exitFork naming both checkpoints; restarted on its state it detects the
// fork again.
func TestWitnessDetectsFork(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "witness.state")
	ctx := context.Background()
	skey, vkey := witnessKeys(t)
	in, n := examples(t)
	if r := runCLI(t, ctx, in, "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	port := freePort(t)
	s := startWitnessServe(t, dir, skey, port)
	w := startWitness(s.url, vkey, state)
	w.waitAccepted(t, n)
	for i := 2; i <= 3; i++ {
		if r := runCLI(t, ctx, in, "append", "--nats", s.url, "--user", "w", "--password", "pw2"); r.code != 0 {
			t.Fatalf("append over NATS: %+v", r)
		}
		w.waitAccepted(t, i*n)
	}
	s.close(t)
	ledgertest.Fork(t, dir, ledger.Seq(n+3))
	appendDifferent(t, dir, 3*n)
	s = startWitnessServe(t, dir, skey, port)
	defer s.close(t)
	w.waitExit(t, exitFork, "FORK")
	if !strings.Contains(w.stderr.String(), fmt.Sprintf("accepted size %d root ", 3*n)) || !strings.Contains(w.stderr.String(), fmt.Sprintf("observed size %d root ", 4*n+3)) {
		t.Fatalf("the fork's report does not show both checkpoints:\n%s", w.stderr)
	}
	if !strings.Contains(w.stderr.String(), "reconnected") {
		t.Fatalf("no reconnection logged:\n%s", w.stderr)
	}
	w = startWitness(s.url, vkey, state)
	w.waitExit(t, exitFork, "FORK")
}

// A witness stopped at a checkpoint and restarted after serve's log was
// cut back (and grown by less than it lost) exits with exitRollback.
func TestWitnessRestartedDetectsRollback(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "witness.state")
	ctx := context.Background()
	skey, vkey := witnessKeys(t)
	in, n := examples(t)
	for range 2 {
		if r := runCLI(t, ctx, in, "--data-dir", dir, "append"); r.code != 0 {
			t.Fatal(r.stderr)
		}
	}
	port := freePort(t)
	s := startWitnessServe(t, dir, skey, port)
	w := startWitness(s.url, vkey, state)
	w.waitAccepted(t, 2*n)
	w.stop()
	if code := <-w.done; code != 0 {
		t.Fatalf("witness exit %d:\n%s", code, w.stderr)
	}
	s.close(t)
	ledgertest.Fork(t, dir, ledger.Seq(n))
	appendDifferent(t, dir, 2)
	s = startWitnessServe(t, dir, skey, port)
	defer s.close(t)
	w = startWitness(s.url, vkey, state)
	w.waitExit(t, exitRollback, "ROLLBACK")
	if !strings.Contains(w.stderr.String(), fmt.Sprintf("accepted size %d root ", 2*n)) || !strings.Contains(w.stderr.String(), fmt.Sprintf("observed size %d root ", n+2)) {
		t.Fatalf("the rollback's report does not show both checkpoints:\n%s", w.stderr)
	}
}

// The witness checks checkpoints in the order serve published them: the
// reply to its own request, which may overtake a smaller checkpoint
// published before it, is not taken for the newest (it would make that
// one look like a rollback).
func TestWitnessIgnoresOvertakingReply(t *testing.T) {
	ctx := context.Background()
	skey, vkey := witnessKeys(t)
	sk, err := os.ReadFile(skey)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(strings.TrimSpace(string(sk)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(ledger.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 30 {
		if _, err := l.Append(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: fmt.Sprintf("r_%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	sign := func(size ledger.Seq) []byte {
		c, err := verify.CheckpointAt(ctx, l, "leaseledger.test/witness", size)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Sign(signer)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	small, large := sign(10), sign(30)
	var b *bus.Bus
	var published sync.WaitGroup
	var once sync.Once
	defer published.Wait()
	// serve's order, with its delivery delayed: 10 was published before
	// the request, 30 for it; the reply (30) arrives first.
	checkpoint := bus.Service{Subject: control.ProofCheckpointSubject, Access: bus.AccessRead, Handle: bus.JSON(
		func(context.Context, string, *control.CheckpointRequest) (*control.CheckpointReply, error) {
			once.Do(func() { // later requests: as if the head had not moved
				published.Go(func() {
					time.Sleep(300 * time.Millisecond)
					_ = b.PublishCheckpoint(small)
					_ = b.PublishCheckpoint(large)
				})
			})
			return &control.CheckpointReply{Checkpoint: string(large)}, nil
		})}
	services := []bus.Service{checkpoint}
	for _, s := range control.ProofServices(l, nil) {
		if s.Subject != control.ProofCheckpointSubject {
			services = append(services, s)
		}
	}
	b, err = bus.Start(l, bus.Options{Port: bus.RandomPort, ReadOnlyUser: "ro", ReadOnlyPassword: "pw", Services: services})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := startWitness(b.ClientURL(), vkey, filepath.Join(t.TempDir(), "witness.state"))
	w.waitAccepted(t, 30)
	select {
	case code := <-w.done:
		t.Fatalf("witness exit %d:\n%s", code, w.stderr)
	case <-time.After(300 * time.Millisecond):
	}
	w.stop()
	if code := <-w.done; code != 0 || !strings.Contains(w.stdout.String(), "accepted size 10 (first)") {
		t.Fatalf("witness exit %d:\n%s\n%s", code, w.stdout, w.stderr)
	}
}

// A witness whose accepted checkpoint serve cannot prove consistent with
// its new ones (an event below the head is gone, so the proof API fails
// every time while checkpoints are still signed) gives up after
// witnessProofAttempts checkpoints in a row and exits with exitNoProof,
// naming both sizes, instead of following blind.
func TestWitnessBoundsProofFailures(t *testing.T) {
	dir, state := t.TempDir(), filepath.Join(t.TempDir(), "witness.state")
	ctx := context.Background()
	skey, vkey := witnessKeys(t)
	in, n := examples(t)
	if r := runCLI(t, ctx, in, "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r := runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--origin", "leaseledger.test/witness", "--size", "4")
	if r.code != 0 {
		t.Fatalf("checkpoint: %+v", r)
	}
	if err := os.WriteFile(state, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	// A serve run leaves a projection snapshot of the head, so that the
	// next one starts without reading event 5 — needed by every
	// consistency proof from size 4, not by the roots of larger trees
	// (read from the stored Merkle nodes).
	port := freePort(t)
	startWitnessServe(t, dir, skey, port).close(t)
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(binary.BigEndian.AppendUint64([]byte("e/"), 5), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := startWitnessServe(t, dir, skey, port)
	defer s.close(t)
	w := startWitness(s.url, vkey, state)
	w.waitExit(t, exitNoProof, fmt.Sprintf("cannot verify: no consistency proof for sizes 4→%d", n))
	if got := strings.Count(w.stderr.String(), "no consistency proof; will ask again"); got != witnessProofAttempts-1 {
		t.Fatalf("%d retries logged, want %d:\n%s", got, witnessProofAttempts-1, w.stderr)
	}
}
