package collector_test

import (
	"context"
	"crypto/rand"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

func checkpointKeys(t *testing.T, name string) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// The checkpoints a host signs are checked against the mirror: one of the
// history it served is verified, one signed by another key is ignored, and
// one of another history of the same size (signed with the host's key)
// refuses the host with a checkpoint-mismatch finding.
func TestCheckpointsChecked(t *testing.T) {
	f := newFleet(t, "h1", "h2")
	signer, verifier := checkpointKeys(t, "h1-checkpoints")
	otherSigner, _ := checkpointKeys(t, "someone-else")
	c := f.collector(t.TempDir(), []string{"h1", "h2"}, func(o *collector.Options) {
		o.Verifiers = map[string]note.Verifier{"h1": verifier}
	})
	defer c.Close()
	h1 := f.hosts["h1"]
	h1.appendN(t, 30, 5)
	sign := func(s note.Signer, h *testHost) []byte { return signAt(t, s, h.l, h.l.Head().Seq) }
	if err := h1.b.PublishCheckpoint(sign(signer, h1)); err != nil {
		t.Fatal(err)
	}
	if err := h1.b.PublishCheckpoint(sign(otherSigner, h1)); err != nil {
		t.Fatal(err)
	}
	size := h1.l.Head().Seq
	s := waitStatus(t, c, "h1", "checkpoint verified", func(s collector.HostStatus) bool {
		return s.CheckpointsVerified == 1 && s.CheckpointsRejected == 1
	})
	if s.VerifiedSize != size || s.State == collector.StateRefused {
		t.Fatalf("%+v: want the checkpoint at %d verified", s, size)
	}
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	m := get(t, srv.URL+"/metrics")
	for _, want := range []string{`leaseledger_collector_checkpoints_verified_total{host="h1"} 1`, `leaseledger_collector_checkpoints_rejected_total{host="h1"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Another history of the same size, signed with h1's key.
	other := f.startDir("x", filepath.Join(t.TempDir(), "other"), "h1")
	other.appendN(t, int(size)-1, 7)
	if other.l.Head().Seq != size {
		t.Fatalf("other history at %d, want %d", other.l.Head().Seq, size)
	}
	if err := h1.b.PublishCheckpoint(sign(signer, other)); err != nil {
		t.Fatal(err)
	}
	s = waitStatus(t, c, "h1", "refused", func(s collector.HostStatus) bool { return s.State == collector.StateRefused })
	if s.Finding == nil || s.Finding.Reason != collector.ReasonCheckpoint || s.Finding.Seq != size || s.Finding.Stored == s.Finding.Offered {
		t.Fatalf("finding %+v, want a checkpoint mismatch at %d", s.Finding, size)
	}
	f.hosts["h2"].appendN(t, 10, 2)
	f.waitMirrored(c, "h2") // h2 has no verifier and is mirrored on
}

// signAt signs the checkpoint of l's first size events with s.
func signAt(t *testing.T, s note.Signer, l *ledger.Ledger, size ledger.Seq) []byte {
	t.Helper()
	cp, err := verify.CheckpointAt(context.Background(), l, "host.example/log", size)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cp.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// handedOn records what Options.OnCheckpoint receives, by host.
type handedOn struct {
	mu     sync.Mutex
	byHost map[string][]string
}

func (h *handedOn) add(host string, signed []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byHost[host] = append(h.byHost[host], string(signed))
}

func (h *handedOn) get(host string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.byHost[host])
}

// Options.OnCheckpoint receives each host's latest checkpoint the mirror
// matches, byte for byte, in order of growing size: of a host with a
// verifier once its signature verifies; of a host without one once the
// mirror holds its size and its root and chain hash are the mirror's. A
// smaller one than the last handed on is not handed on; one the mirror
// contradicts (another history signed, of a host without a verifier) or
// that does not parse is counted in CheckpointsRejected and not handed
// on, and does not refuse the host.
func TestCheckpointsHandedOn(t *testing.T) {
	f := newFleet(t, "h1", "h2")
	signer, verifier := checkpointKeys(t, "h1-checkpoints")
	h2signer, _ := checkpointKeys(t, "h2-checkpoints")
	got := &handedOn{byHost: map[string][]string{}}
	c := f.collector(t.TempDir(), []string{"h1", "h2"}, func(o *collector.Options) {
		o.Verifiers = map[string]note.Verifier{"h1": verifier}
		o.OnCheckpoint = got.add
	})
	defer c.Close()
	h1, h2 := f.hosts["h1"], f.hosts["h2"]
	h1.appendN(t, 20, 5)
	h2.appendN(t, 20, 5)
	f.waitMirrored(c, "h1", "h2")

	size := h1.l.Head().Seq
	large, small := signAt(t, signer, h1.l, size), signAt(t, signer, h1.l, size-5)
	for _, b := range [][]byte{large, small} {
		if err := h1.b.PublishCheckpoint(b); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, c, "h1", "both verified", func(s collector.HostStatus) bool { return s.CheckpointsVerified == 2 })
	if g := got.get("h1"); !slices.Equal(g, []string{string(large)}) || c.Status().Hosts["h1"].CheckpointSize != size {
		t.Fatalf("h1 handed on %q (status %+v), want only the checkpoint of size %d", g, c.Status().Hosts["h1"], size)
	}

	// h2 has no verifier: checked against the mirror only.
	size = h2.l.Head().Seq
	other := f.startDir("x", filepath.Join(t.TempDir(), "other"), "h2")
	other.appendN(t, int(size)-1, 7)
	if other.l.Head().Seq != size {
		t.Fatalf("other history at %d, want %d", other.l.Head().Seq, size)
	}
	first := signAt(t, h2signer, h2.l, size-5)
	if err := h2.b.PublishCheckpoint(first); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, "h2", "handed on", func(s collector.HostStatus) bool { return s.CheckpointSize == size-5 })
	for _, b := range [][]byte{signAt(t, h2signer, other.l, size), []byte("not a checkpoint")} {
		if err := h2.b.PublishCheckpoint(b); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, c, "h2", "rejected", func(s collector.HostStatus) bool { return s.CheckpointsRejected == 2 })
	last := signAt(t, h2signer, h2.l, size)
	if err := h2.b.PublishCheckpoint(last); err != nil {
		t.Fatal(err)
	}
	s := waitStatus(t, c, "h2", "handed on", func(s collector.HostStatus) bool { return s.CheckpointSize == size })
	if g := got.get("h2"); !slices.Equal(g, []string{string(first), string(last)}) || s.State == collector.StateRefused || s.CheckpointsVerified != 0 {
		t.Fatalf("h2 handed on %q, status %+v: want its two checkpoints of its own history, not refused", g, s)
	}
}
