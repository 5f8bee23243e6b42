//go:build linux

package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/guardian"
	"github.com/leaseledger/leaseledger/internal/cputime"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCallOverhead measures one lease call (config lookup, gate,
// digest check, call.admitted durable before the request, call.finished
// queued, the guardian relay) against a plain go-sdk client over
// CommandTransport calling the same tool on the same server
// (server-everything's echo), in one run, interleaved in chunks so machine
// noise hits both alike. It reports both latencies and their ratio, plus
// the lease path with events validated and encoded but not written
// (prepareOnly), the lease path with both appends awaited (sync-µs/call: an
// appender without AppendAsync, as before call.finished was queued), and
// the p50 of a one-event durable append on the same ledger (one fsync):
// the goal is lease ≤ 1.10 × plain + one fsync, reported as
// "excess-over-fsync" = (lease − append p50) / plain, and against the mean
// one-event append as "excess-over-mean-fsync". Those appends run back to
// back, while a call's admission follows a request to another process, so
// the same append is also timed right after a call through the prepareOnly
// lease, as a call's own append is made ("append-after-call-p50/mean-µs"),
// and the goal against its mean (lease-µs/call is a mean too) is
// "excess-over-call-fsync". Its floor is measured too: a plain go-sdk
// client through a guardian of its own (relaySession: the relay and nothing
// else of the lease path) as "relay-µs/call" and "ratio-relay" (relay /
// plain), which the 10 % allowance must cover before the runtime or the
// ledger adds anything; "excess-over-relay-call-fsync" is
// (lease − append after a call) / relay.
//
//	go test -run '^$' -bench CallOverhead -benchtime 2000x ./runtime/
func BenchmarkCallOverhead(b *testing.B) {
	cfg := everything(b)
	ctx := context.Background()

	plain := plainSession(b, ctx, cfg)
	relay := relaySession(b, ctx, cfg)
	l := benchLedger(b)
	capa, req := benchLease(b, ctx, cfg, l)
	plainArgs := map[string]any{"message": "benchmark"}
	// The same lease path with an appender that validates and encodes the
	// events but does not write them: separates the ledger's two fsyncs per
	// call from the rest (gate, digest check, guardian relay).
	capa2, _ := benchLease(b, ctx, cfg, prepareOnly{})
	// Both appends awaited: the call path before call.finished was queued.
	capa3, _ := benchLease(b, ctx, cfg, syncOnly{l})
	fsyncs := make([]time.Duration, 0, b.N)
	afterCall := make([]time.Duration, 0, b.N)
	timedAppend := func(into *[]time.Duration) {
		t0 := time.Now()
		if _, err := l.Append(ctx, events.Draft{Activation: "act-fsync", Payload: &events.LeaseRevoked{Reason: "bench"}}); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(t0))
	}
	syncCall := func() {
		if res, err := capa3.Call(ctx, req); err != nil || res.IsError {
			b.Fatal("lease call (sync) failed", err)
		}
	}

	leaseCall := func() {
		if res, err := capa.Call(ctx, req); err != nil || res.IsError {
			b.Fatal("lease call failed", err)
		}
	}
	noLedgerCall := func() {
		if res, err := capa2.Call(ctx, req); err != nil || res.IsError {
			b.Fatal("lease call (no ledger) failed", err)
		}
	}
	plainCall := func() {
		if res, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: plainArgs}); err != nil || res.IsError {
			b.Fatal("plain call failed", err)
		}
	}
	relayCall := func() {
		if res, err := relay.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: plainArgs}); err != nil || res.IsError {
			b.Fatal("relay call failed", err)
		}
	}
	for i := 0; i < 50; i++ { // warm both paths (JIT, page cache, pools)
		leaseCall()
		plainCall()
		noLedgerCall()
		syncCall()
		relayCall()
	}
	b.ResetTimer()
	var tLease, tPlain, tNoLedger, tSync, tRelay time.Duration
	const chunk = 50
	for done := 0; done < b.N; {
		n := min(chunk, b.N-done)
		tr := time.Now()
		for i := 0; i < n; i++ {
			relayCall()
		}
		t0 := time.Now()
		for i := 0; i < n; i++ {
			plainCall()
		}
		t1 := time.Now()
		for i := 0; i < n; i++ {
			leaseCall()
		}
		t2 := time.Now()
		for i := 0; i < n; i++ {
			noLedgerCall()
		}
		t3 := time.Now()
		for i := 0; i < n; i++ {
			syncCall()
		}
		t4 := time.Now()
		for i := 0; i < n; i++ {
			timedAppend(&fsyncs)
		}
		for i := 0; i < n; i++ {
			noLedgerCall() // not counted: the append after it is
			timedAppend(&afterCall)
		}
		tRelay += t0.Sub(tr)
		tPlain += t1.Sub(t0)
		tLease += t2.Sub(t1)
		tNoLedger += t3.Sub(t2)
		tSync += t4.Sub(t3)
		done += n
	}
	b.StopTimer()
	p50, mean := p50Mean(fsyncs)
	callP50, callMean := p50Mean(afterCall)
	perPlain := float64(tPlain.Nanoseconds()) / float64(b.N)
	perLease := float64(tLease.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perPlain/1e3, "plain-µs/call")
	b.ReportMetric(perLease/1e3, "lease-µs/call")
	perNoLedger := float64(tNoLedger.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perLease/perPlain, "ratio")
	b.ReportMetric(perNoLedger/1e3, "noledger-µs/call")
	b.ReportMetric(perNoLedger/perPlain, "ratio-noledger")
	perSync := float64(tSync.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perSync/1e3, "sync-µs/call")
	b.ReportMetric(perSync/perPlain, "ratio-sync")
	b.ReportMetric(p50/1e3, "append-p50-µs")
	b.ReportMetric((perLease-p50)/perPlain, "excess-over-fsync")
	b.ReportMetric(mean/1e3, "append-mean-µs")
	b.ReportMetric((perLease-mean)/perPlain, "excess-over-mean-fsync")
	b.ReportMetric(callP50/1e3, "append-after-call-p50-µs")
	b.ReportMetric(callMean/1e3, "append-after-call-mean-µs")
	b.ReportMetric((perLease-callMean)/perPlain, "excess-over-call-fsync")
	// The floor: what the guardian relay alone leaves of the 10 % allowance.
	perRelay := float64(tRelay.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perRelay/1e3, "relay-µs/call")
	b.ReportMetric(perRelay/perPlain, "ratio-relay")
	b.ReportMetric((perLease-callMean)/perRelay, "excess-over-relay-call-fsync")
	b.ReportMetric(0, "ns/op") // the per-call figures above are the result
}

