// Package startupbench measures `serve`'s start-up against its floor, as
// `leaseledger bench startup` runs it: the time from starting `serve
// --data-dir D --port -1` as a process of its own to the first TCP
// connection its NATS server accepts (the port it prints on its "NATS
// listening on" line: the moment a client, `tail` or a dashboard, can
// connect), against the same for a child that only opens D with raw
// Pebble (the ledger's Pebble options, writable) and starts an embedded
// NATS server with the bus's options. Both sides are this executable
// started again, so both pay process start-up.
//
// The ledgers are grown with servebench.Grow (`leaseledger bench grow`: a
// gateway's traffic written through the live projection with serve's
// periodic snapshots and a final one) at each requested size, or reused
// from a directory that keeps them, and with Config.Compact compacted
// fully first (a ledger at rest). After an unmeasured warm-up start of
// each side on each ledger (the page cache, and serve's final snapshot on
// a ledger whose grower did not close it), the rounds alternate the sides
// and sizes. It reports the median time to listening and the peak resident
// set of each side per size, the ratio serve/floor per size (the goal:
// ≤ 1.5) and the ratios of each side's start-up between the largest and
// the smallest ledger: ratios, as the machine is shared.
package startupbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leaseledger/leaseledger/cmd/leaseledger/internal/servebench"
	"github.com/leaseledger/leaseledger/ledger"
)

// Defaults of Config.
const (
	DefaultRounds  = 5
	DefaultWarmup  = 1
	DefaultTimeout = 10 * time.Minute
	// DefaultGrowConcurrency and DefaultGrowBatch are `bench grow`'s.
	DefaultGrowConcurrency = 64
	DefaultGrowBatch       = 1
)

// DefaultSizes are the ledgers of the goal: 10^5 and 10^7 events.
var DefaultSizes = []int{100_000, 10_000_000}

// Config describes one run.
type Config struct {
	// Exe is the leaseledger executable both sides start. Required.
	Exe string
	// Sizes are the ledgers' sizes in events, each grown once. Required.
	Sizes []int
	// Keep, when set, is a directory that keeps the grown ledgers as
	// events-<N>: one already there with exactly N events is reused (so
	// that a large one is grown once), a missing one is grown and kept.
	// Empty: they are grown under Dir and removed at the end.
	Keep string
	// Dir is the parent of the scratch directory when Keep is empty
	// (default: the system temp dir).
	Dir string
	// Rounds of measured starts, each starting both sides on every ledger
	// once; DefaultRounds when zero.
	Rounds int
	// Warmup is the number of unmeasured starts of each side on each
	// ledger before the rounds; DefaultWarmup when zero, none when negative.
	Warmup int
	// Timeout bounds one start-up and stop of a child; DefaultTimeout when
	// zero.
	Timeout time.Duration
	// Compact compacts each ledger fully (every table into Pebble's last
	// level) before the warm-up: a ledger at rest, as a serve that outlived
	// its write burst leaves it, rather than with the compaction debt a
	// grow at full speed leaves, which each start's Pebble picks up again
	// in the background. A kept ledger stays compacted.
	Compact bool
	// GrowConcurrency and GrowBatch are servebench.GrowConfig's
	// Concurrency and Batch; the defaults when zero.
	GrowConcurrency, GrowBatch int
	// ServeArgs and FloorArgs are the arguments of the two sides for a
	// ledger directory; the defaults (DefaultServeArgs, DefaultFloorArgs)
	// when nil.
	ServeArgs, FloorArgs func(dir string) []string
	// Log receives progress lines; discarded when nil.
	Log io.Writer
}

// DefaultServeArgs starts serve on dir as a user would with no
// configuration, on a free port.
func DefaultServeArgs(dir string) []string {
	return []string{"--data-dir", dir, "serve", "--port", "-1"}
}

// DefaultFloorArgs starts the floor side (the hidden `bench startup-floor`
// command, which runs Floor) on dir.
func DefaultFloorArgs(dir string) []string {
	return []string{"--data-dir", dir, "bench", "startup-floor"}
}

