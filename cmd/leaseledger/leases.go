package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/leaseledger/leaseledger/projector/live"
	"github.com/spf13/cobra"
)

func init() { extraCommands = append(extraCommands, newLeasesCmd) }

func newLeasesCmd(a *app) *cobra.Command {
	var (
		natsURL  string
		creds    natsCreds
		asJSON   bool
		liveOnly bool
	)
	cmd := &cobra.Command{
		Use:   "leases",
		Short: "Print the lease table, rebuilt by the projector from the log",
		Long: `leases replays the log through the projector — from --data-dir, or from a
running 'serve' over its replay API with --nats — and prints the lease table:
key (session or the shared key, server), state, activation, pinned config
fingerprint and listing digest, calls in flight, last use. Terminated leases
stay in the table until their session ends; --live shows only live ones.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A lease stream forgets retired activations as the replay
			// goes: memory follows live state, not history.
			st := live.NewStream(live.StreamOptions{})
			if natsURL != "" {
				nc, err := creds.connect(natsURL)
				if err != nil {
					return err
				}
				defer nc.Close()
				if _, err := creds.client(nc).Replay(cmd.Context(), 1, 0, busclient.TailFilter{}, st.Add); err != nil {
					return err
				}
			} else if err := scanDataDir(cmd.Context(), a, st.Scan); err != nil {
				return err
			}
			var rows []*projector.Lease
			for _, l := range st.Leases() {
				if !liveOnly || l.Live() {
					rows = append(rows, l)
				}
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if rows == nil {
					rows = []*projector.Lease{}
				}
				return enc.Encode(struct {
					Seq    uint64             `json:"seq"`
					Leases []*projector.Lease `json:"leases"`
				}{st.Seq(), rows})
			}
			return printLeases(a.stdout, st.Seq(), rows)
		},
	}
	f := cmd.Flags()
	f.StringVar(&natsURL, "nats", "", "replay from a running 'serve' at this NATS URL instead of opening --data-dir")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&liveOnly, "live", false, "only live leases (starting or ready)")
	creds.flags(f)
	return cmd
}

// scanDataDir opens --data-dir read-only and hands its ledger to scan.
func scanDataDir(ctx context.Context, a *app, scan func(context.Context, *ledger.Ledger) error) error {
	l, err := openReadOnly(a)
	if err != nil {
		return err
	}
	defer l.Close()
	return scan(ctx, l)
}

func printLeases(w io.Writer, seq uint64, rows []*projector.Lease) error {
	fmt.Fprintf(w, "lease table at seq %d: %d lease(s)\n", seq, len(rows))
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION KEY\tSERVER\tSTATE\tACTIVATION\tFINGERPRINT\tLISTING\tTOOLS\tIN FLIGHT\tCALLS\tLAST USE\tREASON")
	for _, l := range rows {
		last := "-"
		if !l.LastUse.IsZero() {
			last = l.LastUse.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", l.KeySession, l.Server, l.State, l.Activation,
			short(l.Fingerprint), short(l.ListingDigest), l.ToolCount, l.CallsInFlight, l.CallsFinished, last, dash(l.Reason))
	}
	return tw.Flush()
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return dash(digest)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
