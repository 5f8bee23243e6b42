// Package servebench measures the path `leaseledger serve` runs behind an
// acknowledgement — the log opened through the live projection, the
// embedded bus publishing every event, a subscriber following them — against
// ledgerbench's raw Pebble floor of the same bytes, alone and followed by a
// bare NATS publication, in one run and as ratios (RunServe, `leaseledger
// bench append --path serve`); and grows ledgers of gateway traffic as serve
// writes them (Grow, `leaseledger bench grow`). It sits above the layers,
// like cmd: it ties the projection, the bus and the log together.
package servebench

// The serve path: what `leaseledger serve` runs behind an acknowledgement,
// not only the bare log. A side of this benchmark opens the ledger through
// projector/live (the projection as the BeforeAck observer, periodic
// snapshots), starts the embedded NATS bus (bus, publishing every
// committed event) with one real subscriber connected over TCP following
// every event (busclient's Tail, as clients do), and appends a gateway's traffic: each writer drives its
// own activations through their lifecycle (lease, guardian, connection,
// HTTP requests, call.admitted/call.finished pairs, barriers, close).
//
// Four sides run each round, interleaved like ledgerbench.Run's:
//
//   - serve: the full path, periodic snapshots off (SnapshotEvery < 0);
//   - serve+snapshots: the same with a snapshot every Config.SnapshotEvery
//     events, so that snapshots run during the measurement;
//   - raw: raw Pebble Sync commits of the same keys and values;
//   - raw+NATS: raw's commits, each followed by the bare NATS publication
//     of its events to one subscriber (rawbus.go): the floor of storing and
//     fanning out the same bytes, without the ledger's own work.
//
// Besides rates and ratios it reports acknowledgement latency (one Append
// call, from call to return) p50 and p99 of each side, and the p99 of the
// snapshot side over the p99 of the side without snapshots.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgerbench"
	"github.com/leaseledger/leaseledger/projector/live"
)

// Config describes one RunServe: ledgerbench's sides and rounds, and the
// snapshot interval of the side that measures acknowledgements while
// snapshots run.
type Config struct {
	ledgerbench.Config
	// SnapshotEvery is the events between periodic snapshots on the side
	// with snapshots; it must be positive.
	SnapshotEvery int
}

// activationEvents is the number of events of one generated activation's
// lifecycle (6 opening, the body, 11 closing).
const activationEvents = 64

// subscriberWait bounds how long a serve side waits, after its last ack,
// for the subscriber to receive every event, and subscriberStall how long
// it waits without the subscriber receiving anything (events the bus
// dropped never arrive); past either the side reports what arrived
// (Delivered) rather than hang.
const (
	subscriberWait  = 30 * time.Second
	subscriberStall = 2 * time.Second
)

// awaitDelivery waits until all is closed, or delivered stops growing for
// subscriberStall, or subscriberWait passes.
func awaitDelivery(ctx context.Context, all <-chan struct{}, delivered *atomic.Int64) error {
	deadline := time.After(subscriberWait)
	tick := time.NewTicker(subscriberStall / 10)
	defer tick.Stop()
	last, since := delivered.Load(), time.Now()
	for {
		select {
		case <-all:
			return nil
		case <-deadline:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if n := delivered.Load(); n != last {
				last, since = n, time.Now()
			} else if time.Since(since) >= subscriberStall {
				return nil
			}
		}
	}
}

// Latency is a side's acknowledgement latency distribution.
type Latency struct {
	P50, P99, Max time.Duration
}

// ServeSide is one serve-path side's measurement.
type ServeSide struct {
	ledgerbench.Side
	Latency Latency
	// Delivered is how many events the bus subscriber (busclient Tail:
	// live publication, holes filled by replay) received within
	// subscriberWait of the last ack, each seq counted once.
	Delivered int
	// Redelivered counts deliveries of a seq already delivered, or of one
	// the side never wrote: Tail promises none, so any is a finding the
	// table prints, not a number folded into Delivered.
	Redelivered int
	// Snapshots is how many rounds found a periodic snapshot stored
	// before the side closed (0 for the side without snapshots).
	Snapshots int
}