// p50Mean returns the median and the mean of ds in ns; it sorts ds.
func p50Mean(ds []time.Duration) (p50, mean float64) {
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(ds[len(ds)/2].Nanoseconds()), float64(sum.Nanoseconds()) / float64(len(ds))
}

// plainSession connects a plain go-sdk client over CommandTransport to the
// server of cfg: the baseline a host would get without leases.
func plainSession(b testing.TB, ctx context.Context, cfg ServerConfig) *mcp.ClientSession {
	b.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "plain", Version: "0"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	s, err := c.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(cfg.Command, cfg.Args...)}, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// relaySession connects a plain go-sdk client to the server of cfg through
// a guardian session of its own (guardian.Launch, the go-sdk's IOTransport
// over the session's stream): no runtime and no ledger, only the relay the
// architecture puts between a lease and its server. It is the floor of
// the lease path; the benchmarks report the lease against it as well as
// against plain. The guardian's cleanup runs when the benchmark ends.
func relaySession(b testing.TB, ctx context.Context, cfg ServerConfig) *mcp.ClientSession {
	b.Helper()
	sp := guardian.Spec{Command: cfg.Command, Args: cfg.Args, ActivationID: "bench-relay", HelperPath: helperBin.Out}
	g, err := guardian.Launch(ctx, sp)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), sp.CleanupBudget())
		defer cancel()
		if r := g.Close(cctx); !r.Confirmed {
			b.Errorf("relay's guardian cleanup unconfirmed: %s", r.Reason)
		}
	})
	c := mcp.NewClient(&mcp.Implementation{Name: "relay", Version: "0"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	st := g.Stream()
	s, err := c.Connect(ctx, &mcp.IOTransport{Reader: st, Writer: st, MaxLineLength: MaxMessageBytes}, &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() }) // runs before the guardian's cleanup
	return s
}

