package control

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/audit"
	"github.com/leaseledger/leaseledger/projector/live"
)

// The page selection orders leases exactly as their key strings do
// ("<session>/<server>"), '/' included, and compares them with cursors
// the same way, without building the keys.
func TestKeyOrderIsStringOrder(t *testing.T) {
	const alphabet = "a-.b/_Z0"
	word := func(r *rand.Rand, min int) string {
		n := min + r.IntN(4)
		var b strings.Builder
		for range n {
			c := alphabet[r.IntN(len(alphabet))]
			if c == '/' {
				c = '_'
			}
			b.WriteByte(c)
		}
		return b.String()
	}
	sign := func(c int) int { return max(-1, min(1, c)) }
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		a := &projector.Lease{KeySession: word(r, 1), Server: word(r, 1)}
		b := &projector.Lease{KeySession: word(r, 1), Server: word(r, 1)}
		if r.IntN(3) == 0 {
			b.KeySession = a.KeySession
		}
		ka, kb := a.Key().String(), b.Key().String()
		if got, want := cmpLease(a, b), strings.Compare(ka, kb); sign(got) != want {
			t.Fatalf("cmpLease(%q, %q) = %d, want %d", ka, kb, got, want)
		}
		cursor := word(r, 0)
		switch r.IntN(3) {
		case 0:
			cursor = kb
		case 1:
			cursor = ka[:r.IntN(len(ka)+1)]
		}
		if got, want := cmpKey(a.KeySession, a.Server, cursor), strings.Compare(ka, cursor); sign(got) != want {
			t.Fatalf("cmpKey(%q, %q) = %d, want %d", ka, cursor, got, want)
		}
	}
}

// While an audit summary is being computed, another request is refused
// busy at once instead of queueing behind it; the computed summary is then
// served from the cache.
func TestAuditBusyWhileComputing(t *testing.T) {
	p, err := live.Open(context.Background(), live.Options{Ledger: ledger.Options{Dir: t.TempDir()}, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	h := &projection{p: p, summarize: func(s *projector.State, limit int) audit.Summary {
		close(entered)
		<-release
		return audit.Summarize(s, limit)
	}}
	done := make(chan error, 1)
	go func() {
		_, err := h.audit(context.Background(), "", &AuditRequest{})
		done <- err
	}()
	<-entered
	_, err = h.audit(context.Background(), "", &AuditRequest{})
	var be *bus.Error
	if !errors.As(err, &be) || be.Code != bus.CodeBusy {
		t.Fatalf("second request while computing: %v, want code %q", err, bus.CodeBusy)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := h.audit(context.Background(), "", &AuditRequest{}); err != nil {
		t.Fatalf("from the cache: %v", err)
	}
}
