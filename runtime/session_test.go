//go:build linux

package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// OpenSessionWith records session.opened (principal, transport) durably
// before it returns, ahead of every other event of the session; plain
// OpenSession records transport embedded and no principal.
func TestSessionOpenedRecorded(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	s, err := p.m.OpenSessionWith(ctx, "gw-1", SessionOptions{Principal: "team-a", Transport: events.SessionMCPHTTP})
	if err != nil {
		t.Fatal(err)
	}
	evs := p.events()
	if len(evs) != 1 || evs[0].Kind != "session.opened" || evs[0].Session != "gw-1" || evs[0].Activation != "" {
		t.Fatalf("events after OpenSessionWith: %+v", evs)
	}
	if got := evs[0].Payload.(*events.SessionOpened); *got != (events.SessionOpened{Principal: "team-a", Transport: events.SessionMCPHTTP}) {
		t.Fatalf("payload %+v", got)
	}
	if _, err := s.Capability().Tools(ctx, "fs"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	kinds := strings.Join(p.kinds(""), ",")
	if !strings.HasPrefix(kinds, "session.opened,lease.acquiring,") || count(p.events(), "session.opened", nil) != 1 {
		t.Fatalf("kinds: %s", kinds)
	}

	plain := p.open("plain")
	evs = p.events()
	last := evs[len(evs)-1]
	if got, ok := last.Payload.(*events.SessionOpened); !ok || last.Session != plain.Session() || *got != (events.SessionOpened{Transport: events.SessionEmbedded}) {
		t.Fatalf("OpenSession recorded %+v", last)
	}
}

// A malformed principal or session, or an unknown transport, is
// ErrInvalidRequest and records nothing; the session can then be opened.
func TestSessionOpenInvalid(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	for _, o := range []SessionOptions{
		{Principal: "team a"},
		{Principal: "tok/1"},
		{Principal: strings.Repeat("p", 129)},
		{Principal: "team-a", Transport: "grpc"},
	} {
		if _, err := p.m.OpenSessionWith(ctx, "s1", o); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%+v: %v, want ErrInvalidRequest", o, err)
		}
	}
	if _, err := p.m.OpenSessionWith(ctx, SharedSessionKey, SessionOptions{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("shared key: %v", err)
	}
	if n := len(p.events()); n != 0 {
		t.Fatalf("%d events recorded for refused opens", n)
	}
	_ = p.open("s1")
}

// A failed record is ErrLedger and leaves the session closed: the same id
// opens once the ledger works again.
func TestSessionOpenLedgerFailure(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	broken := errors.New("disk on fire")
	p.l.fail.Store(&broken)
	if _, err := p.m.OpenSessionWith(ctx, "s1", SessionOptions{Principal: "team-a"}); !errors.Is(err, ErrLedger) {
		t.Fatalf("open on a failing ledger: %v, want ErrLedger", err)
	}
	p.l.fail.Store(nil)
	s := p.open("s1")
	if _, err := s.Capability().Tools(ctx, "fs"); err != nil {
		t.Fatal(err)
	}
}

// While session.opened is being recorded the id is taken: a concurrent
// open of it fails with ErrSessionOpen.
func TestSessionOpenConcurrent(t *testing.T) {
	p := newPolicyEnv(t, nil)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	p.l.setBefore(func(d []events.Draft) {
		if d[0].Payload.Kind() == "session.opened" && d[0].Session == "s1" {
			select {
			case <-entered:
			default:
				close(entered)
				<-release
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		s, err := p.m.OpenSession(ctx, "s1")
		if err == nil {
			err = s.Release(ctx)
		}
		done <- err
	}()
	<-entered
	if _, err := p.m.OpenSession(ctx, "s1"); !errors.Is(err, ErrSessionOpen) {
		t.Fatalf("concurrent open: %v, want ErrSessionOpen", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
