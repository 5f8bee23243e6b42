package ledger

// walGateFS: a file system whose write-ahead log fsyncs a test can count,
// hold and fail — the injectable sync of the overlapped pipeline's tests
// (overlap_internal_test.go) and benchmark (overlap_bench_internal_test.go).

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walGateFS wraps a file system; every fsync of a write-ahead log (a
// "*.log" file) takes the first armed gate, if any: it blocks until the
// gate is released, then fails with the gate's error or syncs.
type walGateFS struct {
	vfs.FS
	syncs atomic.Int64 // WAL fsyncs completed (or failed)

	mu    sync.Mutex
	gates []*walGate
}

// walGate holds one WAL fsync: entered is closed when the fsync reaches
// it, release lets it go on.
type walGate struct {
	entered, release chan struct{}
	err              error // returned instead of syncing, when set
	releaseOnce      sync.Once
}

// arm queues a gate for the next WAL fsync not yet gated; err, when set,
// is what that fsync returns instead of syncing.
func (fs *walGateFS) arm(err error) *walGate {
	g := &walGate{entered: make(chan struct{}), release: make(chan struct{}), err: err}
	fs.mu.Lock()
	fs.gates = append(fs.gates, g)
	fs.mu.Unlock()
	return g
}

func (g *walGate) open() { g.releaseOnce.Do(func() { close(g.release) }) }

// waitEntered waits until the gated fsync has begun.
func (g *walGate) waitEntered(t *testing.T, what string) {
	t.Helper()
	waitClosed(t, what, g.entered)
}

func (fs *walGateFS) take() *walGate {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.gates) == 0 {
		return nil
	}
	g := fs.gates[0]
	fs.gates = fs.gates[1:]
	return g
}

func (fs *walGateFS) wrap(f vfs.File, name string) vfs.File {
	if !strings.HasSuffix(name, ".log") {
		return f
	}
	return &walGateFile{File: f, fs: fs}
}

func (fs *walGateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, name), nil
}

func (fs *walGateFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, name), nil
}

type walGateFile struct {
	vfs.File
	fs *walGateFS
}

func (f *walGateFile) sync(real func() error) error {
	defer f.fs.syncs.Add(1)
	if g := f.fs.take(); g != nil {
		close(g.entered)
		<-g.release
		if g.err != nil {
			return g.err
		}
	}
	return real()
}

func (f *walGateFile) Sync() error     { return f.sync(f.File.Sync) }
func (f *walGateFile) SyncData() error { return f.sync(f.File.SyncData) }

// gatedOptions are ledger options over a walGateFS on the real disk.
func gatedOptions(dir string) (Options, *walGateFS) {
	fs := &walGateFS{FS: vfs.Default}
	po := DefaultPebbleOptions()
	po.FS = fs
	return Options{Dir: dir, PebbleOptions: po, Logger: quietLog}, fs
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(pipeTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}