func (c *Config) validate() error {
	if c.Exe == "" {
		return errors.New("startupbench: no executable to start")
	}
	if len(c.Sizes) == 0 {
		return errors.New("startupbench: no ledger sizes")
	}
	for _, n := range c.Sizes {
		if n <= 0 {
			return fmt.Errorf("startupbench: ledger size %d: want > 0 events", n)
		}
	}
	if c.Rounds < 0 || c.Timeout < 0 || c.GrowConcurrency < 0 || c.GrowBatch < 0 {
		return errors.New("startupbench: rounds, timeout, grow concurrency and batch must not be negative")
	}
	c.Sizes = slices.Clone(c.Sizes)
	slices.Sort(c.Sizes)
	c.Sizes = slices.Compact(c.Sizes)
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultWarmup
	}
	c.Warmup = max(c.Warmup, 0)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.GrowConcurrency = cmp.Or(c.GrowConcurrency, DefaultGrowConcurrency)
	c.GrowBatch = cmp.Or(c.GrowBatch, DefaultGrowBatch)
	if c.ServeArgs == nil {
		c.ServeArgs = DefaultServeArgs
	}
	if c.FloorArgs == nil {
		c.FloorArgs = DefaultFloorArgs
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// Run grows (or reuses) the ledgers, warms up, and measures cfg.Rounds
// rounds; see the package documentation.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	parent := cfg.Keep
	if parent == "" {
		scratch, err := os.MkdirTemp(cfg.Dir, "leaseledger-startup-*")
		if err != nil {
			return nil, fmt.Errorf("startupbench: %w", err)
		}
		defer os.RemoveAll(scratch)
		parent = scratch
	} else if err := os.MkdirAll(parent, 0o750); err != nil {
		return nil, fmt.Errorf("startupbench: %w", err)
	}
	res := &Result{Rounds: cfg.Rounds, Warmup: cfg.Warmup, Sizes: make([]SizeResult, len(cfg.Sizes))}
	for i, n := range cfg.Sizes {
		dir := filepath.Join(parent, "events-"+strconv.Itoa(n))
		if err := ensureLedger(ctx, cfg, dir, n); err != nil {
			return nil, err
		}
		if cfg.Compact {
			if err := compact(ctx, cfg.Log, dir); err != nil {
				return nil, err
			}
		}
		res.Sizes[i] = SizeResult{Events: n, Dir: dir, Bytes: dirBytes(dir)}
	}
	type side struct {
		name   string
		args   func(string) []string
		prefix string
		pick   func(*SizeResult) *Side
	}
	sides := [2]side{
		{"serve", cfg.ServeArgs, ServeReadyPrefix, func(s *SizeResult) *Side { return &s.Serve }},
		{"floor", cfg.FloorArgs, FloorReadyPrefix, func(s *SizeResult) *Side { return &s.Floor }},
	}
	for r := range cfg.Warmup + cfg.Rounds {
		measured := r >= cfg.Warmup
		if measured {
			fmt.Fprintf(cfg.Log, "bench startup: round %d of %d\n", r-cfg.Warmup+1, cfg.Rounds)
		} else {
			fmt.Fprintf(cfg.Log, "bench startup: warm-up %d of %d\n", r+1, cfg.Warmup)
		}
		// Alternate which side and which size go first, so that neither
		// always starts on a cache the other warmed.
		for k := range res.Sizes {
			sz := &res.Sizes[(k+r)%len(res.Sizes)]
			for j := range sides {
				sd := sides[(j+r)%2]
				s, err := launch(ctx, cfg.Exe, sd.args(sz.Dir), sd.prefix, cfg.Timeout)
				if err != nil {
					return nil, err
				}
				if !measured {
					continue
				}
				got := sd.pick(sz)
				got.Ready = append(got.Ready, s.Ready)
				got.PeakRSS = append(got.PeakRSS, s.PeakRSS)
				if sd.name == "serve" {
					sz.SnapshotSeq, sz.Replayed = s.SnapshotSeq, s.Replayed
				}
			}
		}
	}
	return res, nil
}

// ensureLedger makes dir a ledger of exactly n events: reused when it
// already is one, grown with servebench.Grow when it does not exist.
func ensureLedger(ctx context.Context, cfg Config, dir string, n int) error {
	if _, err := os.Stat(dir); err == nil {
		l, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
		if err != nil {
			return fmt.Errorf("startupbench: reuse %s: %w", dir, err)
		}
		seq := l.Head().Seq
		if err := l.Close(); err != nil {
			return fmt.Errorf("startupbench: reuse %s: %w", dir, err)
		}
		if int(seq) != n {
			return fmt.Errorf("startupbench: %s holds %d events, not %d (an interrupted grow?): remove it to grow it again", dir, seq, n)
		}
		fmt.Fprintf(cfg.Log, "bench startup: reusing %s (%d events)\n", dir, n)
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("startupbench: %w", err)
	}
	fmt.Fprintf(cfg.Log, "bench startup: growing %s to %d events\n", dir, n)
	start := time.Now()
	if _, err := servebench.Grow(ctx, servebench.GrowConfig{Dir: dir, Events: n, Concurrency: cfg.GrowConcurrency, Batch: cfg.GrowBatch}); err != nil {
		return fmt.Errorf("startupbench: grow %s: %w", dir, err)
	}
	fmt.Fprintf(cfg.Log, "bench startup: grown in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// dirBytes is the size of the files in dir (not their allocated blocks:
// Pebble preallocates its write-ahead log).
func dirBytes(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// compact compacts every key of the ledger in dir into Pebble's last level
// (opened as the ledger opens it).
func compact(ctx context.Context, log io.Writer, dir string) error {
	po := ledger.DefaultPebbleOptions()
	po.ErrorIfNotExists = true
	db, err := pebble.Open(dir, po)
	if err != nil {
		return fmt.Errorf("startupbench: compact %s: %w", dir, err)
	}
	start := time.Now()
	// Every key of the keyspace is printable ASCII (keys.Prefix…).
	err = db.Compact(ctx, []byte{0}, []byte{0xff}, true)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("startupbench: compact %s: %w", dir, err)
	}
	fmt.Fprintf(log, "bench startup: compacted %s in %v\n", dir, time.Since(start).Round(time.Millisecond))
	return nil
}