// rawDurable is the storage half of a call's floor: raw Pebble, opened
// with the ledger's defaults, where each call commits one admission-sized
// record with Sync before its request (as call.admitted is durable before
// the request), and its outcome-sized record is carried by the next call's
// Sync commit (as a deferred call.finished rides the next admission's
// batch). No sealing, chain, tree or encoding: only the durable writes.
type rawDurable struct {
	db   *pebble.DB
	next atomic.Uint64
	val  []byte
	mu   sync.Mutex
	// carried counts outcome records waiting for the next admission.
	carried int
}

// rawEventBytes approximates one sealed call event's raw size.
const rawEventBytes = 512

func newRawDurable(b testing.TB) *rawDurable {
	b.Helper()
	po := ledger.DefaultPebbleOptions()
	po.Logger = quietPebble{}
	db, err := pebble.Open(b.TempDir(), po)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return &rawDurable{db: db, val: bytes.Repeat([]byte("x"), rawEventBytes)}
}

// admit commits one admission record, and the outcome records carried so
// far, in one Sync batch.
func (r *rawDurable) admit() error {
	r.mu.Lock()
	n := r.carried + 1
	r.carried = 0
	r.mu.Unlock()
	batch := r.db.NewBatch()
	defer batch.Close()
	for range n {
		if err := batch.Set(binary.BigEndian.AppendUint64(nil, r.next.Add(1)), r.val, nil); err != nil {
			return err
		}
	}
	return batch.Commit(pebble.Sync)
}

// finish leaves one outcome record for the next admission to carry.
func (r *rawDurable) finish() {
	r.mu.Lock()
	r.carried++
	r.mu.Unlock()
}

// quietPebble drops Pebble's informational log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...)) // Pebble's contract: Fatalf does not return
}

// benchLease opens a manager over appender, a session "bench" and a lease on
// cfg as "everything"; it returns the capability and an echo request with
// the pinned digest. Everything is closed when the benchmark ends.
func benchLease(b testing.TB, ctx context.Context, cfg ServerConfig, appender Appender) (LeaseCapability, CallRequest) {
	b.Helper()
	src := &MapConfigSource{}
	src.Set("everything", cfg)
	m, err := NewManager(Options{Config: src, Ledger: appender, HelperPath: helperBin.Out})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(ctx) })
	scope, err := m.OpenSession(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { scope.Release(ctx) })
	capa := scope.Capability()
	tools, err := capa.Tools(ctx, "everything")
	if err != nil {
		b.Fatal(err)
	}
	return capa, CallRequest{Server: "everything", Tool: "echo", Digest: digestOf(b, tools, "echo"), Arguments: map[string]any{"message": "benchmark"}}
}

