// Package ledgerbench owns the append benchmarks shared by `leaseledger
// bench append` and the Go benchmarks: durable ledger appends against raw
// Pebble Sync commits from the same number of goroutines, measured in one
// run, interleaved round by round, reported as ratios. Absolute rates on a
// shared machine are noise; the ratios are the figures. Run measures the
// bare log. Benchmarks of whole paths above the log (serve's, with its
// projection and bus) measure against the same raw floor through Seal and
// RunRaw: only a package under ledger/ may write the ledger's own keys.
//
// There are two raw baselines, both with the ledger's Pebble options:
//
//   - raw same keys: each commit writes exactly the keys and values the
//     ledger writes for the same events (the e/ record, its a/, s/, k/ index
//     entries and m/head). The ratio against it is the cost of the ledger's
//     own machinery: validation, sealing, hashing, the commit pipeline.
//   - raw events only: each commit writes only the e/ records. The ratio
//     against it also charges the ledger for its secondary indexes.
package ledgerbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/cputime"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// Config describes one benchmark run.
type Config struct {
	// Dir is a scratch directory; each side gets fresh subdirectories.
	Dir string
	// Concurrency is the number of appending goroutines on each side.
	Concurrency int
	// Batch is the number of events per Append call and per raw Pebble
	// batch (1: one event per commit).
	Batch int
	// Events is the number of events each side writes per round.
	Events int
	// Rounds alternates the sides this many times; rates are totals.
	Rounds int
}

// Side is the measurement of one side.
type Side struct {
	Events  int
	Elapsed time.Duration
	// Commits is the number of Pebble commits (ledger side only).
	Commits int
	// CPU is the CPU time the whole process used over CPUWindow (0 where
	// it cannot be read): from the first append to the last ack, and on the
	// sides with a subscriber (serve, raw + bare NATS) on until it received
	// every event, so that both charge the whole fan-out. Sides run one
	// after the other, so it is this side's work and what of it runs
	// concurrently (a serve side's bus, subscriber and Pebble's background
	// work), not the set-up.
	CPU time.Duration
	// CPUWindow is the wall-clock time CPU was read over; zero means
	// Elapsed.
	CPUWindow time.Duration
}

// Rate is events per second.
func (s Side) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Events) / s.Elapsed.Seconds()
}

// CPUPerEvent is the process CPU time per event written (0 without CPU
// readings). Where throughput is noisy on a shared machine, the ratio of two
// sides' CPU per event is the steadier figure of their relative cost.
func (s Side) CPUPerEvent() time.Duration {
	if s.Events <= 0 {
		return 0
	}
	return s.CPU / time.Duration(s.Events)
}

// Cores is the mean number of cores the process kept busy while the side
// ran (CPU over CPUWindow). Well under the machine's cores, the side
// was bound by waiting (fsync, wake-ups), not by CPU.
func (s Side) Cores() float64 {
	w := s.window()
	if w <= 0 {
		return 0
	}
	return s.CPU.Seconds() / w.Seconds()
}

// CPURatio is b's CPU per event over a's: like Ratio, above 1 when a is
// the cheaper; 0 without CPU readings.
func CPURatio(a, b Side) float64 {
	if a.CPUPerEvent() <= 0 || b.CPUPerEvent() <= 0 {
		return 0
	}
	return float64(b.CPUPerEvent()) / float64(a.CPUPerEvent())
}

// StartCPU starts a CPU reading: the function returned gives the process
// CPU time used since (0 where it cannot be read).
func StartCPU() func() time.Duration {
	start, err := cputime.Process()
	return func() time.Duration {
		now, err2 := cputime.Process()
		if err != nil || err2 != nil {
			return 0
		}
		return now - start
	}
}

// CPUCell prints a side's CPU per event and cores busy, as a table cell
// ("" without CPU readings).
func CPUCell(s Side) string {
	if s.CPU <= 0 {
		return ""
	}
	return fmt.Sprintf("  cpu %6.2f us/event on %.2f cores", float64(s.CPUPerEvent())/1e3, s.Cores())
}

