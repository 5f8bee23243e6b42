package bus_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/nats-io/nats.go"
)

// A clustered host announces its id and durable head on its own announce
// subject, across the cluster, at its start and again after every
// interval (the head it announces follows its appends); Close ends the
// announcing goroutine (goleak, TestMain).
func TestHostAnnounces(t *testing.T) {
	co := bus.ClusterOptions{Listen: "127.0.0.1:-1"}
	l1, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: co, AnnounceInterval: 20 * time.Millisecond})
	_, pc := startPeer(t, bus.PeerOptions{Cluster: bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: []string{b1.ClusterURL()}}})
	sub, err := pc.SubscribeSync(busclient.FleetAnnounceSubjects())
	if err != nil {
		t.Fatal(err)
	}
	next := func() busclient.Announcement {
		t.Helper()
		m, err := sub.NextMsg(clusterWait)
		if err != nil {
			t.Fatalf("no announcement: %v", err)
		}
		a, err := busclient.ParseAnnouncement(m.Subject, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := next(); a.Host != "h1" {
		t.Fatalf("announcement %+v, want host h1", a)
	}
	appendActivation(t, l1, 3, "a")
	for a := next(); a.Head != 3; a = next() {
		if a.Host != "h1" || a.Head > 3 {
			t.Fatalf("announcement %+v, want h1 at head 3", a)
		}
	}
	b1.Close()
}

// Only a host's own bus may publish its announcement: its own clients
// (anonymous or named) and another host's clients get a permission
// violation, so no member of the cluster but the host's server (and a
// Peer's full Connect, the collector's own) can announce a host.
func TestAnnounceOnlyByItsHost(t *testing.T) {
	co := func(routes ...string) bus.ClusterOptions {
		return bus.ClusterOptions{Listen: "127.0.0.1:-1", Routes: routes}
	}
	_, b1 := startBus(t, bus.Options{HostID: "h1", Cluster: co(), WriterUser: "w", WriterPassword: "wpw"})
	_, b2 := startBus(t, bus.Options{HostID: "h2", Cluster: co(b1.ClusterURL())})
	for name, c := range map[string]struct {
		url  string
		opts []nats.Option
	}{
		"h1 anonymous": {b1.ClientURL(), nil},
		"h1 writer":    {b1.ClientURL(), busclient.UserOptions("w", "wpw")},
		"h2 anonymous": {b2.ClientURL(), nil},
	} {
		errs := make(chan error, 16)
		nc := connect(t, c.url, append(c.opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))...)
		subject := busclient.HostSubject("h1", busclient.AnnounceSubject)
		if err := nc.Publish(subject, []byte(`{"host":"h1","head":999}`)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
				t.Errorf("%s: %v, want a permissions violation", name, err)
			}
		case <-time.After(clusterWait):
			t.Errorf("%s: published %s without a permissions violation", name, subject)
		}
	}
}

// ParseAnnouncement takes only an announcement naming the host of its
// subject, within MaxAnnouncementBytes.
func TestParseAnnouncement(t *testing.T) {
	subject := busclient.HostSubject("h1", busclient.AnnounceSubject)
	if a, err := busclient.ParseAnnouncement(subject, []byte(`{"host":"h1","head":4}`)); err != nil || a.Head != 4 {
		t.Fatalf("%+v %v", a, err)
	}
	for name, c := range map[string]struct{ subject, data string }{
		"other host": {subject, `{"host":"h2","head":4}`},
		"not JSON":   {subject, `x`},
		"bare":       {busclient.AnnounceSubject, `{"host":"h1"}`},
		"too large":  {subject, `{"host":"h1","x":"` + strings.Repeat("x", busclient.MaxAnnouncementBytes) + `"}`},
	} {
		if _, err := busclient.ParseAnnouncement(c.subject, []byte(c.data)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
