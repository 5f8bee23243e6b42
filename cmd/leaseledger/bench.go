package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/leaseledger/leaseledger/cmd/leaseledger/internal/gatewaybench"
	"github.com/leaseledger/leaseledger/cmd/leaseledger/internal/servebench"
	"github.com/leaseledger/leaseledger/cmd/leaseledger/internal/startupbench"
	"github.com/leaseledger/leaseledger/ledger/ledgerbench"
	"github.com/spf13/cobra"
)

// What `bench append --path` selects.
const (
	benchPathLedger = "ledger" // the bare log: ledgerbench.Run
	benchPathServe  = "serve"  // serve's whole path: servebench.RunServe
)

func newBenchCmd(a *app) *cobra.Command {
	bench := &cobra.Command{Use: "bench", Short: "Measure leaseledger against baselines in the same run"}
	var (
		cfg           ledgerbench.Config
		path          string
		snapshotEvery int
	)
	appendCmd := &cobra.Command{
		Use:   "append",
		Short: "Durable Append throughput against raw Pebble Sync commits, as ratios",
		Long: `bench append measures, in one run and interleaved round by round, durable
ledger Append throughput and raw Pebble Sync commits from the same number of
goroutines: once writing exactly the keys and values the ledger writes
(records, index entries, head) and once writing the records only. It prints
the three rates and the ratios. Use --batch 256 for the batch API.

--path serve measures the full path 'serve' runs instead of the bare log:
the ledger opened through the live projection (BeforeAck) with the
embedded NATS bus publishing every event to one real subscriber, each
writer appending a gateway's traffic (activations through their
lifecycle: lease, guardian, HTTP requests, call.admitted/call.finished,
barriers, close). Four sides alternate round by round: serve without
periodic snapshots, serve with a snapshot every --snapshot-every events
(so snapshots run during the measurement), raw Pebble Sync commits of the
same keys and values, and those commits each followed by the bare NATS
publication of their events to one subscriber. It prints the rates, the
ratios to raw Pebble and to raw Pebble + bare NATS, acknowledgement latency
p50/p99/max of each side, how many events the subscriber received, and the
p99 with snapshots over the p99 without.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := os.MkdirTemp(cfg.Dir, "leaseledger-bench-*")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			c := cfg
			c.Dir = dir
			switch path {
			case benchPathLedger:
			case benchPathServe:
				every := snapshotEvery
				if every <= 0 {
					every = max(c.Events/8, 1)
				}
				res, err := servebench.RunServe(cmd.Context(), servebench.Config{Config: c, SnapshotEvery: every})
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, res)
				return nil
			default:
				return fmt.Errorf("bench append: --path %q: want %s or %s", path, benchPathLedger, benchPathServe)
			}
			res, err := ledgerbench.Run(cmd.Context(), c)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, res)
			return nil
		},
	}
	f := appendCmd.Flags()
	f.IntVar(&cfg.Concurrency, "concurrency", 64, "appending goroutines on each side")
	f.IntVar(&cfg.Batch, "batch", 1, "events per Append call and per raw batch")
	f.IntVar(&cfg.Events, "events", 100000, "events per side per round")
	f.IntVar(&cfg.Rounds, "rounds", 3, "rounds, alternating the sides")
	f.StringVar(&path, "path", benchPathLedger, "what is measured: ledger (the bare log) or serve (projection, bus and a subscriber; see above)")
	f.IntVar(&snapshotEvery, "snapshot-every", 0, "--path serve: events between snapshots on the side with snapshots (default: --events/8)")
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: the system temp dir)")
	bench.AddCommand(appendCmd, newBenchGrowCmd(a), newBenchGatewayCmd(a), newBenchStartupCmd(a), newBenchStartupFloorCmd(a))
	return bench
}

func newBenchGrowCmd(a *app) *cobra.Command {
	var cfg servebench.GrowConfig
	cmd := &cobra.Command{
		Use:   "grow",
		Short: "Write --events events of gateway traffic into --data-dir as serve writes them",
		Long: `bench grow writes a gateway's traffic (activations through their whole
lifecycle, as 'bench append --path serve' generates it) into --data-dir
through the live projection, with serve's periodic snapshots and a final one:
a history of a chosen size to run serve, leases, audit --all and verify on,
as separate processes, and compare their start-up time and peak memory
between a small and a large ledger. The data directory must not hold
events yet. It keeps the directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Dir, cfg.Logger = a.dataDir, a.logger
			h, err := servebench.Grow(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "leaseledger: %s grown to seq %d\n", a.dataDir, h.Seq)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Events, "events", 100000, "events to write")
	f.IntVar(&cfg.Concurrency, "concurrency", 64, "appending goroutines")
	f.IntVar(&cfg.Batch, "batch", 1, "events per Append call")
	return cmd
}

