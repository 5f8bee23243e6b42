package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/nats-io/nats.go"
)

// TestAppendHostBoundRefused: a raw append holding a host.bound (only
// ledger.BindHost writes it) is refused as a bad request naming the kind,
// with or without an idempotency key, and nothing of it is written; the
// client sees a refusal, not an append in doubt.
func TestAppendHostBoundRefused(t *testing.T) {
	l, b := startBus(t, bus.Options{WriterUser: "host", WriterPassword: "pw"})
	nc := connect(t, b.ClientURL(), busclient.UserOptions("host", "pw")...)
	body := []byte(`{"kind":"lease.terminated","activation":"a1","data":{"reason":"revoked"}}
{"kind":"host.bound","data":{"host":"h2"}}
{"kind":"session.ended","session":"s1","data":{"leases_terminated":2,"shared_spared":1}}
`)
	for _, key := range []string{"", "k-hostbound"} {
		msg := nats.NewMsg(busclient.UserSubject(busclient.AppendSubject, "host"))
		msg.Data = body
		if key != "" {
			msg.Header.Set(busclient.HeaderIdempotencyKey, key)
		}
		r, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		if code, text := r.Header.Get(busclient.HeaderErrorCode), r.Header.Get(busclient.HeaderError); code != busclient.CodeBadRequest || !strings.Contains(text, "host.bound") || len(r.Data) != 0 {
			t.Fatalf("key %q: code %q, error %q, %d bytes of acks", key, code, text, len(r.Data))
		}
	}
	_, err := busclient.NewClient(nc).Append(context.Background(), body)
	if !errors.Is(err, busclient.ErrRemote) || errors.Is(err, busclient.ErrInDoubt) {
		t.Fatalf("client: %v, want a refusal", err)
	}
	if h := l.Head().Seq; h != 0 {
		t.Fatalf("a refused append wrote: head %d", h)
	}
}
