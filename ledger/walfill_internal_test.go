package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walTraceFS records, below the fill, every write to a write-ahead log:
// Pebble's sequential writes and the fill's zeros. failFill, when set, is
// returned by every WriteAt of a log instead of writing.
type walTraceFS struct {
	vfs.FS
	failFill error

	mu     sync.Mutex
	logs   map[string]*walTrace
	reused int // logs Pebble recycled (ReuseForWrite)
}

// walTrace is one log's record: dataEnd is the end of Pebble's data,
// writtenEnd the end of the region written so far (data or zeros).
type walTrace struct {
	dataEnd, writtenEnd int64
	fills, dataWrites   int
	// dataPastWritten counts data writes that ended past the written
	// region: on a filled log, none.
	dataPastWritten int
	// problems are broken promises: a fill below Pebble's data, a fill
	// that is not zeros.
	problems []string
}

func (fs *walTraceFS) trace(name string) *walTrace {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.logs == nil {
		fs.logs = map[string]*walTrace{}
	}
	t := &walTrace{}
	fs.logs[filepath.Base(name)] = t
	return t
}

func (fs *walTraceFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !isWAL(name) {
		return f, err
	}
	return &walTraceFile{File: f, fs: fs, t: fs.trace(name)}, nil
}

func (fs *walTraceFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	if err != nil || !isWAL(name) {
		return f, err
	}
	t := fs.trace(name)
	if fi, err := f.Stat(); err == nil {
		t.writtenEnd = fi.Size()
	}
	fs.mu.Lock()
	fs.reused++
	fs.mu.Unlock()
	return &walTraceFile{File: f, fs: fs, t: t}, nil
}

// snapshot returns a copy of every log's record.
func (fs *walTraceFS) snapshot() map[string]walTrace {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := map[string]walTrace{}
	for k, v := range fs.logs {
		out[k] = *v
	}
	return out
}

type walTraceFile struct {
	vfs.File
	fs *walTraceFS
	t  *walTrace
}

func (f *walTraceFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	t := f.t
	t.dataWrites++
	if t.dataEnd+int64(n) > t.writtenEnd {
		t.dataPastWritten++
	}
	t.dataEnd += int64(n)
	t.writtenEnd = max(t.writtenEnd, t.dataEnd)
	return n, err
}

func (f *walTraceFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	t := f.t
	if off < t.dataEnd {
		t.problems = append(t.problems, fmt.Sprintf("a fill at %d, below the data's end %d", off, t.dataEnd))
	}
	if bytes.ContainsFunc(p, func(r rune) bool { return r != 0 }) {
		t.problems = append(t.problems, fmt.Sprintf("a fill at %d that is not zeros", off))
	}
	fail := f.fs.failFill
	f.fs.mu.Unlock()
	if fail != nil {
		return 0, fail
	}
	n, err := f.File.WriteAt(p, off)
	f.fs.mu.Lock()
	t.fills++
	t.writtenEnd = max(t.writtenEnd, off+int64(n))
	f.fs.mu.Unlock()
	return n, err
}

// smallFillChunk is the fill chunk of the tests that must see many fills
// in a log of a few hundred KiB.
const smallFillChunk = 4096

// walTraceOptions are ledger options on the real disk over a walTraceFS.
func walTraceOptions(dir string) (Options, *walTraceFS) {
	fs := &walTraceFS{FS: vfs.Default}
	po := DefaultPebbleOptions()
	po.FS = fs
	return Options{Dir: dir, PebbleOptions: po, Logger: quietLog}, fs
}

// appendWALFill appends n one-event calls, each waiting for its ack, and
// returns their seqs.
func appendWALFill(t *testing.T, l *Ledger, from, n int) []Seq {
	t.Helper()
	var seqs []Seq
	for i := range n {
		seq, err := l.Append(context.Background(), pipeDraft(from+i))
		if err != nil {
			t.Fatalf("append %d: %v", from+i, err)
		}
		seqs = append(seqs, seq...)
	}
	return seqs
}

// appendClosed opens a ledger with opts, appends n one-event calls
// (appendWALFill) and closes it.
func appendClosed(t *testing.T, opts Options, n int) []Seq {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	seqs := appendWALFill(t, l, 0, n)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// readBack checks that every seq in seqs reads back from a ledger
// reopened on dir.
func readBack(t *testing.T, opts Options, seqs []Seq) {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer l.Close()
	for _, seq := range seqs {
		if _, err := l.Get(seq); err != nil {
			t.Fatalf("event %d after reopen: %v", seq, err)
		}
	}
	if head := l.Head().Seq; head != seqs[len(seqs)-1] {
		t.Fatalf("head after reopen %d, want %d", head, seqs[len(seqs)-1])
	}
}

// Pebble's bytes are never overwritten, and every commit's bytes land on
// blocks written before: on a filled log no data write ends past the
// written region, on a plain one (the control) nearly every one does.
func TestWALFillNeverOverwritesData(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			dir := t.TempDir()
			opts, fs := walTraceOptions(dir)
			opts.plainWAL = plain
			opts.walFillChunk = smallFillChunk
			seqs := appendClosed(t, opts, 300)
			logs := fs.snapshot()
			if len(logs) == 0 {
				t.Fatal("no write-ahead log was written")
			}
			var writes, past, fills int
			for name, lt := range logs {
				for _, p := range lt.problems {
					t.Errorf("%s: %s", name, p)
				}
				writes += lt.dataWrites
				past += lt.dataPastWritten
				fills += lt.fills
			}
			if writes < 300 {
				t.Fatalf("%d writes to the logs for 300 commits", writes)
			}
			if plain {
				if fills != 0 || past < writes/2 {
					t.Fatalf("plain logs: %d fills, %d of %d writes past the written region", fills, past, writes)
				}
			} else if past != 0 || fills < 10 {
				t.Fatalf("filled logs: %d fills, %d of %d writes past the written region", fills, past, writes)
			}
			readBack(t, opts, seqs)
		})
	}
}

