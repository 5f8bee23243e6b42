//go:build !linux

package helper

import (
	"fmt"
	"os"
)

// Main reports that the helper is unsupported on this platform: verified
// stdio relies on pidfds, PR_SET_CHILD_SUBREAPER and PR_SET_PDEATHSIG.
func Main() int {
	fmt.Fprintln(os.Stderr, "leaseledger-guardian: unsupported platform (Linux only)")
	return 2
}
