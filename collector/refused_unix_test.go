//go:build unix

package collector_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/collector"
)

// readFindingWithin runs ReadFinding(dir) and fails the test if it does
// not return within d; unblock then releases a stuck read so that no
// goroutine outlives the test.
func readFindingWithin(t *testing.T, dir string, d time.Duration, unblock func()) (*collector.Finding, error) {
	t.Helper()
	type result struct {
		f   *collector.Finding
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := collector.ReadFinding(dir)
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-time.After(d):
		unblock()
		<-done
		t.Fatalf("ReadFinding(%s) did not return within %v", dir, d)
		return nil, nil
	}
}

// A RefusedFile that is a FIFO is ErrFindingNotRegular at once, never a
// read that waits for a writer.
func TestReadFindingFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, collector.RefusedFile)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := readFindingWithin(t, dir, 5*time.Second, func() {
		// A writer (O_RDWR never blocks on a FIFO) releases the reader.
		if w, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
			w.Close()
		}
	})
	if f != nil || !errors.Is(err, collector.ErrFindingNotRegular) {
		t.Fatalf("FIFO: %+v, %v; want ErrFindingNotRegular", f, err)
	}
}

// A RefusedFile that links to a device (here /dev/zero, endless) is
// ErrFindingNotRegular, never an unbounded read.
func TestReadFindingDevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	dir := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(dir, collector.RefusedFile)); err != nil {
		t.Fatal(err)
	}
	f, err := readFindingWithin(t, dir, 5*time.Second, func() {})
	if f != nil || !errors.Is(err, collector.ErrFindingNotRegular) {
		t.Fatalf("symlink to /dev/zero: %+v, %v; want ErrFindingNotRegular", f, err)
	}
}
