//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// Every read command works on a read-only bind mount of a data directory
// (what an auditor is given), and writes nothing to it.
func TestReadCommandsOnReadOnlyMount(t *testing.T) {
	src := t.TempDir()
	ledgertest.WriteFlushed(t, src, 50)
	ro := t.TempDir()
	if err := syscall.Mount(src, ro, "", syscall.MS_BIND, ""); err != nil {
		if os.Geteuid() == 0 {
			t.Skipf("read-only mount test skipped: running as root but bind mounts are not permitted here (%v); chmod cannot stand in for a read-only mount for root", err)
		}
		t.Skipf("read-only mount test skipped: bind mounts need root or CAP_SYS_ADMIN (%v)", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(ro, syscall.MNT_DETACH) })
	if err := syscall.Mount("", ro, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("read-only mount test skipped: cannot remount the bind read-only (%v)", err)
	}
	if err := os.WriteFile(filepath.Join(ro, "probe"), nil, 0o600); err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("the mount is writable: %v", err)
	}
	before := dirState(t, src)
	readCommands(t, ro, func(what string) { sameState(t, what, before, dirState(t, src)) })
	// A writer is refused on the read-only mount with a clear error.
	r := runCLI(t, context.Background(), "", "--data-dir", ro, "append")
	if r.code == 0 || !strings.Contains(r.stderr, "read-only file system") {
		t.Fatalf("append on a read-only mount: %+v", r)
	}
}