// Recycled logs are filled past their old size only: with memtables small
// enough to be flushed many times over, Pebble reuses old logs, every data
// write still lands on written blocks, and every event reads back.
func TestWALFillRecycledLogs(t *testing.T) {
	dir := t.TempDir()
	opts, fs := walTraceOptions(dir)
	opts.PebbleOptions.MemTableSize = 256 << 10
	opts.walFillChunk = smallFillChunk
	seqs := appendClosed(t, opts, 2000)
	fs.mu.Lock()
	reused := fs.reused
	fs.mu.Unlock()
	if reused == 0 {
		t.Fatal("no log was recycled: the test did not reach ReuseForWrite")
	}
	for name, lt := range fs.snapshot() {
		for _, p := range lt.problems {
			t.Errorf("%s: %s", name, p)
		}
		if lt.dataPastWritten != 0 {
			t.Errorf("%s: %d of %d data writes past the written region", name, lt.dataPastWritten, lt.dataWrites)
		}
	}
	readBack(t, opts, seqs)
}

// A fill that fails costs only speed: the log grows as Pebble writes it,
// no fill is tried on it again, and every acknowledged event is there
// after a reopen.
func TestWALFillFailureFallsBack(t *testing.T) {
	dir := t.TempDir()
	opts, fs := walTraceOptions(dir)
	fs.failFill = errors.New("injected: no fill")
	seqs := appendClosed(t, opts, 100)
	var past int
	for name, lt := range fs.snapshot() {
		if lt.fills != 0 {
			t.Errorf("%s: %d fills written with every fill failing", name, lt.fills)
		}
		past += lt.dataPastWritten
	}
	if past < 100 {
		t.Fatalf("%d writes past the written region for 100 commits: the log did not grow as written", past)
	}
	fs.failFill = nil
	readBack(t, opts, seqs)
}

// The zeros after a log's last record are read as its end: a copy of a
// ledger's directory taken while it is open (what a crash leaves: every
// acknowledged commit written, the log ending in zeros, no clean close)
// opens read-only and writable with every acknowledged event, and appends
// after them.
func TestWALFillZeroTailReplays(t *testing.T) {
	dir := t.TempDir()
	opts, fs := walTraceOptions(dir)
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	seqs := appendWALFill(t, l, 0, 50)
	var tail bool
	for name, lt := range fs.snapshot() {
		if lt.writtenEnd > lt.dataEnd {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			tail = tail || fi.Size() > lt.dataEnd
		}
	}
	if !tail {
		t.Fatal("no log ends in zeros past its data")
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	copts := opts
	copts.Dir = crashed
	copts.PebbleOptions = DefaultPebbleOptions()
	// A read-only open (verify, audits) replays the log into memory and
	// writes nothing; then a writable one.
	ropts := copts
	ropts.ReadOnly = true
	r, err := Open(ropts)
	if err != nil {
		t.Fatalf("read-only open of the copy: %v", err)
	}
	if head := r.Head().Seq; head != seqs[len(seqs)-1] {
		t.Fatalf("the copy's head read-only %d, want %d", head, seqs[len(seqs)-1])
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := Open(copts)
	if err != nil {
		t.Fatalf("open the copy: %v", err)
	}
	if head := c.Head().Seq; head != seqs[len(seqs)-1] {
		t.Fatalf("the copy's head %d, want %d", head, seqs[len(seqs)-1])
	}
	more := appendWALFill(t, c, 50, 5)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	readBack(t, copts, append(seqs, more...))
}

// copyDir copies the regular files of src (a ledger's directory: flat) into
// dst. The lock files are plain files: the locks are flocks of the open
// files, which a copy does not take.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			in.Close()
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALFillTwin: a ledger whose log is written ahead stores exactly what
// one whose log grows stores, fed the same appends with a fixed clock and
// entropy — read back both after a clean close and from a copy of the
// directory taken while open (the crash image, which ends in the fill's
// zeros on one side and at the last record on the other).
func TestWALFillTwin(t *testing.T) {
	type dump struct{ ks, vs [][]byte }
	var closed, crashed [2]dump
	var heads [2]Head
	for i, plain := range []bool{true, false} {
		dir, image := t.TempDir(), t.TempDir()
		opts := twinOptions(dir)
		opts.plainWAL = plain
		opts.walFillChunk = smallFillChunk
		l := openTwin(t, opts)
		feedTwin(t, l)
		heads[i] = l.Head()
		copyDir(t, dir, image)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		closed[i].ks, closed[i].vs = dumpPebble(t, dir)
		crashed[i].ks, crashed[i].vs = dumpPebble(t, image)
	}
	if heads[0] != heads[1] || heads[0].Seq < 1000 {
		t.Fatalf("heads differ or too short: %+v %+v", heads[0], heads[1])
	}
	for name, d := range map[string][2]dump{"after a clean close": closed, "from the crash image": crashed} {
		if len(d[0].ks) != len(d[1].ks) || len(d[0].ks) < 1000 {
			t.Fatalf("%s: %d keys plain, %d filled", name, len(d[0].ks), len(d[1].ks))
		}
		for j := range d[0].ks {
			if !bytes.Equal(d[0].ks[j], d[1].ks[j]) || !bytes.Equal(d[0].vs[j], d[1].vs[j]) {
				t.Fatalf("%s: entry %d differs: %q vs %q", name, j, d[0].ks[j], d[1].ks[j])
			}
		}
	}
}
