package busclient_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/nats-io/nats.go"
)

// BenchmarkAppendIdempotencyKeys measures appends over NATS with an
// idempotency key per request against the same requests without one, in
// one run against one bus, interleaving rounds of both sides (so that
// drift of the shared machine affects both alike), 32 concurrent writers
// of one-event requests. It reports both rates and keyed/unkeyed.
//
//	go test -run '^$' -bench AppendIdempotencyKeys -benchtime 1x ./bus/busclient
func BenchmarkAppendIdempotencyKeys(b *testing.B) {
	const writers, perRound, rounds = 32, 2000, 6
	l := open(b, b.TempDir())
	defer l.Close()
	bs, err := bus.Start(l, bus.Options{Port: bus.RandomPort, WriterUser: "w", WriterPassword: "pw", Limits: bus.Limits{WriterRequestRate: 1e9, WriterRequestBurst: 1e9}})
	if err != nil {
		b.Fatal(err)
	}
	defer bs.Close()
	nc, err := nats.Connect(bs.ClientURL(), busclient.UserOptions("w", "pw")...)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	line := []byte(`{"kind":"lease.terminated","activation":"act-1","data":{"reason":"revoked"}}` + "\n")
	round := func(keyed bool, r int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := w; i < perRound; i += writers {
					m := nats.NewMsg(busclient.UserSubject(busclient.AppendSubject, "w"))
					m.Data = line
					if keyed {
						m.Header.Set(busclient.HeaderIdempotencyKey, fmt.Sprintf("r%d-%d", r, i))
					}
					reply, err := nc.RequestMsg(m, 30*time.Second)
					if err != nil || reply.Header.Get(busclient.HeaderError) != "" {
						b.Error(err, reply)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	round(false, -1) // warm up: the first round pays for connections, caches, the first memtable
	round(true, -2)
	var keyed, plain time.Duration
	iters := 0
	for b.Loop() {
		iters++
		for r := range rounds {
			if (r+iters)%2 == 0 {
				plain += round(false, r)
				keyed += round(true, r)
			} else {
				keyed += round(true, r)
				plain += round(false, r)
			}
		}
	}
	n := float64(iters * rounds * perRound)
	b.ReportMetric(n/plain.Seconds(), "unkeyed-appends/s")
	b.ReportMetric(n/keyed.Seconds(), "keyed-appends/s")
	b.ReportMetric(plain.Seconds()/keyed.Seconds(), "keyed/unkeyed")
}
