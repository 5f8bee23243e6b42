package collector_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/collector"
)

// ReadFinding: none is nil; a damaged file still refuses, as an
// unreadable finding naming the file; one past MaxFindingBytes is
// ErrFindingTooLarge.
func TestReadFinding(t *testing.T) {
	dir := t.TempDir()
	if f, err := collector.ReadFinding(dir); f != nil || err != nil {
		t.Fatalf("no file: %+v, %v; want nil, nil", f, err)
	}
	p := filepath.Join(dir, collector.RefusedFile)
	if err := os.WriteFile(p, []byte(`{"host":"h1","seq":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := collector.ReadFinding(dir); err != nil || f == nil || f.Reason != collector.ReasonUnreadableFinding || !strings.Contains(f.Detail, p) {
		t.Fatalf("damaged file: %+v, %v; want an unreadable finding naming %s", f, err, p)
	}
	if err := os.WriteFile(p, []byte(strings.Repeat(" ", collector.MaxFindingBytes+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := collector.ReadFinding(dir); f != nil || !errors.Is(err, collector.ErrFindingTooLarge) {
		t.Fatalf("%d bytes: %+v, %v; want ErrFindingTooLarge", collector.MaxFindingBytes+1, f, err)
	}
}

// A refused host's finding read back from its mirror directory, as the
// fleet reads do.
func ExampleReadFinding() {
	dir, _ := os.MkdirTemp("", "finding-example")
	defer os.RemoveAll(dir)
	hostDir := collector.HostDir(dir, "h1")
	_ = os.MkdirAll(hostDir, 0o755)

	f, err := collector.ReadFinding(hostDir)
	fmt.Println(f, err)

	_ = os.WriteFile(filepath.Join(hostDir, collector.RefusedFile), []byte(`{"host":"h1","seq":42,"reason":"forked"}`), 0o644)
	f, err = collector.ReadFinding(hostDir)
	fmt.Println(f.Host, f.Seq, f.Reason, err)
	// Output:
	// <nil> <nil>
	// h1 42 forked <nil>
}