// ServeResult is a finished RunServe.
type ServeResult struct {
	Config    Config
	Serve     ServeSide        // full path, no periodic snapshots
	Snapshots ServeSide        // full path, a snapshot every Config.SnapshotEvery events
	Raw       ledgerbench.Side // raw Pebble Sync commits of the same keys and values
	RawLat    Latency
	// RawBus is raw's commits with the bare NATS publication of their
	// events (rawbus.go), and RawBusLat its latency per commit and publish.
	RawBus    ServeSide
	RawBusLat Latency
	// EventBytes is the mean size of one stored event.
	EventBytes int
}

// Ratio is the serve path (no snapshots) over raw Pebble, same keys.
func (r ServeResult) Ratio() float64 { return ledgerbench.Ratio(r.Serve.Side, r.Raw) }

// SnapshotRatio is the serve path with snapshots over raw Pebble.
func (r ServeResult) SnapshotRatio() float64 { return ledgerbench.Ratio(r.Snapshots.Side, r.Raw) }

// BusFloorRatio is the serve path (no snapshots) over raw Pebble with the
// bare NATS publication of the same events: what is left of the gap to
// raw Pebble once the fan-out of every event is charged to both.
func (r ServeResult) BusFloorRatio() float64 { return ledgerbench.Ratio(r.Serve.Side, r.RawBus.Side) }

// CPURatio is raw Pebble's CPU per event over the serve path's (no
// snapshots): where throughput is noisy, the steadier figure of the serve
// path's cost; with Serve.Cores well under the machine's cores the serve
// path was bound by waiting, not CPU, and Ratio falls below it.
func (r ServeResult) CPURatio() float64 { return ledgerbench.CPURatio(r.Serve.Side, r.Raw) }

// P99Ratio is the acknowledgement p99 with snapshots running over the p99
// without (goal ≤ 2).
func (r ServeResult) P99Ratio() float64 {
	if r.Serve.Latency.P99 <= 0 {
		return 0
	}
	return float64(r.Snapshots.Latency.P99) / float64(r.Serve.Latency.P99)
}

// String prints r as a table.
func (r ServeResult) String() string {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return fmt.Sprintf("path=serve concurrency=%d batch=%d events/round=%d rounds=%d snapshot_every=%d event_bytes=%d\n"+
		"serve (projection + bus + subscriber):      %10.0f events/s  ack p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  delivered %d/%d%s%s\n"+
		"serve with periodic snapshots:              %10.0f events/s  ack p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  delivered %d/%d  snapshots seen %d/%d rounds%s%s\n"+
		"raw pebble Sync, same keys and values:      %10.0f events/s  ack p50 %7.2f ms  p99 %7.2f ms%s\n"+
		"raw pebble Sync + bare NATS publication:    %10.0f events/s  ack p50 %7.2f ms  p99 %7.2f ms  delivered %d/%d%s\n"+
		"ratio serve / raw same keys:                %10.3f\n"+
		"ratio serve / raw + bare NATS:              %10.3f\n"+
		"cpu ratio raw / serve per event:            %10.3f\n"+
		"cpu ratio raw + bare NATS / serve:          %10.3f\n"+
		"ratio serve with snapshots / raw:           %10.3f\n"+
		"ack p99 with snapshots / without:           %10.3f\n"+
		"serve events per Pebble commit:             %10.1f",
		r.Config.Concurrency, r.Config.Batch, r.Config.Events, r.Config.Rounds, r.Config.SnapshotEvery, r.EventBytes,
		r.Serve.Rate(), ms(r.Serve.Latency.P50), ms(r.Serve.Latency.P99), ms(r.Serve.Latency.Max), r.Serve.Delivered, r.Serve.Events, redelivered(r.Serve), ledgerbench.CPUCell(r.Serve.Side),
		r.Snapshots.Rate(), ms(r.Snapshots.Latency.P50), ms(r.Snapshots.Latency.P99), ms(r.Snapshots.Latency.Max), r.Snapshots.Delivered, r.Snapshots.Events, r.Snapshots.Snapshots, r.Config.Rounds, redelivered(r.Snapshots), ledgerbench.CPUCell(r.Snapshots.Side),
		r.Raw.Rate(), ms(r.RawLat.P50), ms(r.RawLat.P99), ledgerbench.CPUCell(r.Raw),
		r.RawBus.Rate(), ms(r.RawBusLat.P50), ms(r.RawBusLat.P99), r.RawBus.Delivered, r.RawBus.Events, ledgerbench.CPUCell(r.RawBus.Side),
		r.Ratio(), r.BusFloorRatio(), r.CPURatio(), ledgerbench.CPURatio(r.Serve.Side, r.RawBus.Side), r.SnapshotRatio(), r.P99Ratio(), float64(r.Serve.Events)/float64(max(1, r.Serve.Commits)))
}

