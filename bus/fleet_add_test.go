package bus_test

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/ledger"
)

// A space added while the fleet runs (FleetOptions.AddSpaces, even from
// none) is served as one given at the start: head and replay from its
// ledger, its commits published from then on, its services (granted by
// SpaceServices) answered; a repeated, invalid or ungranted space, one on a
// fleet without AddSpaces and one after Close are refused.
func TestFleetAddSpace(t *testing.T) {
	echo := func(h string) []bus.Service {
		return []bus.Service{{Subject: readSubject, Access: bus.AccessRead,
			Handle: func(_ context.Context, caller string, body []byte) ([]byte, error) {
				return []byte(h + ":" + string(body)), nil
			}}}
	}
	f := startFleet(t, bus.FleetOptions{AddSpaces: true, SpaceServices: echo("template")})
	nc := connect(t, f.ClientURL())
	c := busclient.NewClient(nc).WithHost("h1")
	if _, err := c.Head(context.Background()); err == nil {
		t.Fatal("h1 answered before it had a space")
	}
	l := openLedger(t, ledger.Options{})
	appendActivation(t, l, 5, "before")
	if err := f.AddSpace(bus.Space{HostID: "h1", Ledger: l, Services: echo("h1")}); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync(busclient.FleetEventSubjects())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if head, err := c.Head(context.Background()); err != nil || head.Seq != 5 || head.Hash != l.Head().Hash.String() {
		t.Fatalf("head %+v %v, ledger %+v", head, err, l.Head())
	}
	appendActivation(t, l, 2, "after")
	for seq := ledger.Seq(6); seq <= 7; seq++ {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("seq %d not published: %v", seq, err)
		}
		if raw, _ := l.GetRaw(seq); !bytes.Equal(m.Data, raw) {
			t.Fatalf("seq %d: published %q, stored %q", seq, m.Data, raw)
		}
	}
	var seen [][]byte
	if _, err := c.Replay(context.Background(), 1, 0, busclient.TailFilter{}, func(_ ledger.Seq, raw []byte) error {
		seen = append(seen, bytes.Clone(raw))
		return nil
	}); err != nil || !reflect.DeepEqual(seen, raws(t, l, 1, 7)) {
		t.Fatalf("replayed %d events (%v), the ledger holds 7", len(seen), err)
	}
	if m, err := call(nc, busclient.HostSubject("h1", readSubject), "", []byte("x"), 5*time.Second); err != nil || string(m.Data) != "h1:x" {
		t.Fatalf("h1's service: %v %v", m, err)
	}
	ungranted := []bus.Service{{Subject: "leaseledger.api.other", Access: bus.AccessRead, Handle: echo("x")[0].Handle}}
	for name, s := range map[string]bus.Space{
		"repeated":  {HostID: "h1", Ledger: l},
		"invalid":   {HostID: "a.b", Ledger: l},
		"no ledger": {HostID: "h2"},
		"ungranted": {HostID: "h2", Ledger: l, Services: ungranted},
	} {
		if err := f.AddSpace(s); !errors.Is(err, bus.ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
	fixed := startFleet(t, bus.FleetOptions{Spaces: []bus.Space{{HostID: "h1", Ledger: l}}})
	if err := fixed.AddSpace(bus.Space{HostID: "h2", Ledger: l}); !errors.Is(err, bus.ErrOptions) {
		t.Errorf("without AddSpaces: %v, want ErrOptions", err)
	}
	f.Close()
	if err := f.AddSpace(bus.Space{HostID: "h3", Ledger: l}); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
