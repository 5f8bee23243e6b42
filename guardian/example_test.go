//go:build linux

package guardian_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/leaseledger/leaseledger/guardian"
)

// An MCP server run under the guardian: launch it, talk newline-delimited
// JSON-RPC over its stdio, then close it and read the cleanup verdict.
func Example() {
	helperPath, echoServer := guardian.BuiltBinaries()
	spec := guardian.Spec{
		Command:      echoServer, // answers each line with the same line
		Args:         []string{"echo"},
		ActivationID: "act-example",
		HelperPath:   helperPath, // empty in production: leaseledger-guardian beside the executable
		EOFGrace:     time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := guardian.Launch(ctx, spec)
	if err != nil {
		fmt.Println("launch:", err) // no target exists: there is no fallback
		return
	}

	// Use: the session's stream is the target's stdin and stdout.
	rw := s.Stream()
	if _, err := io.WriteString(rw, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n"); err != nil {
		fmt.Println("write:", err)
	}
	line, err := bufio.NewReader(rw).ReadString('\n')
	if err != nil {
		fmt.Println("read:", err)
	}
	fmt.Print("reply: ", line)

	// Close: the helper closes the target's stdin, waits for it to exit
	// (TERM and KILL only if it does not), and reports what it observed.
	cctx, ccancel := context.WithTimeout(context.Background(), spec.CleanupBudget())
	defer ccancel()
	res := s.Close(cctx)
	fmt.Println("confirmed:", res.Confirmed, "err:", res.Err())
	rc := res.Receipt
	fmt.Println("trigger:", rc.Trigger, "exit code:", rc.ExitCode, "signals sent:", len(rc.Signals))
	fmt.Println("pipes closed by EOF:", !rc.Stdout.Forced && !rc.Stderr.Forced)
	// Output:
	// reply: {"jsonrpc":"2.0","id":1,"method":"ping"}
	// confirmed: true err: <nil>
	// trigger: close exit code: 0 signals sent: 0
	// pipes closed by EOF: true
}
