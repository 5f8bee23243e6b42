package main

import (
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/spf13/cobra"
)

func newServeCmd(a *app) *cobra.Command {
	var opts ledger.BusOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Open the ledger in the data directory and serve it on an embedded NATS bus",
		Long: `serve opens (creating if needed) the ledger in --data-dir, starts an embedded
NATS server on loopback, publishes every committed event on
leaseledger.events.<family>.<action>.<activation or _>, answers replay, head
and append requests, and shuts down cleanly on SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.ReadOnlyPassword == "" {
				opts.ReadOnlyPassword = os.Getenv("LEASELEDGER_READONLY_PASSWORD")
			}
			if opts.WriterPassword == "" {
				opts.WriterPassword = os.Getenv("LEASELEDGER_WRITER_PASSWORD")
			}
			opts.Logger = a.logger
			l, err := ledger.Open(ledger.Options{Dir: a.dataDir, Logger: a.logger})
			if err != nil {
				return err
			}
			defer l.Close()
			bus, err := ledger.StartBus(l, opts)
			if err != nil {
				return err
			}
			defer bus.Close()
			h := l.Head()
			fmt.Fprintf(a.stdout, "leaseledger: ledger %s at seq %d\n", a.dataDir, h.Seq)
			fmt.Fprintf(a.stdout, "leaseledger: NATS listening on %s\n", bus.ClientURL())
			if ws := bus.WebSocketURL(); ws != "" {
				fmt.Fprintf(a.stdout, "leaseledger: NATS WebSocket on %s\n", ws)
			}
			<-cmd.Context().Done()
			fmt.Fprintln(a.stdout, "leaseledger: shutting down")
			if err := bus.Close(); err != nil {
				return err
			}
			if err := l.Close(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "leaseledger: stopped at seq %d\n", l.Head().Seq)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Host, "host", "127.0.0.1", "address the NATS server listens on")
	f.IntVar(&opts.Port, "port", ledger.DefaultBusPort, "NATS client port (-1: any free port)")
	f.IntVar(&opts.WebSocketPort, "ws-port", 0, "NATS WebSocket port for browser dashboards (0: off, -1: any free port)")
	f.StringVar(&opts.ReadOnlyUser, "read-only-user", "", "add a read-only NATS user (subscribe to events, call replay/head)")
	f.StringVar(&opts.ReadOnlyPassword, "read-only-password", "", "password of --read-only-user (env LEASELEDGER_READONLY_PASSWORD)")
	f.StringVar(&opts.WriterUser, "writer-user", "", "add a NATS user that may also append through leaseledger.api.append")
	f.StringVar(&opts.WriterPassword, "writer-password", "", "password of --writer-user (env LEASELEDGER_WRITER_PASSWORD)")
	f.BoolVar(&opts.DenyAnonymous, "deny-anonymous", false, "refuse unauthenticated clients (by default they are read-only)")
	return cmd
}
