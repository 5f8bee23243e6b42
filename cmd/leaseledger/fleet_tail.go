package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/ledger"
)

// fleetSet says whether the global --fleet flag is set on cmd.
func fleetSet(cmd *cobra.Command) bool {
	f := cmd.Flag("fleet")
	return f != nil && f.Value.String() == "true"
}

// errNoFleetStatus: the NATS server tail --fleet was pointed at does not
// answer collector.StatusSubject (it is no collector's fleet bus).
var errNoFleetStatus = errors.New("no fleet status: is --nats a collector's fleet bus (collect --port)?")

// fetchFleetStatus asks a collector's fleet bus for its per-host status
// (collector.StatusSubject, as user).
func fetchFleetStatus(ctx context.Context, nc *nats.Conn, user string) (collector.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, busclient.DefaultRequestTimeout)
	defer cancel()
	var st collector.Status
	m, err := nc.RequestWithContext(ctx, busclient.UserSubject(collector.StatusSubject, user), []byte("{}"))
	if errors.Is(err, nats.ErrNoResponders) {
		return st, errNoFleetStatus
	}
	if err != nil {
		return st, fmt.Errorf("%s: %w", collector.StatusSubject, err)
	}
	if e := m.Header.Get(busclient.HeaderError); e != "" {
		return st, fmt.Errorf("%s: %s: %w", collector.StatusSubject, e, busclient.ErrRemote)
	}
	if err := json.Unmarshal(m.Data, &st); err != nil || len(st.Hosts) == 0 {
		return st, fmt.Errorf("%s: %w", collector.StatusSubject, errNoFleetStatus)
	}
	return st, nil
}

// tailFleet is `tail --fleet`: it follows every host a collector's fleet
// bus serves (those its status names), each through a Tail of its own in
// its host space — per host without gap or duplicate, holes filled by
// replay — from seq from when fromSet (--from-seq given; 0 as 1, as plain
// tail), else from each host's head when asked, so only new events
// (TestFleetTailFromSeqZero), and prints each event as {"host":"h1","event":<event>}, the
// line of `--fleet export`, hosts interleaved as their events arrive. It
// ends with ctx (nil) or with the first host's failure.
func tailFleet(ctx context.Context, a *app, nc *nats.Conn, user string, from ledger.Seq, fromSet bool, f busclient.TailFilter) error {
	st, err := fetchFleetStatus(ctx, nc, user)
	if err != nil {
		return err
	}
	hosts := slices.Sorted(maps.Keys(st.Hosts))
	base := busclient.NewClient(nc)
	starts := make([]ledger.Seq, len(hosts))
	for i, h := range hosts {
		if starts[i] = from; !fromSet {
			head, err := base.WithHost(h).Head(ctx)
			if err != nil {
				return fmt.Errorf("host %s: %w", h, err)
			}
			starts[i] = head.Seq + 1
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex // out and first
		out   = bufio.NewWriter(a.stdout)
		first error
		wg    sync.WaitGroup
	)
	for i, h := range hosts {
		prefix := fmt.Appendf(nil, `{"host":%q,"event":`, h)
		wg.Go(func() {
			err := base.WithHost(h).Tail(ctx, starts[i], f, func(_ ledger.Seq, raw []byte) error {
				mu.Lock()
				defer mu.Unlock()
				out.Write(prefix)
				out.Write(raw)
				out.WriteString("}\n")
				return out.Flush()
			})
			if ctx.Err() != nil {
				return // ended by the caller or by another host's failure
			}
			mu.Lock()
			if first == nil {
				first = fmt.Errorf("host %s: %w", h, err)
			}
			mu.Unlock()
			cancel()
		})
	}
	wg.Wait()
	return first
}
