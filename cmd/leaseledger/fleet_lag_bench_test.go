package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// fleetLagWait bounds the wait for one appended event to reach a bus.
const fleetLagWait = 30 * time.Second

// arrivals records when each seq of one host was first seen on a bus.
type arrivals struct {
	mu   sync.Mutex
	at   map[events.Seq]time.Time
	seen chan struct{} // signalled at each new arrival
}

func watchArrivals(b *testing.B, url, host string) *arrivals {
	b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	a := &arrivals{at: map[events.Seq]time.Time{}, seen: make(chan struct{}, 1)}
	_, err = nc.Subscribe(busclient.HostSubject(host, busclient.EventSubjects()), func(m *nats.Msg) {
		now := time.Now()
		seq, err := strconv.ParseUint(m.Header.Get(busclient.HeaderSeq), 10, 64)
		if err != nil {
			return
		}
		a.mu.Lock()
		if _, ok := a.at[events.Seq(seq)]; !ok {
			a.at[events.Seq(seq)] = now
		}
		a.mu.Unlock()
		select {
		case a.seen <- struct{}{}:
		default:
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	return a
}

// wait returns when seq arrived.
func (a *arrivals) wait(b *testing.B, seq events.Seq) time.Time {
	deadline := time.After(fleetLagWait)
	for {
		a.mu.Lock()
		at, ok := a.at[seq]
		a.mu.Unlock()
		if ok {
			return at
		}
		select {
		case <-a.seen:
		case <-deadline:
			b.Fatalf("seq %d did not arrive within %v", seq, fleetLagWait)
		}
	}
}

// quantile is the q-quantile (0..1) of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// fleetLagSpacing is the pause between appends of BenchmarkFleetLag's
// "spaced" case: longer than the collector's pacing of its live replay
// confirmations (one per host per collector.MinLiveReplayInterval), so
// each event crosses an idle pipeline.
const fleetLagSpacing = 50 * time.Millisecond

// BenchmarkFleetLag measures end-to-end lag between real processes: one
// `serve --host-id h1` and one `collect` mirroring it, both started from
// the built binary. Each iteration appends one event through h1's bus as
// its writer (busclient.Appender) and times from the append's ack to the
// event's arrival on the collector's fleet bus, which publishes it after
// the mirror's fsync. Baselines in the same run: the arrival of the same
// event on h1's own bus and on the collector's cluster peer (collect
// --nats-port: the event reached the collector's process), and the
// append's own latency (request to ack: the host's commit and fsync).
// Two cases: "back-to-back" (the next append as soon as the event
// arrived: a steady stream) and "spaced" (fleetLagSpacing between
// appends). Reported per case: p50/p99 in ms and the ratio of the fleet
// bus's p50 to the append's.
//
//	go test -run '^$' -bench BenchmarkFleetLag -benchtime 1000x ./cmd/leaseledger/
func BenchmarkFleetLag(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "leaseledger")
	if err := testproc.Build(testproc.Binary{Out: bin, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger"}); err != nil {
		b.Fatal(err)
	}
	f := newFleet(b, bin, 1, "")
	h := f.hosts[0]
	h.start()
	f.collector.extra = []string{"--nats-port", "-1"}
	f.collector.start()
	ctx := context.Background()
	head, err := h.head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	f.awaitMirrored(map[string]uint64{h.id: head})

	hostURL, _ := h.endpoints()
	var peerURL string
	for line := range strings.SplitSeq(f.collector.out.String(), "\n") {
		if u, ok := strings.CutPrefix(line, "leaseledger: read-only NATS on "); ok {
			peerURL = u
		}
	}
	w := lagWatch{own: watchArrivals(b, hostURL, h.id), peer: watchArrivals(b, peerURL, h.id),
		fleet: watchArrivals(b, f.collector.fleetURL(), h.id)}
	nc, err := nats.Connect(hostURL, busclient.UserOptions(fleetWriterUser, fleetWriterPass)...)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	w.app = busclient.NewAppender(busclient.NewClient(nc).WithHost(h.id))
	b.Run("back-to-back", func(b *testing.B) { w.run(b, 0) })
	b.Run("spaced", func(b *testing.B) { w.run(b, fleetLagSpacing) })
	if code := f.collector.stop(syscall.SIGTERM); code != 0 {
		b.Fatalf("collect exit %d", code)
	}
	if code := h.stop(syscall.SIGTERM); code != 0 {
		b.Fatalf("%s exit %d", h.id, code)
	}
}

// lagWatch is BenchmarkFleetLag's writer and the buses it watches.
type lagWatch struct {
	app              *busclient.Appender
	own, peer, fleet *arrivals
	n                int // events appended so far
}

func (w *lagWatch) run(b *testing.B, pause time.Duration) {
	ctx := context.Background()
	var lag, own, peer, appendLat []time.Duration
	early := 0 // arrivals on the fleet bus before the writer had its ack
	b.ResetTimer()
	for range b.N {
		w.n++
		d := events.Draft{Activation: "lag", Session: "s1", Server: "srv",
			Payload: &events.CallAdmitted{CallID: fmt.Sprint("c", w.n), Tool: "echo", Digest: strings.Repeat("ab", 32)}}
		sent := time.Now()
		seqs, err := w.app.Append(ctx, d)
		acked := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		appendLat = append(appendLat, acked.Sub(sent))
		at := w.fleet.wait(b, seqs[0])
		if at.Before(acked) {
			early++
		}
		lag = append(lag, max(0, at.Sub(acked)))
		own = append(own, max(0, w.own.wait(b, seqs[0]).Sub(acked)))
		peer = append(peer, max(0, w.peer.wait(b, seqs[0]).Sub(acked)))
		time.Sleep(pause)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"fleet", lag}, {"host", own}, {"peer", peer}, {"append", appendLat}} {
		slices.Sort(m.ds)
		b.ReportMetric(ms(quantile(m.ds, 0.50)), m.name+"-p50-ms")
		b.ReportMetric(ms(quantile(m.ds, 0.99)), m.name+"-p99-ms")
	}
	b.ReportMetric(float64(quantile(lag, 0.50))/float64(quantile(appendLat, 0.50)), "fleet/append-p50")
	b.ReportMetric(float64(early), "early-arrivals")
}
