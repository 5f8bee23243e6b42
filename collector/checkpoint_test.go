package collector_test

import (
	"context"
	"crypto/rand"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/collector"
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
	sign := func(s note.Signer, h *testHost) []byte {
		t.Helper()
		cp, err := verify.NewCheckpoint(context.Background(), h.l, "h1.example/log")
		if err != nil {
			t.Fatal(err)
		}
		b, err := cp.Sign(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
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
