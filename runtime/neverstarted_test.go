//go:build linux

package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
)

// A server whose command does not exist and an acquisition refused at the
// live-lease cap are recorded as facts with no cleanup obligation: the
// projector's audit, replaying the ledger alone, says never_started for
// both (and confirmed for the lease that ran), so a healthy host's audit
// is clean.
func TestRefusalsAuditAsNeverStarted(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxLiveLeases = 1 })
	e.cfg.Set("ts", testServer(nil))
	e.cfg.Set("ghost", ServerConfig{Command: "/nonexistent/leaseledger-no-such-server"})
	ctx := ctxT(t, 60*time.Second)

	s1, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Capability().Tools(ctx, "ghost"); !errors.Is(err, ErrSpawn) {
		t.Fatalf("missing command: %v, want ErrSpawn", err)
	}
	if _, err := s1.Capability().Tools(ctx, "ts"); err != nil {
		t.Fatal(err)
	}
	s2, err := e.m.OpenSession(ctx, "s2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Capability().Tools(ctx, "ts"); !errors.Is(err, ErrTooManyLeases) {
		t.Fatalf("second lease at cap 1: %v, want ErrTooManyLeases", err)
	}
	if err := s2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s1.Release(ctx); err != nil {
		t.Fatal(err)
	}

	st := projector.New()
	for env, err := range e.l.Events(context.Background(), ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(&env); err != nil {
			t.Fatal(err)
		}
	}
	verdicts := map[string]int{}
	for _, a := range st.ActivationIDs() {
		v, reasons, _ := st.Verdict(a)
		verdicts[v]++
		if v == projector.ResultUnconfirmed {
			t.Errorf("activation %s unconfirmed: %v", a, reasons)
		}
	}
	if verdicts[projector.ResultNeverStarted] != 2 || verdicts[projector.ResultConfirmed] != 1 {
		t.Fatalf("verdicts %v, want 2 never_started and 1 confirmed", verdicts)
	}
	if n := count(e.events(), events.Kind("lease.acquire_failed"), nil); n != 2 {
		t.Fatalf("%d lease.acquire_failed, want 2", n)
	}
}
