package busclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
)

// The protocol's own subjects, which every host qualifies.
var protocolSubjects = []string{
	busclient.ReplaySubject, busclient.HeadSubject, busclient.AppendSubject, busclient.APISubjects,
	busclient.CheckpointSubject, busclient.EventSubjects(), events.Subject("lease.acquired", "A1"),
	busclient.UserSubject(busclient.ReplaySubject, "reader"),
}

func TestHostSubjectTable(t *testing.T) {
	for _, c := range []struct{ host, in, want string }{
		{"h1", "leaseledger.events.lease.acquired.A1", "leaseledger.hosts.h1.events.lease.acquired.A1"},
		{"h1", "leaseledger.api.replay", "leaseledger.hosts.h1.api.replay"},
		{"h1", "leaseledger.api.replay.reader", "leaseledger.hosts.h1.api.replay.reader"},
		{"h1", "leaseledger.checkpoints", "leaseledger.hosts.h1.checkpoints"},
		{"host-2_B", "leaseledger.api.>", "leaseledger.hosts.host-2_B.api.>"},
		{"h1", "_INBOX.abc", "_INBOX.abc"}, // not a ledger subject
		{"h1", "leaseledgerx.api", "leaseledgerx.api"},
		{"", "leaseledger.api.replay", "leaseledger.api.replay"},
	} {
		if got := busclient.HostSubject(c.host, c.in); got != c.want {
			t.Errorf("HostSubject(%q, %q) = %q, want %q", c.host, c.in, got, c.want)
		}
	}
	if got, want := busclient.FleetEventSubjects(), "leaseledger.hosts.*.events.*.*.*"; got != want {
		t.Errorf("FleetEventSubjects() = %q, want %q", got, want)
	}
}

// The bare space (host "") is byte-identical to the subjects of a bus
// without a host id.
func TestHostSubjectBareIsIdentity(t *testing.T) {
	for _, s := range protocolSubjects {
		if got := busclient.HostSubject("", s); got != s {
			t.Errorf("HostSubject(\"\", %q) = %q", s, got)
		}
		if h, ok := busclient.HostOfSubject(s); ok {
			t.Errorf("HostOfSubject(%q) = %q, true on a bare subject", s, h)
		}
	}
}

// HostOfSubject inverts HostSubject for every valid host id, and refuses
// anything that is not a qualified subject.
func TestHostOfSubjectRoundTrip(t *testing.T) {
	for _, host := range []string{"h1", "H", "a-b_c9", strings.Repeat("x", 128)} {
		for _, s := range protocolSubjects {
			q := busclient.HostSubject(host, s)
			got, ok := busclient.HostOfSubject(q)
			if !ok || got != host {
				t.Errorf("HostOfSubject(%q) = %q, %v; want %q", q, got, ok, host)
			}
		}
	}
	for _, s := range []string{"leaseledger.hosts.", "leaseledger.hosts.h1", "leaseledger.hosts.h1.", "leaseledger.hosts.h%1.api.head", "leaseledger.hosts..api.head", "x.leaseledger.hosts.h1.api"} {
		if h, ok := busclient.HostOfSubject(s); ok {
			t.Errorf("HostOfSubject(%q) = %q, true", s, h)
		}
	}
}

// A client made WithHost(h) on a bus of host h heads, replays, tails and
// appends in h's space; the same client without the host finds nothing.
func TestClientWithHostOnHostBus(t *testing.T) {
	l, b := startBus(t, bus.Options{HostID: "h1", WriterUser: "w", WriterPassword: "pw"})
	appendN(t, l, 10)
	nc := connect(t, b.ClientURL(), busclient.UserOptions("w", "pw")...)
	c := busclient.NewClient(nc).WithHost("h1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if h, err := c.Head(ctx); err != nil || h.Seq != 10 {
		t.Fatalf("head: %+v, %v", h, err)
	}
	if _, err := busclient.NewAppender(c).Append(ctx, draft("a9", "s", 99)); err != nil {
		t.Fatalf("append in h1's space: %v", err)
	}
	var got []events.Seq
	stop := errors.New("enough")
	err := c.Tail(ctx, 1, busclient.TailFilter{}, func(seq events.Seq, raw []byte) error {
		got = append(got, seq)
		if len(got) == 11 {
			go func() { _, _ = l.Append(context.Background(), draft("a9", "s", 100)) }() // one more, live
		}
		if len(got) == 12 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("tail: %v after %v", err, got)
	}
	for i, seq := range got {
		if seq != events.Seq(i+1) {
			t.Fatalf("tail delivered %v: gap or duplicate", got)
		}
	}
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	if _, err := busclient.NewClient(nc).Head(short); err == nil {
		t.Error("the bare space answered on a host's bus")
	}
}