// redelivered says how many deliveries repeated a seq, when any did.
func redelivered(s ServeSide) string {
	if s.Redelivered == 0 {
		return ""
	}
	return fmt.Sprintf("  REDELIVERED %d", s.Redelivered)
}

// gatewayLifecycle is one activation's events as the gateway and runtime
// write them, in order: lease acquisition with its guardian, the
// connection, HTTP requests and tool calls, and the close with every
// barrier and the guardian's receipt. It holds activationEvents events.
func gatewayLifecycle(a, sess string, pid int) []events.Draft {
	const digest = "abababababababababababababababababababababababababababababababab"
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: a, Session: sess, Server: "github", Payload: p}
	}
	out := make([]events.Draft, 0, activationEvents)
	out = append(out,
		d(&events.LeaseAcquiring{KeySession: sess, Fingerprint: digest}),
		d(&events.LeaseChildStarted{PID: pid, GuardianPID: pid + 1, Cleanup: events.CleanupVerified}),
		d(&events.GuardianStarted{GuardianPID: pid + 1, TargetPID: pid, HelperVersion: "leaseledger-guardian/1", PIDFD: true}),
		d(&events.LeaseListingPinned{ToolCount: 12, Pages: 1, ListingBytes: 4096, ListingDigest: digest}),
		d(&events.LeaseAcquired{Fingerprint: digest, DurationNS: 1000}),
		d(&events.ConnectionOpened{Transport: events.TransportHTTP, Cleanup: events.CleanupVerified, OneShot: true}),
	)
	const closing = 11
	for i := 0; len(out) < activationEvents-closing; i++ {
		if i%6 == 0 && len(out)+4 <= activationEvents-closing {
			ref := fmt.Sprintf("h-%d", i)
			out = append(out,
				d(&events.HTTPRegistered{Ref: ref, Scope: "request", Method: events.HTTPPost, Origin: "https://mcp.example.com"}),
				d(&events.HTTPCompleted{Ref: ref, Status: 200, Outcome: events.HTTPOK, BodyBytes: 512}),
				d(&events.HTTPBarrier{Ref: ref, Outcome: events.HTTPBarrierOK}),
				d(&events.HTTPWorkerDown{Ref: ref, Worker: "w-" + ref, Reason: "normal"}))
			continue
		}
		call := fmt.Sprintf("c-%d", i)
		out = append(out, d(&events.CallAdmitted{CallID: call, Tool: "search_issues", Digest: digest}))
		if len(out) < activationEvents-closing {
			out = append(out, d(&events.CallFinished{CallID: call, Tool: "search_issues", Outcome: events.CallOK, DurationNS: 1000,
				ArgsBytes: 10, ArgsSHA256: digest, ResultBytes: 100, ResultSHA256: digest}))
		}
	}
	now := events.At(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	return append(out,
		d(&events.ConnectionPhase{Phase: events.PhaseClosing, BudgetNS: 5e9}),
		d(&events.GuardianSignal{TargetPID: pid, Signal: events.SignalTERM, At: now, Alive: true}),
		d(&events.GuardianReaped{TargetPID: pid, ExitCode: -1, Signal: string(events.SignalTERM), At: now}),
		d(&events.GuardianReceipt{HelperVersion: "leaseledger-guardian/1", TargetPID: pid, Reaped: true, ExitCode: -1,
			Signal: string(events.SignalTERM), StdinClosedAt: now, StdoutClosedAt: now, StderrClosedAt: now,
			EOFGraceNS: 1e9, TermSentAt: now, HelperExitCode: 0}),
		d(&events.ConnectionBarrier{Obligation: events.ObligationTransport, Outcome: events.BarrierOK, ElapsedNS: 10}),
		d(&events.ConnectionBarrier{Obligation: events.ObligationWorkers, Outcome: events.BarrierOK, ElapsedNS: 10}),
		d(&events.ConnectionBarrier{Obligation: events.ObligationSupervisor, Outcome: events.BarrierOK, ElapsedNS: 10}),
		d(&events.ConnectionBarrier{Obligation: events.ObligationHTTPRequests, Outcome: events.BarrierOK, ElapsedNS: 10}),
		d(&events.ConnectionPhase{Phase: events.PhaseClosed}),
		d(&events.ConnectionClosed{ElapsedNS: 100}),
		d(&events.LeaseTerminated{Reason: events.TerminatedSessionEnded}),
	)
}

