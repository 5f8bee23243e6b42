//go:build !linux

package gatewaybench

import "os"

// datasync is File.Sync where fdatasync(2) is missing (macOS, Windows), so
// the bench builds there; its floor is then a full sync (F_FULLFSYNC on
// macOS, FlushFileBuffers on Windows) and not comparable with Linux's.
func datasync(f *os.File) error { return f.Sync() }
