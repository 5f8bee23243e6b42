package bus_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/nats-io/nats.go"
)

// Every bus user may follow the checkpoints the bus publishes; no client
// may publish on their subject (a forged checkpoint could only fail its
// signature, but it would still be noise on a subject witnesses follow).
func TestCheckpointSubject(t *testing.T) {
	_, b := startBus(t, bus.Options{ReadOnlyUser: "ro", ReadOnlyPassword: "pw"})
	anon := connect(t, b.ClientURL())
	ro := connect(t, b.ClientURL(), busclient.UserOptions("ro", "pw")...)
	var subs []*nats.Subscription
	for _, nc := range []*nats.Conn{anon, ro} {
		sub, err := nc.SubscribeSync(busclient.CheckpointSubject)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := b.PublishCheckpoint([]byte("signed note\n")); err != nil {
		t.Fatal(err)
	}
	for i, sub := range subs {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil || string(m.Data) != "signed note\n" {
			t.Fatalf("subscriber %d: %v %q", i, err, m.Data)
		}
	}
	if err := ro.Publish(busclient.CheckpointSubject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	_ = ro.Flush()
	testproc.Eventually(t, "the server refuses a client's checkpoint", func() error {
		if err := ro.LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
			return fmt.Errorf("last error %v", err)
		}
		return nil
	})
	if m, err := subs[0].NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a client's publication arrived: %q", m.Data)
	}
	b.Close()
	if err := b.PublishCheckpoint([]byte("x")); err == nil {
		t.Fatal("published after Close")
	}
}
