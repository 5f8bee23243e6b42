package ledger

// A write-ahead log is written ahead with zeros.
//
// Every acknowledged commit ends with an fsync of Pebble's write-ahead log.
// A fresh log grows with every commit, so each fdatasync must also write the
// file's metadata (its new size, its newly allocated blocks) to disk, on top
// of the data's own write. Writing over blocks that are already written and
// within the file's size needs none of that; it is why Pebble recycles old
// logs in place, but only once a memtable has been flushed, so a ledger's
// first log after every open (until its 64 MiB memtable is full) always
// grows. The file system Pebble writes a writable
// ledger through (walFillFS) keeps each log's written region ahead of
// Pebble's data: when a write would pass it, zeros are written first from
// the region's end to walFillChunk past the write, on the same goroutine,
// then the write goes on. The fsync after a fill also flushes the zeros:
// one commit in a chunk's worth pays for the rest.
//
// What it costs: the first log after an open is written twice (zeros, then
// data), a chunk at a time. What it keeps: Pebble's bytes are never
// overwritten (a fill starts at or after the end of Pebble's data, and only
// the goroutine writing the log fills it, TestWALFillNeverOverwritesData);
// the zeros after the last record are what a preallocated or recycled log
// ends with, which Pebble's replay reads as the end of the log
// (TestWALFillZeroTailReplays, TestWALFillTwin; TestCrashDurability kills
// writers of filled logs). A fill that fails is dropped for good for that
// log, which then grows as Pebble writes it (TestWALFillFailureFallsBack):
// speed is lost, nothing else.

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walFillChunk is how many bytes of zeros a log is written ahead with each
// time Pebble's data reaches the end of its written region. Larger chunks
// fill less often, and the commit whose fsync flushes one waits longer:
// with 1 MiB, the ack p99 of BenchmarkWALFill is still below that of logs
// that grow.
const walFillChunk = 1 << 20

// walFillBuf is the size of the zero buffer a fill writes from.
const walFillBuf = 64 << 10

// walFillFS wraps the file system of a writable ledger's Pebble: every
// write-ahead log ("*.log", Pebble's log file names) it creates or reuses
// is a walFillFile writing chunk bytes ahead (walFillChunk; tests make it
// small, to fill often).
type walFillFS struct {
	vfs.FS
	chunk int64
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// Create implements vfs.FS.
func (fs walFillFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !isWAL(name) {
		return f, err
	}
	return &walFillFile{File: f, chunk: fs.chunk}, nil
}

// ReuseForWrite implements vfs.FS: a recycled log's blocks up to its size
// are written already (Pebble writes it again from the start), so it is
// filled past that size only (TestWALFillRecycledLogs).
func (fs walFillFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	if err != nil || !isWAL(name) {
		return f, err
	}
	w := &walFillFile{File: f, chunk: fs.chunk}
	if fi, err := f.Stat(); err == nil {
		w.filled = fi.Size()
	} else {
		w.failed = true
	}
	return w, nil
}

// walFillFile is a write-ahead log written ahead with zeros. Pebble writes
// a log sequentially with Write, from one goroutine at a time; the fields
// are that goroutine's.
type walFillFile struct {
	vfs.File
	chunk  int64 // how far past a write a fill reaches
	off    int64 // the end of Pebble's data: the next Write's offset
	filled int64 // the end of the written region (data or zeros)
	failed bool  // a fill failed: the log grows as written from then on
	zeros  []byte
}

// Write implements vfs.File: it fills the log ahead when p would pass the
// written region, then writes p.
func (f *walFillFile) Write(p []byte) (int, error) {
	if end := f.off + int64(len(p)); end > f.filled && !f.failed {
		f.fill(end)
	}
	n, err := f.File.Write(p)
	f.off += int64(n)
	f.filled = max(f.filled, f.off)
	return n, err
}

// fill writes zeros from the end of the written region (never before the
// end of Pebble's data) to f.chunk past end.
func (f *walFillFile) fill(end int64) {
	if f.zeros == nil {
		f.zeros = make([]byte, walFillBuf)
	}
	from, to := max(f.filled, f.off), end+f.chunk
	for from < to {
		n := min(int64(len(f.zeros)), to-from)
		if _, err := f.File.WriteAt(f.zeros[:n], from); err != nil {
			f.failed = true
			return
		}
		from += n
		f.filled = from
	}
}
