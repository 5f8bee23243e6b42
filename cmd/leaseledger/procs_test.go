package main

// Helpers for tests that run this command as a real process, on every
// system (the tests that signal it with SIGSTOP/SIGCONT are unix-only).

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// cliBinary builds this command (internal/testproc) into a test's
// temporary directory, for tests that need it as a real process.
func cliBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leaseledger")
	if err := testproc.Build(testproc.Binary{Out: bin, Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger"}); err != nil {
		t.Fatal(err)
	}
	return bin
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
