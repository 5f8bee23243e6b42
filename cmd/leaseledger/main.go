// Command leaseledger runs and inspects a leaseledger event ledger: `serve`
// opens the ledger in a data directory and starts its embedded NATS bus;
// `append`, `head`, `verify` and `export` work on a data directory;
// `tail` follows a running `serve` over NATS; `bench` measures. Started
// with the hidden first argument `guardian-helper` it is the guardian helper
// (see helperArg), so serve needs no separately installed helper binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaseledger/leaseledger/guardian/helper"
)

// helperArg, as the first argument, makes this binary the guardian helper
// (helper.Main) instead of the CLI. serve launches its MCP servers'
// guardians as its own executable with this argument
// (runtime.Options.HelperArgs); it is not a command for people, so cobra
// never sees it.
const helperArg = "guardian-helper"

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// app holds what every command shares: flags and standard streams. There
// is no package-level mutable state; tests build their own app.
type app struct {
	dataDir  string
	logLevel string
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	logger   *slog.Logger
	// shutdownExtra is added to shutdownGrace when a signal stops the
	// process: serve's --shutdown-budget for ending sessions and leases
	// comes before closing the storage. Written by serve, read by main's
	// signal goroutine.
	shutdownExtra atomic.Int64
}

// setShutdownExtra extends the grace of a signal's shutdown by d.
func (a *app) setShutdownExtra(d time.Duration) { a.shutdownExtra.Store(int64(d)) }

// defaultDataDir is used when neither --data-dir nor LEASELEDGER_DATA is set.
const defaultDataDir = "./leaseledger-data"

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "leaseledger",
		Short:         "Durable, hash-chained, replayable event ledger for MCP runtime leases",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(a.logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			a.logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
			return nil
		},
	}
	dd := os.Getenv("LEASELEDGER_DATA")
	if dd == "" {
		dd = defaultDataDir
	}
	root.PersistentFlags().StringVar(&a.dataDir, "data-dir", dd, "ledger data directory (env LEASELEDGER_DATA)")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.AddCommand(newServeCmd(a), newAppendCmd(a), newHeadCmd(a), newTailCmd(a), newReplayCmd(a),
		newVerifyCmd(a), newExportCmd(a), newBenchCmd(a))
	for _, extra := range extraCommands {
		root.AddCommand(extra(a))
	}
	wireFleet(a, root) // fleet.go: --fleet runs the read commands per mirrored host
	return root
}

// extraCommands lets other files of this package register commands
// (audit, leases, …) without editing the list above. It is written only by
// package initialisation.
var extraCommands []func(*app) *cobra.Command

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newApp(stdin, stdout, stderr).run(ctx, args)
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{stdin: stdin, stdout: stdout, stderr: stderr, logger: slog.New(slog.NewTextHandler(stderr, nil))}
}

func (a *app) run(ctx context.Context, args []string) int {
	stderr := a.stderr
	root := newRootCmd(a)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "leaseledger:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

// shutdownGrace bounds how long any command may take to stop after SIGINT
// or SIGTERM. Stopping normally takes milliseconds (serve drains its queue
// and closes Pebble); storage that no longer answers (a full or dead disk)
// must not keep the process alive. Nothing is lost by exiting: only
// fsynced events were ever acknowledged.
const shutdownGrace = 20 * time.Second

// exitProcess ends the process when a shutdown outlives its grace (tests
// replace it).
var exitProcess = os.Exit

// startGraceTimer exits the process with code 3 unless stop is called
// within grace of what started the shutdown (why).
func startGraceTimer(stderr io.Writer, why string, grace time.Duration, exit func(int)) (stop func()) {
	t := time.AfterFunc(grace, func() {
		fmt.Fprintf(stderr, "leaseledger: did not stop within %v of %s (storage not responding); exiting\n", grace, why)
		exit(3)
	})
	return func() { t.Stop() }
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == helperArg {
		// Before anything else, on the main goroutine: helper.Main locks
		// this OS thread, which forks the target, so the target's
		// PR_SET_PDEATHSIG fires only when the helper dies; and no signal
		// handler of the CLI may be installed in the helper.
		os.Exit(helper.Main())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := newApp(os.Stdin, os.Stdout, os.Stderr)
	go func() {
		<-ctx.Done()
		startGraceTimer(os.Stderr, "the signal", shutdownGrace+time.Duration(a.shutdownExtra.Load()), os.Exit)
	}()
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
