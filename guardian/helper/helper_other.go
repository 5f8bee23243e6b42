//go:build !linux && !darwin

package helper

import (
	"fmt"
	"os"
)

// Main reports that the helper is unsupported on this platform: verified
// stdio needs a way to reap and signal the exact direct child and to see its
// descendants, which the helper has for Linux and macOS only (procOS).
func Main() int {
	fmt.Fprintln(os.Stderr, "leaseledger-guardian: unsupported platform (Linux and macOS only)")
	return 2
}
