package servebench

// Growing a ledger: the history the scale figures are measured on. Grow
// writes a gateway's traffic (the serve path's gatewayLifecycle) into a data
// directory exactly as `serve` writes it — through the live projection with
// its default periodic snapshots — so that `serve`, `leases`, `audit --all`
// and `verify` can then be run on it as separate processes and their start-up
// time and peak memory compared between a small and a large history.
//
// Unlike the benchmarks above it keeps its directory, and it never holds the
// whole workload in memory: each writer generates one activation's lifecycle
// at a time, so 10^7 events cost the memory of one activation per writer.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector/live"
)

// GrowConfig describes one Grow.
type GrowConfig struct {
	// Dir is the data directory to create; it must not hold a ledger yet.
	Dir string
	// Events is how many events to write (whole activations of
	// activationEvents events, the last one cut short).
	Events int
	// Concurrency is the number of appending goroutines.
	Concurrency int
	// Batch is the number of events per Append call.
	Batch int
	// Logger receives the projection's warnings; discarded when nil.
	Logger *slog.Logger
}

// ErrNotEmpty reports that Grow was pointed at a directory whose ledger
// already holds events: its activations would collide with the generated
// ones.
var ErrNotEmpty = errors.New("servebench: the ledger is not empty")

// Grow writes cfg.Events events of gateway traffic into cfg.Dir through the
// live projection (periodic snapshots at their default interval, a final
// one on close), Concurrency writers each driving its own activations. It
// returns the head it left.
func Grow(ctx context.Context, cfg GrowConfig) (ledger.Head, error) {
	if cfg.Dir == "" || cfg.Events <= 0 || cfg.Concurrency <= 0 || cfg.Batch <= 0 || cfg.Batch > ledger.MaxAppendEvents {
		return ledger.Head{}, fmt.Errorf("servebench: grow needs Dir, Events > 0, Concurrency > 0 and 0 < Batch <= %d", ledger.MaxAppendEvents)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	proj, err := live.Open(ctx, live.Options{Ledger: ledger.Options{Dir: cfg.Dir, Logger: logger}, Logger: logger})
	if err != nil {
		return ledger.Head{}, err
	}
	l := proj.Ledger()
	if h := l.Head(); h.Seq != 0 {
		_ = proj.Close()
		return ledger.Head{}, fmt.Errorf("%w: %s is at seq %d", ErrNotEmpty, cfg.Dir, h.Seq)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for w := range cfg.Concurrency {
		share := cfg.Events / cfg.Concurrency
		if w < cfg.Events%cfg.Concurrency {
			share++
		}
		wg.Go(func() {
			if err := growWriter(ctx, l, w, cfg.Concurrency, share, cfg.Batch); err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	if err := errors.Join(firstErr, proj.Err(), proj.Close()); err != nil {
		return ledger.Head{}, err
	}
	return l.Head(), nil
}

// growWriter appends share events of writer w's activations (w, w+writers,
// …, as writerStreams assigns them), batch events per call, generating one
// lifecycle at a time. Each writer has a session of its own, so that a lease
// key (session, server) never has two live activations at once, as the
// runtime's single-flight acquisition guarantees: a key taken over while
// its activation still runs is the rarer stale-replacement path, whose late
// events a reader that forgets closed activations (leases) sees again.
func growWriter(ctx context.Context, l *ledger.Ledger, w, writers, share, batch int) error {
	pending := make([]events.Draft, 0, batch)
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		_, err := l.Append(ctx, pending...)
		pending = pending[:0]
		return err
	}
	for k, written := 0, 0; written < share; k++ {
		ai := k*writers + w
		lc := gatewayLifecycle(fmt.Sprintf("act-%07d", ai), fmt.Sprintf("s-%d", w), 1000+2*ai)
		for _, d := range lc[:min(len(lc), share-written)] {
			pending = append(pending, d)
			written++
			if len(pending) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}