func newBenchGatewayCmd(a *app) *cobra.Command {
	var (
		cfg      gatewaybench.Config
		scratch  string
		asJSON   bool
		sessions []int
	)
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "A tool call through the gateway against a plain MCP proxy plus one fsync, as ratios",
		Long: `bench gateway measures, in one run and interleaved round by round, a go-sdk
client calling an echo tool on a go-sdk upstream directly, through a plain
go-sdk proxy (a go-sdk server whose tool forwards each call through a
go-sdk client session of its own: no ledger, no lease) and through the
stack 'serve' runs (a ledger with fsync through its live projection, the
embedded bus, the runtime with the guardian helper, the MCP gateway),
over a Streamable HTTP upstream and over a stdio upstream (the go-sdk test
server; over stdio also the proxy through a guardian of its own, the
relay floor). Every side starts its own upstream sessions; clients speak
MCP 2025-11-25 over Streamable HTTP.

Each round samples the raw fsync floor (4 KiB write + fdatasync on a
growing file in the scratch directory, the ledger's disk) and the same
over blocks written before (the ledger writes its log ahead), times --calls
sequential calls per side (p50/p90/p99), and measures calls per second
with each --sessions level of concurrent sessions per side, each session
calling for --phase-time. It prints the
table and the goals' ratios: gateway p50 / (proxy p50 + fsync p50)
(goal <= 1.10; over stdio against the proxy through the guardian) and
gateway / proxy calls per second at each level (goal >= 0.90), with the
ledger's events and commits per call.

The stdio server is built with the go tool from the repository
(runtime/internal/testserver) unless --stdio-server names a built one.
--profile DIR adds an unmeasured pass writing CPU, blocking and mutex
profiles and an execution trace of the gateway sides and their floors
(sequential and at the first --sessions level) into DIR.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := gatewaybench.MkdirTemp(scratch)
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			c := cfg
			c.Dir, c.Sessions, c.Log = dir, slices.Clone(sessions), a.stderr
			if c.HelperPath == "" {
				if c.HelperPath, err = os.Executable(); err != nil {
					return fmt.Errorf("locate this executable (the guardian helper): %w", err)
				}
				c.HelperArgs = []string{helperArg}
			}
			if c.StdioServer == "" {
				fmt.Fprintf(a.stderr, "bench gateway: building %s\n", gatewaybench.StdioServerPkg)
				if c.StdioServer, err = gatewaybench.BuildStdioServer(cmd.Context(), dir); err != nil {
					return err
				}
			}
			res, err := gatewaybench.Run(cmd.Context(), c)
			if err != nil {
				return err
			}
			return a.printBench(res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Calls, "calls", gatewaybench.DefaultCalls, "timed sequential calls per side per round")
	f.DurationVar(&cfg.PhaseTime, "phase-time", gatewaybench.DefaultPhaseTime, "how long each session of a throughput phase keeps calling (after at least 8 calls)")
	f.IntSliceVar(&sessions, "sessions", gatewaybench.DefaultSessions, "concurrent sessions per side of the throughput phases")
	f.IntVar(&cfg.Rounds, "rounds", gatewaybench.DefaultRounds, "rounds, the sides' order rotating")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of the table")
	f.StringVar(&cfg.StdioServer, "stdio-server", "", "go-sdk MCP server binary with an echo tool for the stdio sides (default: build "+gatewaybench.StdioServerPkg+" with the go tool)")
	f.StringVar(&cfg.HelperPath, "guardian-helper", "", "guardian helper binary (default: this executable acting as the helper)")
	f.StringVar(&cfg.Profile.Dir, "profile", "", "directory for CPU, blocking and mutex profiles and execution traces of an extra, unmeasured pass")
	f.IntVar(&cfg.Profile.Calls, "profile-calls", gatewaybench.DefaultProfileCalls, "--profile: calls of each profiled phase")
	f.StringSliceVar(&cfg.Profile.Sides, "profile-sides", gatewaybench.DefaultProfileSides, "--profile: the sides profiled")
	f.StringVar(&scratch, "dir", "", "parent of the scratch directory holding the ledger and the fsync floor's file (default: the system temp dir)")
	return cmd
}

func newBenchStartupCmd(a *app) *cobra.Command {
	var (
		cfg    startupbench.Config
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "startup",
		Short: "serve's time to listening against a raw Pebble open plus an embedded NATS start, as ratios",
		Long: `bench startup measures serve's start-up against its floor on ledgers of
--events sizes, each grown as 'bench grow' grows it (a gateway's traffic
through the live projection, serve's periodic snapshots and a final one).
With --keep DIR the ledgers are kept as DIR/events-<N> and reused by later
runs (a ledger of 10^7 events takes minutes to grow); without it they are
grown in a scratch directory and removed.

Each side is this executable started as a process of its own; its time is
from starting the process to the first TCP connection accepted on the NATS
port it prints (the moment a client such as 'tail' or a dashboard can
connect). serve runs as 'serve --data-dir D --port -1' (no --config: the
ledger, its projection and the bus); the floor is a raw Pebble open of the
same directory with the ledger's Pebble options plus an embedded NATS server
started with the bus's options (the hidden 'bench startup-floor'). After
--warmup unmeasured starts of each, --rounds rounds alternate the sides and
sizes; each child is stopped with SIGTERM and reaped before the next starts.
A grow at full speed outruns Pebble's compactions and leaves a debt (10^7
events: about 300 tables in level 0) that every start's Pebble takes up
again in the background, on the cores serve's own start-up needs;
--compact compacts each ledger fully first (a ledger at rest).

It prints per size the median time to listening and peak RSS of both sides
and the ratio serve/floor (goal <= 1.5), and between the largest and the
smallest ledger the ratios of serve's and the floor's start-up and of
serve's peak RSS.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := cfg
			c.Log = a.stderr
			if c.Exe == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("locate this executable (both sides start it): %w", err)
				}
				c.Exe = exe
			}
			res, err := startupbench.Run(cmd.Context(), c)
			if err != nil {
				return err
			}
			return a.printBench(res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Sizes, "events", startupbench.DefaultSizes, "ledger sizes in events")
	f.StringVar(&cfg.Keep, "keep", "", "directory keeping the grown ledgers as events-<N>, reused when present (default: grow in a scratch directory and remove)")
	f.StringVar(&cfg.Dir, "dir", "", "parent of the scratch directory without --keep (default: the system temp dir)")
	f.IntVar(&cfg.Rounds, "rounds", startupbench.DefaultRounds, "measured rounds, each starting both sides on every ledger once")
	f.IntVar(&cfg.Warmup, "warmup", startupbench.DefaultWarmup, "unmeasured starts of each side on each ledger first (-1: none)")
	f.DurationVar(&cfg.Timeout, "timeout", startupbench.DefaultTimeout, "bound on one child's start and stop")
	f.BoolVar(&cfg.Compact, "compact", false, "compact each ledger fully first: a ledger at rest instead of the compaction debt a grow at full speed leaves (a kept ledger stays compacted)")
	f.IntVar(&cfg.GrowConcurrency, "grow-concurrency", startupbench.DefaultGrowConcurrency, "appending goroutines when growing a ledger (as bench grow --concurrency)")
	f.IntVar(&cfg.GrowBatch, "grow-batch", startupbench.DefaultGrowBatch, "events per Append call when growing a ledger (as bench grow --batch)")
	f.StringVar(&cfg.Exe, "exe", "", "leaseledger executable both sides run (default: this one)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of the table")
	return cmd
}

// newBenchStartupFloorCmd is the floor side of bench startup, started by
// it as a child: not a command for people.
func newBenchStartupFloorCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:    "startup-floor",
		Short:  "bench startup's floor: open --data-dir with raw Pebble, start an embedded NATS server, print its URL, hold until SIGTERM",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return startupbench.Floor(cmd.Context(), a.dataDir, a.stdout)
		},
	}
}

// printBench prints a bench command's result: indented JSON with --json,
// else its table (String).
func (a *app) printBench(res fmt.Stringer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	_, err := fmt.Fprintln(a.stdout, res)
	return err
}
