package servebench_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leaseledger/leaseledger/cmd/leaseledger/internal/servebench"
	"github.com/leaseledger/leaseledger/ledger/ledgerbench"
)

// ExampleRunServe measures the serve path on a tiny workload: 4 writers of
// 2 events per call, a snapshot every 100 events on the side that measures
// acknowledgements while snapshots run. Print res for the table.
func ExampleRunServe() {
	dir, err := os.MkdirTemp("", "servebench-example-*")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	res, err := servebench.RunServe(context.Background(), servebench.Config{
		Config: ledgerbench.Config{Dir: dir, Concurrency: 4, Batch: 2, Events: 400, Rounds: 1}, SnapshotEvery: 100})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("delivered to the subscriber:", res.Serve.Delivered, res.Snapshots.Delivered)
	fmt.Println("ratios measured:", res.Ratio() > 0, res.P99Ratio() > 0)
	// Output:
	// delivered to the subscriber: 400 400
	// ratios measured: true true
}