// writerStreams splits n events among writers: writer w drives its own
// activations (w, w+writers, …) through their lifecycles, so that every
// activation's events reach the projection in order.
func writerStreams(n, writers int) [][]events.Draft {
	streams := make([][]events.Draft, writers)
	for w := range writers {
		share := n / writers
		if w < n%writers {
			share++
		}
		for k := 0; len(streams[w]) < share; k++ {
			ai := k*writers + w
			lc := gatewayLifecycle(fmt.Sprintf("act-%06d", ai), fmt.Sprintf("s-%d", ai%97), 1000+2*ai)
			streams[w] = append(streams[w], lc[:min(len(lc), share-len(streams[w]))]...)
		}
	}
	return streams
}

// RunServe executes the serve-path benchmark (see the top of serve.go).
// cfg.SnapshotEvery must be positive.
func RunServe(ctx context.Context, cfg Config) (ServeResult, error) {
	if cfg.Concurrency <= 0 || cfg.Batch <= 0 || cfg.Events <= 0 || cfg.Rounds <= 0 || cfg.Dir == "" || cfg.SnapshotEvery <= 0 {
		return ServeResult{}, errors.New("servebench: Dir, Concurrency, Batch, Events, Rounds and SnapshotEvery must be set")
	}
	if cfg.Batch > ledger.MaxAppendEvents {
		return ServeResult{}, fmt.Errorf("servebench: batch %d over MaxAppendEvents=%d", cfg.Batch, ledger.MaxAppendEvents)
	}
	res := ServeResult{Config: cfg}
	streams := writerStreams(cfg.Events, cfg.Concurrency)
	// The raw sides write the bytes the ledger stores for the same drafts,
	// sealed up front so that sealing is not charged to them.
	var all []events.Draft
	for _, s := range streams {
		all = append(all, s...)
	}
	sealed, err := ledgerbench.Seal(all)
	if err != nil {
		return res, err
	}
	res.EventBytes = sealed.MeanEventBytes()
	pubs := make([]publication, len(sealed.Envelopes))
	for i := range pubs {
		pubs[i] = newPublication(&sealed.Envelopes[i], sealed.Raw[i])
	}

	var serveLat, snapLat, rawLat, busLat []time.Duration
	for round := range cfg.Rounds {
		sides := []func() error{
			func() error {
				s, lat, err := runServe(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("serve-%d", round)), cfg, streams, -1)
				res.Serve.add(s)
				serveLat = append(serveLat, lat...)
				return err
			},
			func() error {
				s, lat, err := runServe(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("serve-snap-%d", round)), cfg, streams, cfg.SnapshotEvery)
				res.Snapshots.add(s)
				snapLat = append(snapLat, lat...)
				return err
			},
			func() error {
				s, lat, err := ledgerbench.RunRaw(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("raw-same-%d", round)), cfg.Config, sealed, nil)
				res.Raw.Add(s)
				rawLat = append(rawLat, lat...)
				return err
			},
			func() error {
				s, lat, err := runRawBus(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("raw-bus-%d", round)), cfg.Config, sealed, pubs)
				res.RawBus.add(s)
				busLat = append(busLat, lat...)
				return err
			},
		}
		for i := range sides {
			if err := sides[(i+round)%len(sides)](); err != nil {
				return res, err
			}
		}
	}
	res.Serve.Latency, res.Snapshots.Latency, res.RawLat, res.RawBusLat = latency(serveLat), latency(snapLat), latency(rawLat), latency(busLat)
	return res, nil
}

