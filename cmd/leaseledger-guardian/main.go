// Command leaseledger-guardian is the verified-stdio helper: the actual
// parent of an MCP server launched with cleanup "verified". A host (package
// guardian) starts it with pipes on stdin and stdout and speaks the packet-4
// frame protocol documented in docs/guardian.md; it is not meant to be run
// by hand. Build it static: CGO_ENABLED=0 go build ./cmd/leaseledger-guardian
package main

import (
	"os"

	"github.com/leaseledger/leaseledger/guardian/helper"
)

func main() {
	// helper.Main must run on the main goroutine: it locks the OS thread
	// that forks the target so the target's PR_SET_PDEATHSIG (which follows
	// the forking thread, not the process) fires only when the helper dies.
	os.Exit(helper.Main())
}
