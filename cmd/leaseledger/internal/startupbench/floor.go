package startupbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaseledger/leaseledger/bus"
	"github.com/leaseledger/leaseledger/ledger"
)

// FloorReadyPrefix starts the line Floor prints once it listens, followed
// by the NATS client URL, as serve's "NATS listening on" line.
const FloorReadyPrefix = "leaseledger: floor listening on "

// natsReadyWait bounds how long the floor's NATS server may take to accept
// connections (as bus.Start waits).
const natsReadyWait = 10 * time.Second

// floorNATSOptions are the options bus.Start gives its embedded server
// with serve's defaults (bus/server.go: loopback, any free port, the
// default limits), without the bus's users and permissions: starting the
// server is the floor, wiring the ledger to it is not.
func floorNATSOptions() *server.Options {
	return &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		MaxConn: bus.DefaultMaxConnections, MaxPending: bus.DefaultMaxPendingBytes,
		WriteDeadline: bus.DefaultWriteDeadline, MaxPayload: int32(max(bus.DefaultReplayChunkBytes+64<<10, 1<<20)),
		NoFastProducerStall: true,
	}
}

// Floor is the floor side's child process: it opens dir with raw Pebble
// and the ledger's own Pebble options (ledger.DefaultPebbleOptions,
// writable, as serve opens it; the directory must exist), starts an
// embedded NATS server with the bus's options, prints FloorReadyPrefix and
// the server's URL on stdout, and holds both until ctx ends; then it
// closes them. It reads nothing from the database: what serve does beyond
// opening its storage and starting its bus is what the ratio measures.
func Floor(ctx context.Context, dir string, stdout io.Writer) error {
	// Refused before Pebble sees it: a failed pebble.Open leaves its
	// disk-health goroutine behind.
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("startupbench: floor: %s is not a ledger directory: %w", dir, cmp.Or(err, error(fs.ErrInvalid)))
	}
	po := ledger.DefaultPebbleOptions()
	po.ErrorIfNotExists = true // never create a ledger where there was none
	db, err := pebble.Open(dir, po)
	if err != nil {
		return fmt.Errorf("startupbench: floor: open %s: %w", dir, err)
	}
	ns, err := server.NewServer(floorNATSOptions())
	if err != nil {
		return errors.Join(fmt.Errorf("startupbench: floor: NATS: %w", err), db.Close())
	}
	ns.Start() // returns with the listener open, as bus.Start starts it
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	if !ns.ReadyForConnections(natsReadyWait) {
		return errors.Join(fmt.Errorf("startupbench: floor: NATS not ready within %v", natsReadyWait), db.Close())
	}
	if _, err := fmt.Fprintf(stdout, "%s%s\n", FloorReadyPrefix, ns.ClientURL()); err != nil {
		return errors.Join(err, db.Close())
	}
	<-ctx.Done()
	return db.Close()
}