// Result is a finished run.
type Result struct {
	Config     Config
	Ledger     Side // durable ledger.Append
	RawSame    Side // raw Pebble Sync commits of the same keys and values
	RawRecords Side // raw Pebble Sync commits of the e/ records only
	// EventBytes is the size of one stored event.
	EventBytes int
}

// Ratio is ledger throughput over raw Pebble throughput writing the same
// keys and values.
func (r Result) Ratio() float64 { return Ratio(r.Ledger, r.RawSame) }

// RecordsRatio is ledger throughput over raw Pebble throughput writing the
// e/ records only.
func (r Result) RecordsRatio() float64 { return Ratio(r.Ledger, r.RawRecords) }

// CPURatio is raw Pebble's CPU per event (same keys) over the ledger's.
func (r Result) CPURatio() float64 { return CPURatio(r.Ledger, r.RawSame) }

// Ratio is a's throughput over b's (0 when b has none).
func Ratio(a, b Side) float64 {
	if b.Rate() == 0 {
		return 0
	}
	return a.Rate() / b.Rate()
}

// String prints r as a table: the configuration, the three rates with
// their CPU cost, the ratios and the group-commit factor.
func (r Result) String() string {
	return fmt.Sprintf("concurrency=%d batch=%d events/round=%d rounds=%d event_bytes=%d\n"+
		"ledger.Append (durable, acked after fsync): %10.0f events/s%s\n"+
		"raw pebble Sync, same keys and values:      %10.0f events/s%s\n"+
		"raw pebble Sync, e/ records only:           %10.0f events/s%s\n"+
		"ratio ledger / raw same keys:               %10.3f\n"+
		"ratio ledger / raw records only:            %10.3f\n"+
		"cpu ratio raw same keys / ledger per event: %10.3f\n"+
		"ledger events per Pebble commit:            %10.1f",
		r.Config.Concurrency, r.Config.Batch, r.Config.Events, r.Config.Rounds, r.EventBytes,
		r.Ledger.Rate(), CPUCell(r.Ledger), r.RawSame.Rate(), CPUCell(r.RawSame), r.RawRecords.Rate(), CPUCell(r.RawRecords),
		r.Ratio(), r.RecordsRatio(), r.CPURatio(), float64(r.Ledger.Events)/float64(max(1, r.Ledger.Commits)))
}

// SampleDraft is the event both sides write: a call.finished with digests,
// typical of the runtime's traffic (the i-th of a workload). Other floors
// built on Seal and RunRaw write it too.
func SampleDraft(i int) events.Draft {
	return events.Draft{Activation: fmt.Sprintf("act-%d", i%64), Session: "session-1", Server: "everything",
		Payload: &events.CallFinished{CallID: fmt.Sprintf("call-%d", i), Tool: "echo", Outcome: "ok", DurationNS: 123456,
			ArgsBytes: 42, ArgsSHA256: strings.Repeat("ab", 32), ResultBytes: 99, ResultSHA256: strings.Repeat("cd", 32)}}
}

