package collector_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// writes records every event the collector's mirrors actually store: a
// Watch observer on each mirror, attached by Options.OpenMirror before
// the collector imports anything, so "stored exactly once" is counted
// from the ledger's commits, not from the collector's own Imported.
type writes struct {
	mu     sync.Mutex
	stored map[string]map[events.Seq][][]byte // host, seq: the bytes of each store
	lagged []string                           // ranges the observer missed (the count is then unknown)
}

func newWrites() *writes { return &writes{stored: map[string]map[events.Seq][][]byte{}} }

// watch sets o.OpenMirror to open each mirror watched by w.
func (w *writes) watch(o *collector.Options) {
	o.OpenMirror = func(_ context.Context, host string, lo ledger.Options) (*ledger.Ledger, io.Closer, error) {
		l, err := ledger.Open(lo)
		if err != nil {
			return nil, nil, err
		}
		l.Watch(&hostWrites{w: w, host: host}) // ends at the ledger's Close, after delivering what is queued
		return l, nil, nil
	}
}

type hostWrites struct {
	w    *writes
	host string
}

func (h *hostWrites) Committed(batch []ledger.Record) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	m := h.w.stored[h.host]
	if m == nil {
		m = map[events.Seq][][]byte{}
		h.w.stored[h.host] = m
	}
	for _, r := range batch {
		m[r.Env.Seq] = append(m[r.Env.Seq], bytes.Clone(r.Raw))
	}
}

func (h *hostWrites) Lagged(from, to ledger.Seq) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.w.lagged = append(h.w.lagged, fmt.Sprintf("%s %d..%d", h.host, from, to))
}

// count is how many events w saw stored for host.
func (w *writes) count(host string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.stored[host] {
		n += len(s)
	}
	return uint64(n)
}

// assertOnce checks that every seq of source's chain was stored in host's
// mirror exactly once, with source's bytes, and nothing else was. Call it
// after the collectors whose mirrors w watched are closed (Close delivers
// every queued batch to the observer).
func (w *writes) assertOnce(t testing.TB, host string, source *ledger.Ledger) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lagged) > 0 {
		t.Fatalf("the write observer missed %v: the counts are unknown", w.lagged)
	}
	head := source.Head().Seq
	stored := w.stored[host]
	for seq := events.Seq(1); seq <= head; seq++ {
		want, err := source.GetRaw(seq)
		if err != nil {
			t.Fatal(err)
		}
		switch got := stored[seq]; {
		case len(got) != 1:
			t.Fatalf("host %s seq %d stored %d times, want once", host, seq, len(got))
		case !bytes.Equal(got[0], want):
			t.Fatalf("host %s seq %d stored as\n%s\nwant\n%s", host, seq, got[0], want)
		}
	}
	if len(stored) != int(head) {
		t.Fatalf("host %s: %d seqs stored, want %d (1..%d)", host, len(stored), head, head)
	}
}
