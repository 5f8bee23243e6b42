package gatewaybench

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): what the ledger's write-ahead log pays per
// durable commit on Linux.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