func (s *ServeSide) add(o ServeSide) {
	s.Side.Add(o.Side)
	s.Delivered += o.Delivered
	s.Redelivered += o.Redelivered
	s.Snapshots += o.Snapshots
}

// latency sorts ds (in place) and reads its percentiles.
func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Latency{P50: at(0.50), P99: at(0.99), Max: ds[len(ds)-1]}
}

// runServe runs one serve-path side: snapshotEvery < 0 turns periodic
// snapshots off.
func runServe(ctx context.Context, dir string, cfg Config, streams [][]events.Draft, snapshotEvery int) (ServeSide, []time.Duration, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	proj, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: dir, Logger: quiet}, SnapshotEvery: snapshotEvery, Logger: quiet})
	if err != nil {
		return ServeSide{}, nil, err
	}
	defer os.RemoveAll(dir)
	defer proj.Close()
	l := proj.Ledger()
	b, err := bus.Start(l, bus.Options{Port: bus.RandomPort, Logger: quiet})
	if err != nil {
		return ServeSide{}, nil, err
	}
	defer b.Close()
	nc, err := busclient.Connect(b.ClientURL())
	if err != nil {
		return ServeSide{}, nil, fmt.Errorf("servebench: subscriber: %w", err)
	}
	defer nc.Close()
	// The subscriber follows like a real client: busclient's Tail, which
	// fills by replay whatever publication dropped (a slow consumer cut
	// off, a lagging bus queue), so that Delivered reaches Events.
	var delivered, redelivered atomic.Int64
	seen := make([]bool, cfg.Events+1) // by seq; only Tail's goroutine touches it
	all := make(chan struct{})
	tailCtx, stopTail := context.WithCancel(ctx)
	tailDone := make(chan error, 1)
	go func() {
		tailDone <- busclient.NewClient(nc).Tail(tailCtx, 1, busclient.TailFilter{}, func(seq events.Seq, _ []byte) error {
			if int(seq) >= len(seen) || seen[seq] {
				redelivered.Add(1)
				return nil
			}
			seen[seq] = true
			if delivered.Add(1) == int64(cfg.Events) {
				close(all)
			}
			return nil
		})
	}()
	defer func() {
		stopTail()
		<-tailDone
	}()

	// Each writer walks its own stream, Batch events per call.
	var wg sync.WaitGroup
	lats := make([][]time.Duration, len(streams))
	errs := make(chan error, len(streams))
	cpu := ledgerbench.StartCPU()
	start := time.Now()
	for w, s := range streams {
		wg.Go(func() {
			for i := 0; i < len(s) && ctx.Err() == nil; i += cfg.Batch {
				t := time.Now()
				if _, err := l.Append(ctx, s[i:min(i+cfg.Batch, len(s))]...); err != nil {
					errs <- err
					return
				}
				lats[w] = append(lats[w], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return ServeSide{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return ServeSide{}, nil, err
	}
	if err := proj.Err(); err != nil {
		return ServeSide{}, nil, fmt.Errorf("servebench: projection: %w", err)
	}
	if err := awaitDelivery(ctx, all, &delivered); err != nil {
		return ServeSide{}, nil, err
	}
	used, window := cpu(), time.Since(start)
	side := ServeSide{Side: ledgerbench.Side{Events: cfg.Events, Elapsed: elapsed, Commits: int(l.Stats().Commits), CPU: used, CPUWindow: window}, Delivered: int(delivered.Load()), Redelivered: int(redelivered.Load())}
	if seq, _, err := l.LoadSnapshot(live.DefaultSnapshotName); err == nil && seq > 0 && snapshotEvery > 0 {
		side.Snapshots = 1
	}
	var lat []time.Duration
	for _, x := range lats {
		lat = append(lat, x...)
	}
	return side, lat, nil
}
