package main

import (
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/ledger/ledgerbench"
	"github.com/spf13/cobra"
)

func newBenchCmd(a *app) *cobra.Command {
	bench := &cobra.Command{Use: "bench", Short: "Measure leaseledger against baselines in the same run"}
	var cfg ledgerbench.Config
	appendCmd := &cobra.Command{
		Use:   "append",
		Short: "Durable Append throughput against raw Pebble Sync commits, as ratios",
		Long: `bench append measures, in one run and interleaved round by round, durable
ledger Append throughput and raw Pebble Sync commits from the same number of
goroutines: once writing exactly the keys and values the ledger writes
(records, index entries, head) and once writing the records only. It prints
the three rates and the ratios. Use --batch 256 for the batch API.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := os.MkdirTemp(cfg.Dir, "leaseledger-bench-*")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			c := cfg
			c.Dir = dir
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
	f.StringVar(&cfg.Dir, "dir", "", "scratch directory (default: the system temp dir)")
	bench.AddCommand(appendCmd)
	return bench
}