func benchLedger(b testing.TB) *ledger.Ledger {
	b.Helper()
	l, err := ledger.Open(ledger.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// prepareOnly is an Appender that validates and encodes events (the
// producer's half of an append) and writes nothing.
type prepareOnly struct{}

func (prepareOnly) Append(ctx context.Context, drafts ...events.Draft) ([]ledger.Seq, error) {
	for _, d := range drafts {
		if _, err := events.Prepare(d); err != nil {
			return nil, err
		}
	}
	return make([]ledger.Seq, len(drafts)), nil
}

// BenchmarkCallOverheadConcurrent is BenchmarkCallOverhead with 16 callers
// at once on each side (one lease, one plain session; both servers take
// concurrent calls): the ledger's group commit then shares each fsync among
// the calls in flight, so this is the per-call overhead a busy host sees,
// where the sequential benchmark shows a call's latency with its own fsync.
// It also reports the CPU time of this process (the host: client, runtime,
// ledger; not the helper or the server) per call on each side and their
// ratio, which another job on the machine moves far less than wall time,
// and the same 16 callers through relaySession, the floor: "ratio-relay"
// (relay / plain) and "lease-over-relay"; and through relaySession with
// each call's durable admission written to raw Pebble (rawDurable), the
// floor with storage: "ratio-relay-raw" and "lease-over-relay-raw".
//
//	go test -run '^$' -bench CallOverheadConcurrent -benchtime 4000x ./runtime/
func BenchmarkCallOverheadConcurrent(b *testing.B) {
	const callers = 16
	cfg := everything(b)
	ctx := context.Background()
	plain := plainSession(b, ctx, cfg)
	relay := relaySession(b, ctx, cfg)
	l := benchLedger(b)
	capa, req := benchLease(b, ctx, cfg, l)
	capaSync, _ := benchLease(b, ctx, cfg, syncOnly{l}) // both appends awaited
	args := map[string]any{"message": "benchmark"}
	relayCall := func() error {
		res, err := relay.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
		if err == nil && res.IsError {
			err = errors.New("tool error")
		}
		return err
	}
	raw := newRawDurable(b)
	// The floor with storage: the relay call after its durable admission,
	// its outcome carried by the next (rawDurable).
	durableRelayCall := func() error {
		if err := raw.admit(); err != nil {
			return err
		}
		err := relayCall()
		raw.finish()
		return err
	}
	leaseCall := func() error {
		res, err := capa.Call(ctx, req)
		if err == nil && res.IsError {
			err = errors.New("tool error")
		}
		return err
	}
	syncCall := func() error {
		res, err := capaSync.Call(ctx, req)
		if err == nil && res.IsError {
			err = errors.New("tool error")
		}
		return err
	}
	plainCall := func() error {
		res, err := plain.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
		if err == nil && res.IsError {
			err = errors.New("tool error")
		}
		return err
	}
	// run makes n calls with `callers` goroutines and returns the wall time.
	run := func(n int, call func() error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		start := time.Now()
		for range callers {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if err := call(); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		if p := failed.Load(); p != nil {
			b.Fatal(*p)
		}
		return time.Since(start)
	}
	// cpu is run with the CPU time this process spent meanwhile added to
	// *spent: wall time on a shared 2-CPU machine follows its other jobs,
	// CPU time far less.
	cpu := func(spent *time.Duration, n int, call func() error) time.Duration {
		c0 := processCPU(b)
		d := run(n, call)
		*spent += processCPU(b) - c0
		return d
	}
	run(200, leaseCall)
	run(200, plainCall)
	run(200, syncCall)
	run(200, relayCall)
	run(200, durableRelayCall)
	b.ResetTimer()
	var tLease, tPlain, tSync, tRelay, tDurable, cLease, cPlain, cRelay, cDurable time.Duration
	const chunk = 400
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		tPlain += cpu(&cPlain, n, plainCall)
		tLease += cpu(&cLease, n, leaseCall)
		tSync += run(n, syncCall)
		tRelay += cpu(&cRelay, n, relayCall)
		tDurable += cpu(&cDurable, n, durableRelayCall)
	}
	b.StopTimer()
	perPlain := float64(tPlain.Nanoseconds()) / float64(b.N)
	perLease := float64(tLease.Nanoseconds()) / float64(b.N)
	perSync := float64(tSync.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perPlain/1e3, "plain-µs/call")
	b.ReportMetric(perLease/1e3, "lease-µs/call")
	b.ReportMetric(perLease/perPlain, "ratio")
	b.ReportMetric(perSync/1e3, "sync-µs/call")
	b.ReportMetric(perSync/perPlain, "ratio-sync")
	b.ReportMetric(float64(l.Stats().Events)/float64(max(1, l.Stats().Commits)), "events/commit")
	b.ReportMetric(float64(cPlain.Nanoseconds())/float64(b.N)/1e3, "plain-cpu-µs/call")
	b.ReportMetric(float64(cLease.Nanoseconds())/float64(b.N)/1e3, "lease-cpu-µs/call")
	b.ReportMetric(float64(cLease)/float64(max(1, cPlain)), "ratio-cpu")
	// The floor: plain go-sdk through the guardian relay, no runtime or
	// ledger (its host CPU excludes the helper process's, as lease's does).
	perRelay := float64(tRelay.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perRelay/1e3, "relay-µs/call")
	b.ReportMetric(perRelay/perPlain, "ratio-relay")
	b.ReportMetric(perLease/perRelay, "lease-over-relay")
	b.ReportMetric(float64(cRelay.Nanoseconds())/float64(b.N)/1e3, "relay-cpu-µs/call")
	// The floor with the durable admission: relay + raw Pebble.
	perDurable := float64(tDurable.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perDurable/1e3, "relay-raw-µs/call")
	b.ReportMetric(perDurable/perPlain, "ratio-relay-raw")
	b.ReportMetric(perLease/perDurable, "lease-over-relay-raw")
	b.ReportMetric(float64(cDurable.Nanoseconds())/float64(b.N)/1e3, "relay-raw-cpu-µs/call")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b testing.TB) time.Duration {
	d, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkReadResourceOverhead measures resources/read through a handle
// (gate, request.registered durable before the request, the transport's
// wire-id tagging, request.dispatched + request.completed appended before
// Await returns) against a plain go-sdk ReadResource on the same server
// (server-everything, the same static document), interleaved in chunks in
// one run, sequentially and with 16 readers at once on each side; plus the
// handle path with events validated but not written (prepareOnly).
//
//	go test -run '^$' -bench ReadResourceOverhead -benchtime 2000x ./runtime/
func BenchmarkReadResourceOverhead(b *testing.B) {
	const uri = "demo://resource/static/document/architecture.md"
	cfg := everything(b)
	ctx := context.Background()
	plain := plainSession(b, ctx, cfg)
	handleRead := func(capa LeaseCapability, o *Owner) func() error {
		return func() error {
			h, err := capa.ReadResource(ctx, o, "everything", uri, DefaultRequestOptions())
			if err != nil {
				return err
			}
			_, err = h.Await(ctx)
			return err
		}
	}
	setup := func(appender Appender) func() error {
		capa, _ := benchLease(b, ctx, cfg, appender)
		o, err := capa.NewOwner(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { o.End(ctx) })
		return handleRead(capa, o)
	}
	l := benchLedger(b)
	durable, noLedger := setup(l), setup(prepareOnly{})
	plainRead := func() error {
		_, err := plain.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		return err
	}
	for _, readers := range []int{1, 16} {
		b.Run("readers="+strconv.Itoa(readers), func(b *testing.B) {
			run := func(n int, read func() error) time.Duration {
				var next atomic.Int64
				var wg sync.WaitGroup
				var failed atomic.Pointer[error]
				start := time.Now()
				for range readers {
					wg.Go(func() {
						for next.Add(1) <= int64(n) {
							if err := read(); err != nil {
								failed.CompareAndSwap(nil, &err)
								return
							}
						}
					})
				}
				wg.Wait()
				if p := failed.Load(); p != nil {
					b.Fatal(*p)
				}
				return time.Since(start)
			}
			for _, f := range []func() error{plainRead, durable, noLedger} {
				run(100, f) // warm up
			}
			b.ResetTimer()
			var tPlain, tHandle, tNoLedger time.Duration
			chunk := 50 * readers
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				tPlain += run(n, plainRead)
				tHandle += run(n, durable)
				tNoLedger += run(n, noLedger)
			}
			b.StopTimer()
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
			b.ReportMetric(per(tPlain)/1e3, "plain-µs/read")
			b.ReportMetric(per(tHandle)/1e3, "handle-µs/read")
			b.ReportMetric(per(tHandle)/per(tPlain), "ratio")
			b.ReportMetric(per(tNoLedger)/1e3, "noledger-µs/read")
			b.ReportMetric(per(tNoLedger)/per(tPlain), "ratio-noledger")
			b.ReportMetric(0, "ns/op")
		})
	}
}
