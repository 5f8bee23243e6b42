//go:build linux

package ledger_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
)

// fullDiskBound is how long any step of the full-disk test may take: the
// failure must be prompt, never a retry loop.
const fullDiskBound = 20 * time.Second

// mountTmpfs mounts a tmpfs of the given size ("8m") on a new directory, or
// skips the test where mounting is not permitted.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("full-disk test skipped: cannot mount a tmpfs here (%v); it needs root or CAP_SYS_ADMIN (run it in CI as root)", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// within runs fn and fails the test if it takes longer than fullDiskBound.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); fn() }()
	select {
	case <-done:
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	case <-time.After(fullDiskBound):
		t.Fatalf("%s: still running after %v", what, fullDiskBound)
	}
}

// On a full disk appends fail promptly with ErrNoSpace (sticky ErrFailed),
// Close completes, a writable reopen is refused at once with ErrNoSpace,
// read-only opens work and write nothing, and once space is freed the
// ledger reopens with every acknowledged event.
func TestFullDiskFailsPromptlyAndRecovers(t *testing.T) {
	mnt := mountTmpfs(t, "8m")
	dir := filepath.Join(mnt, "data")
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var acked ledger.Seq
	var appendErr error
	within(t, "append until the disk is full", func() {
		for i := 1; ; i++ {
			seqs, err := l.Append(ctx, ledgertest.Draft(i))
			if err != nil {
				appendErr = err
				return
			}
			acked = seqs[0]
		}
	})
	if !errors.Is(appendErr, ledger.ErrNoSpace) || !errors.Is(appendErr, ledger.ErrFailed) || !errors.Is(appendErr, syscall.ENOSPC) {
		t.Fatalf("append on a full disk: %v", appendErr)
	}
	if st := l.Stats(); !st.Failed || !errors.Is(st.Failure, ledger.ErrNoSpace) {
		t.Fatalf("stats: %+v", st)
	}
	select {
	case <-l.Failed():
	default:
		t.Fatal("Failed() not closed")
	}
	t.Logf("%d events acknowledged before: %v", acked, appendErr)
	within(t, "close", func() { _ = l.Close() })

	within(t, "writable reopen on the full disk", func() {
		_, err = ledger.Open(ledger.Options{Dir: dir})
	})
	if !errors.Is(err, ledger.ErrNoSpace) {
		t.Fatalf("writable reopen on a full disk: %v", err)
	}
	before := snapshotDir(t, dir)
	within(t, "read-only open on the full disk", func() {
		var ro *ledger.Ledger
		if ro, err = ledger.Open(ledger.Options{Dir: dir, ReadOnly: true}); err != nil {
			return
		}
		defer ro.Close()
		if h := ro.Head().Seq; h < acked {
			err = errors.New("read-only head below the acknowledged events")
			return
		}
		_, err = ro.Get(acked)
	})
	if err != nil {
		t.Fatalf("read-only open of a full disk: %v", err)
	}
	if after := snapshotDir(t, dir); !equalDirs(before, after) {
		t.Fatalf("a read-only open changed the directory:\n%v\n%v", before, after)
	}

	if err := syscall.Mount("tmpfs", mnt, "", syscall.MS_REMOUNT, "size=64m"); err != nil {
		t.Fatalf("grow the tmpfs: %v", err)
	}
	within(t, "reopen after space is freed", func() {
		l, err = ledger.Open(ledger.Options{Dir: dir})
	})
	if err != nil {
		t.Fatalf("reopen after space was freed: %v", err)
	}
	defer l.Close()
	if h := l.Head().Seq; h < acked {
		t.Fatalf("head %d after recovery, %d were acknowledged", h, acked)
	}
	for seq := ledger.Seq(1); seq <= acked; seq++ {
		if _, err := l.Get(seq); err != nil {
			t.Fatalf("acknowledged seq %d lost: %v", seq, err)
		}
	}
	if _, err := l.Append(ctx, ledgertest.Draft(0)); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
}

// fileState is a file's size, mode, mtime and contents.
type fileState struct {
	mode  os.FileMode
	mtime time.Time
	data  string
}

func snapshotDir(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fileState{mode: fi.Mode(), mtime: fi.ModTime()}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			st.data = string(b)
		}
		out[p] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalDirs(a, b map[string]fileState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.mode != w.mode || !v.mtime.Equal(w.mtime) || v.data != w.data {
			return false
		}
	}
	return true
}
