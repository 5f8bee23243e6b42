package servebench

// The raw Pebble + bare NATS side of the serve-path benchmark: the floor of
// what the serve path does per event without any of the ledger's own
// machinery. Each writer commits its events' bytes to raw Pebble (as the
// raw side does) and then publishes each one, on its subject with the two
// headers the bus sets, through a plain NATS connection to a bare embedded
// NATS server, which delivers it over TCP to one plain subscriber. No
// projection, no chain, no bus limits or permissions, no replay: the ratio
// of the serve path to this side is the cost of the ledger's own work on
// top of storing and fanning out the same bytes.

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/ledgerbench"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsReadyWait bounds how long the bare NATS server may take to accept
// connections.
const natsReadyWait = 10 * time.Second

// publication is one event as the bus publishes it.
type publication struct {
	subject, id, seq string
	data             []byte
}

// newPublication is env's publication, raw its stored bytes.
func newPublication(env *events.Envelope, raw []byte) publication {
	return publication{subject: env.Subject(), id: env.ID.String(), seq: strconv.FormatUint(uint64(env.Seq), 10), data: raw}
}

// runRawBus runs the raw Pebble + bare NATS side (see the top of this
// file): sealed holds the events' bytes, pubs[i] event i's publication.
func runRawBus(ctx context.Context, dir string, cfg ledgerbench.Config, sealed *ledgerbench.Sealed, pubs []publication) (ServeSide, []time.Duration, error) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		return ServeSide{}, nil, fmt.Errorf("servebench: bare NATS: %w", err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(natsReadyWait) {
		return ServeSide{}, nil, fmt.Errorf("servebench: bare NATS not ready within %v", natsReadyWait)
	}
	pub, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return ServeSide{}, nil, fmt.Errorf("servebench: bare NATS publisher: %w", err)
	}
	defer pub.Close()
	subc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return ServeSide{}, nil, fmt.Errorf("servebench: bare NATS subscriber: %w", err)
	}
	defer subc.Close()
	var delivered atomic.Int64
	all := make(chan struct{})
	sub, err := subc.Subscribe(events.SubjectPrefix+">", func(*nats.Msg) {
		if delivered.Add(1) == int64(len(pubs)) {
			close(all)
		}
	})
	if err != nil {
		return ServeSide{}, nil, fmt.Errorf("servebench: bare NATS subscribe: %w", err)
	}
	// Hold what arrives rather than drop it: this side measures the
	// fan-out's cost, not a slow consumer's losses.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return ServeSide{}, nil, err
	}
	if err := subc.Flush(); err != nil {
		return ServeSide{}, nil, err
	}

	side, lat, err := ledgerbench.RunRaw(ctx, dir, cfg, sealed, func(first, n int) error {
		msg := nats.Msg{Header: nats.Header{busclient.HeaderMsgID: {""}, busclient.HeaderSeq: {""}}}
		for _, p := range pubs[first : first+n] {
			msg.Subject, msg.Data = p.subject, p.data
			msg.Header[busclient.HeaderMsgID][0], msg.Header[busclient.HeaderSeq][0] = p.id, p.seq
			if err := pub.PublishMsg(&msg); err != nil {
				return fmt.Errorf("servebench: bare NATS publish: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return ServeSide{}, nil, err
	}
	cpu, since := ledgerbench.StartCPU(), time.Now()
	if err := awaitDelivery(ctx, all, &delivered); err != nil {
		return ServeSide{}, nil, err
	}
	// As on the serve side, the CPU window runs on until the subscriber
	// has every event (Side.CPU): the writers' window, then the wait.
	side.CPU, side.CPUWindow = side.CPU+cpu(), side.Elapsed+time.Since(since)
	return ServeSide{Side: side, Delivered: int(delivered.Load())}, lat, nil
}