// Run executes the benchmark.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Concurrency <= 0 || cfg.Batch <= 0 || cfg.Events <= 0 || cfg.Rounds <= 0 || cfg.Dir == "" {
		return Result{}, errors.New("ledgerbench: Dir, Concurrency, Batch, Events and Rounds must be set")
	}
	if cfg.Batch > ledger.MaxAppendEvents {
		return Result{}, fmt.Errorf("ledgerbench: batch %d over MaxAppendEvents=%d", cfg.Batch, ledger.MaxAppendEvents)
	}
	res := Result{Config: cfg}
	// The raw sides write exactly the bytes the ledger stores for the same
	// drafts; seal them up front so that sealing is not charged to them.
	drafts := make([]events.Draft, cfg.Events)
	for i := range drafts {
		drafts[i] = SampleDraft(i)
	}
	sealed, err := Seal(drafts)
	if err != nil {
		return res, err
	}
	res.EventBytes = sealed.MeanEventBytes()
	same := sealed.writes
	records := make([][]kv, cfg.Events)
	for i := range records {
		records[i] = same[i][:1]
	}
	head := sealed.head

	for round := range cfg.Rounds {
		// Alternate which side goes first, so that neither always meets a
		// machine warmed (or tired) by the other.
		sides := []func() error{
			func() error {
				l, err := runLedger(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("ledger-%d", round)), cfg)
				res.Ledger.Add(l)
				return err
			},
			func() error {
				r, err := runRaw(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("raw-same-%d", round)), cfg, same, &head)
				res.RawSame.Add(r)
				return err
			},
			func() error {
				r, err := runRaw(ctx, filepath.Join(cfg.Dir, fmt.Sprintf("raw-records-%d", round)), cfg, records, nil)
				res.RawRecords.Add(r)
				return err
			},
		}
		for i := range sides {
			if err := sides[(i+round)%len(sides)](); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

type kv struct{ k, v []byte }

// Add adds o's measurement to s: rounds of one side sum up.
func (s *Side) Add(o Side) {
	s.Events += o.Events
	s.Elapsed += o.Elapsed
	s.Commits += o.Commits
	s.CPU += o.CPU
	s.CPUWindow += o.window()
}

// window is s.CPUWindow, or Elapsed when that is unset.
func (s Side) window() time.Duration {
	if s.CPUWindow > 0 {
		return s.CPUWindow
	}
	return s.Elapsed
}

// work hands out batches until cfg.Events are written.
func work(ctx context.Context, cfg Config, fn func(first, n int) error) (Side, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Concurrency)
	cpu := StartCPU()
	start := time.Now()
	for range cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				first := int(next.Add(int64(cfg.Batch))) - cfg.Batch
				if first >= cfg.Events {
					return
				}
				if err := fn(first, min(cfg.Batch, cfg.Events-first)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed, used := time.Since(start), cpu()
	close(errs)
	if err := <-errs; err != nil {
		return Side{}, err
	}
	if err := ctx.Err(); err != nil {
		return Side{}, err
	}
	return Side{Events: cfg.Events, Elapsed: elapsed, CPU: used}, nil
}

func runLedger(ctx context.Context, dir string, cfg Config) (Side, error) {
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		return Side{}, err
	}
	defer os.RemoveAll(dir)
	defer l.Close()
	drafts := make([]events.Draft, cfg.Events)
	for i := range drafts {
		drafts[i] = SampleDraft(i)
	}
	side, err := work(ctx, cfg, func(first, n int) error {
		_, err := l.Append(ctx, drafts[first:first+n]...)
		return err
	})
	side.Commits = int(l.Stats().Commits)
	return side, err
}

func runRaw(ctx context.Context, dir string, cfg Config, writes [][]kv, head *kv) (Side, error) {
	return runRawWith(ctx, dir, cfg, writes, head, func(fn func(first, n int) error) (Side, error) { return work(ctx, cfg, fn) })
}

// runRawWith is runRaw with the driver of the writing goroutines given.
func runRawWith(ctx context.Context, dir string, cfg Config, writes [][]kv, head *kv, drive func(fn func(first, n int) error) (Side, error)) (Side, error) {
	po := ledger.DefaultPebbleOptions()
	po.Logger = silent{}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return Side{}, err
	}
	defer os.RemoveAll(dir)
	defer db.Close()
	return drive(func(first, n int) error {
		b := db.NewBatch()
		defer b.Close()
		for _, w := range writes[first : first+n] {
			for _, x := range w {
				if err := b.Set(x.k, x.v, nil); err != nil {
					return err
				}
			}
		}
		if head != nil {
			if err := b.Set(head.k, head.v, nil); err != nil {
				return err
			}
		}
		return b.Commit(pebble.Sync)
	})
}

