//go:build linux && !guardianfullscan

package helper

// fullScanBaseline is false as shipped: descendants are listed from the
// helper's children files where the kernel has them (see candidates), and
// the session's tick scans only after a SIGCHLD (see poll).
const fullScanBaseline = false
