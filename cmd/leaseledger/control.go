package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leaseledger/leaseledger/control"
	"github.com/leaseledger/leaseledger/projector"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func init() { extraCommands = append(extraCommands, newControlCmd) }

// controlDefaultReason is the revoke reason recorded when --reason is not
// given.
const controlDefaultReason = "operator"

func newControlCmd(a *app) *cobra.Command {
	var (
		natsURL string
		creds   natsCreds
	)
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Act on a running 'serve' through its control API (the control user only)",
		Long: `control calls the runtime control API of a running 'serve' over NATS
(leaseledger.api.runtime.…, see docs/operations.md): list the live leases,
revoke a lease (and deny it; allow lifts a denial), end a session, reap
idle leases now, reload serve's --config (as SIGHUP does). Only the
bus's control user (serve --control-user) may call it: for any other user
the bus refuses the request as a permission violation.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&natsURL, "nats", "nats://127.0.0.1:4248", "NATS URL of the running 'serve'")
	creds.flags(pf)
	// client connects as the given user; the connection's asynchronous
	// errors (a permission violation) are reported by the call itself.
	client := func(run func(*control.Client) error) error {
		nc, err := creds.connect(natsURL, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			return err
		}
		defer nc.Close()
		err = run(control.NewClient(nc, creds.user).WithHost(creds.host))
		if errors.Is(err, control.ErrForbidden) {
			return fmt.Errorf("%w (connect as serve's --control-user)", err)
		}
		return err
	}

	var rv control.RevokeRequest
	revoke := &cobra.Command{
		Use:   "revoke --server NAME (--session ID | --shared) [--deny] [--reason CODE]",
		Short: "Revoke a session's lease of a server, or a server's shared lease",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return client(func(c *control.Client) error {
				r, err := c.Revoke(cmd.Context(), rv)
				if err != nil {
					return err
				}
				what := "lease " + rv.Session + "/" + rv.Server
				if rv.Shared {
					what = "shared lease of " + rv.Server
				}
				verb := "revoked"
				if rv.Deny {
					verb = "revoked and denied"
				}
				if r.Revoked == 0 { // a denial of a configured server without a lease
					verb = "denied (no lease to revoke)"
				}
				fmt.Fprintf(a.stdout, "%s %s\n", what, verb)
				return nil
			})
		},
	}
	f := revoke.Flags()
	f.StringVar(&rv.Server, "server", "", "server name in the configuration (mcp.json) or server id (as 'control leases' prints it)")
	f.StringVar(&rv.Session, "session", "", "the session whose own lease is revoked")
	f.BoolVar(&rv.Shared, "shared", false, "revoke the server's shared lease")
	f.BoolVar(&rv.Deny, "deny", false, "also deny the key until the runtime allows it again")
	f.StringVar(&rv.Reason, "reason", controlDefaultReason, "reason recorded in lease.revoked ([a-z0-9_]{1,64})")

	var al control.AllowRequest
	allow := &cobra.Command{
		Use:   "allow --server NAME (--session ID | --shared)",
		Short: "Lift a denial made by 'revoke --deny'",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return client(func(c *control.Client) error {
				if err := c.Allow(cmd.Context(), al); err != nil {
					return err
				}
				what := "server " + al.Server + " allowed to session " + al.Session
				if al.Shared {
					what = "shared lease of " + al.Server + " allowed"
				}
				fmt.Fprintln(a.stdout, what)
				return nil
			})
		},
	}
	f = allow.Flags()
	f.StringVar(&al.Server, "server", "", "server name in the configuration (mcp.json) or server id, as denied")
	f.StringVar(&al.Session, "session", "", "the session whose denial is lifted")
	f.BoolVar(&al.Shared, "shared", false, "lift the server's shared-lease denial")

	endSession := &cobra.Command{
		Use:   "end-session <session>",
		Short: "End a session: its MCP session and its leases (shared ones are spared)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return client(func(c *control.Client) error {
				if err := c.EndSession(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "session %s ended\n", args[0])
				return nil
			})
		},
	}

	var idleMax time.Duration
	reap := &cobra.Command{
		Use:   "reap [--idle-max DURATION]",
		Short: "Reap now every lease idle for at least --idle-max (default: serve's idle bound)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return client(func(c *control.Client) error {
				r, err := c.Reap(cmd.Context(), idleMax)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%d lease(s) reaped\n", r.Reaped)
				if r.RecordFailed {
					return errors.New("some of their ending could not be recorded: see serve's log")
				}
				return nil
			})
		},
	}
	reap.Flags().DurationVar(&idleMax, "idle-max", 0, "idle time after which a lease is reaped (0: serve's bound)")

	reload := &cobra.Command{
		Use:   "reload",
		Short: "Have serve read its --config (mcp.json) again and put it in force, as SIGHUP does",
		Long: `reload has serve read its --config again and put it in force: servers added
are offered from each session's next listing, servers removed have their leases
ended. A file that fails to load changes nothing (exit status 1; serve's log
says why).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return client(func(c *control.Client) error {
				r, err := c.Reload(cmd.Context())
				if errors.Is(err, control.ErrConfigNotLoaded) {
					return fmt.Errorf("%w (the previous configuration stays in force; serve's log says why)", err)
				} else if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "config reloaded: %d server(s), added %s, removed %s (%d lease(s) ended)\n",
					r.Servers, reloadNames(r.Added, r.AddedOmitted), reloadNames(r.Removed, r.RemovedOmitted), r.LeasesEnded)
				if r.RecordFailed {
					return errors.New("the configuration is in force, but not all of it could be recorded: see serve's log")
				}
				return nil
			})
		},
	}

	var (
		asJSON  bool
		session string
	)
	leases := &cobra.Command{
		Use:   "leases [--session ID] [--json]",
		Short: "Print the live leases (all pages)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return client(func(c *control.Client) error {
				var rows []*projector.Lease
				var seq uint64
				for after := ""; ; {
					page, err := c.LiveLeases(cmd.Context(), control.LiveLeasesRequest{After: after, Limit: control.MaxLeasesPage, Session: session})
					if err != nil {
						return err
					}
					seq = max(seq, page.Seq)
					for i := range page.Leases {
						rows = append(rows, &page.Leases[i])
					}
					if after = page.Next; after == "" {
						break
					}
				}
				if asJSON {
					if rows == nil {
						rows = []*projector.Lease{}
					}
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(struct {
						Seq    uint64             `json:"seq"`
						Leases []*projector.Lease `json:"leases"`
					}{seq, rows})
				}
				return printLeases(a.stdout, seq, rows)
			})
		},
	}
	leases.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	leases.Flags().StringVar(&session, "session", "", "only the leases of this key session")

	cmd.AddCommand(revoke, allow, endSession, reap, reload, leases)
	return cmd
}

// reloadNames prints a reload's list of names as serve does ("[a b]"),
// with the number left out of the reply.
func reloadNames(names []string, omitted int) string {
	s := fmt.Sprint(names)
	if omitted > 0 {
		s += fmt.Sprintf(" and %d more", omitted)
	}
	return s
}