type silent struct{}

func (silent) Infof(string, ...any)           {}
func (silent) Errorf(string, ...any)          {}
func (silent) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

// Sealed is a workload sealed as the ledger seals it (seqs from 1, one hash
// chain), ready for the raw Pebble floor: each event's envelope, its stored
// bytes, and the keys and values the ledger writes for it. Sealing happens
// up front so that it is not charged to the raw side.
type Sealed struct {
	// Envelopes are the events as sealed, in seq order.
	Envelopes []events.Envelope
	// Raw are their stored bytes, Raw[i] of Envelopes[i].
	Raw    [][]byte
	writes [][]kv // event i's keys and values (the e/ record first)
	head   kv     // the m/head record every ledger commit rewrites
}

// Seal seals drafts in order as the ledger would store them at seqs 1…n.
// An invalid draft is an error naming its index.
func Seal(drafts []events.Draft) (*Sealed, error) {
	s := &Sealed{
		Envelopes: make([]events.Envelope, 0, len(drafts)),
		Raw:       make([][]byte, 0, len(drafts)),
		writes:    make([][]kv, 0, len(drafts)),
		head:      kv{[]byte(keys.Head), keys.EncodeHead(0, events.Hash{})},
	}
	var prev events.Hash
	for i, d := range drafts {
		p, err := events.Prepare(d)
		if err != nil {
			return nil, fmt.Errorf("ledgerbench: draft %d: %w", i, err)
		}
		env, raw := events.Seal(p, events.Seq(i+1), [16]byte{}, time.Now(), prev)
		prev = env.Hash
		var w []kv
		for j, k := range keys.For(&env) {
			v := []byte(nil)
			if j == 0 {
				v = raw
			}
			w = append(w, kv{k, v})
		}
		s.Envelopes = append(s.Envelopes, env)
		s.Raw = append(s.Raw, raw)
		s.writes = append(s.writes, w)
	}
	return s, nil
}

// MeanEventBytes is the mean size of one stored event (0 for none).
func (s *Sealed) MeanEventBytes() int {
	total := 0
	for _, r := range s.Raw {
		total += len(r)
	}
	return total / max(1, len(s.Raw))
}

// RunRaw is the raw Pebble floor of a path above the log: a fresh Pebble
// at dir with the ledger's options, cfg.Concurrency goroutines committing
// s's events' keys and values and the head record with pebble.Sync,
// cfg.Batch events per commit (cfg.Events is len(s.Raw)). When after is not
// nil, each writer calls it after each commit with the batch's range
// [first, first+n): the raw + NATS floor publishes there. It returns the
// side and each batch's latency, commit and after together; dir is removed.
func RunRaw(ctx context.Context, dir string, cfg Config, s *Sealed, after func(first, n int) error) (Side, []time.Duration, error) {
	cfg.Events = len(s.writes)
	if cfg.Concurrency <= 0 || cfg.Batch <= 0 || cfg.Events == 0 {
		return Side{}, nil, errors.New("ledgerbench: RunRaw needs Concurrency, Batch and events")
	}
	var lat []time.Duration
	side, err := runRawWith(ctx, dir, cfg, s.writes, &s.head, func(commit func(first, n int) error) (Side, error) {
		side, l, err := timedWork(ctx, cfg, func(first, n int) error {
			if err := commit(first, n); err != nil {
				return err
			}
			if after == nil {
				return nil
			}
			return after(first, n)
		})
		lat = l
		return side, err
	})
	return side, lat, err
}

// timedWork is work recording each call's latency.
func timedWork(ctx context.Context, cfg Config, fn func(first, n int) error) (Side, []time.Duration, error) {
	var mu sync.Mutex
	lat := make([]time.Duration, 0, cfg.Events/cfg.Batch+1)
	side, err := work(ctx, cfg, func(first, n int) error {
		start := time.Now()
		err := fn(first, n)
		d := time.Since(start)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		return err
	})
	return side, lat, err
}
