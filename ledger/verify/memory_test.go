package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/oklog/ulid/v2"
	"github.com/transparency-dev/merkle/compact"
)

// layout is a Pebble table layout a writer can leave behind; verify's
// memory must stay under MemoryBound on each.
type layout string

const (
	// layoutBulk: large unsynced batches, flushed at the end (tables in
	// L5/L6 and a few in L0, no WAL to replay).
	layoutBulk layout = "bulk"
	// layoutSmall: one event per batch (a lightly loaded ledger commits
	// batches of a few events), closed without a flush: the WAL holds many
	// small records, the last memtable's worth is replayed at open.
	layoutSmall layout = "small"
	// layoutWAL: large batches, the last memtable nearly full at close
	// and not flushed: the most WAL a cleanly closed ledger leaves for the
	// reader to replay into memtables.
	layoutWAL layout = "wal"
)

// writeRawLedger makes a closed ledger of n events in dir fast: the ledger
// creates the directory, then the events are sealed and written with every
// key the committer writes for them (e/, a/, s/, k/, the Merkle nodes,
// m/tree, m/head) in Pebble batches shaped by lay, with the ledger's own
// Pebble options. Verifying it is the check that the keys are the ledger's.
func writeRawLedger(tb testing.TB, dir string, n int, lay layout) {
	tb.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	po := ledger.DefaultPebbleOptions()
	po.Logger = silent{}
	db, err := pebble.Open(dir, po)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	preps := make([]events.Prepared, 64)
	for i := range preps {
		if preps[i], err = events.Prepare(benchDraft(i)); err != nil {
			tb.Fatal(err)
		}
	}
	per := ledger.Seq(8192)
	if lay == layoutSmall {
		per = 1
	}
	// layoutWAL: flush walFrom-1 events, then fill one memtable to about
	// 90% (walEvents events) and close.
	walFrom := ledger.Seq(0)
	if lay == layoutWAL {
		walFrom = ledger.Seq(max(1, n-walEvents+1))
	}
	tree := (&compact.RangeFactory{Hash: hasher.HashChildren}).NewEmptyRange(0)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var prev events.Hash
	b := db.NewBatch()
	commit := func(seq ledger.Seq) {
		_ = b.Set([]byte(keys.Head), keys.EncodeHead(seq, prev), nil)
		_ = b.Set([]byte(keys.TreeSize), keys.EncodeTreeSize(seq), nil)
		if err := b.Commit(pebble.NoSync); err != nil {
			tb.Fatal(err)
		}
		b.Close()
		b = db.NewBatch()
	}
	for i := range n {
		seq := ledger.Seq(i + 1)
		if seq == walFrom {
			commit(seq - 1)
			if err := db.Flush(); err != nil {
				tb.Fatal(err)
			}
		}
		var id ulid.ULID
		if err := id.SetTime(ulid.Timestamp(at)); err != nil {
			tb.Fatal(err)
		}
		binary.BigEndian.PutUint64(id[8:], uint64(seq))
		env, raw := events.Seal(preps[i%len(preps)], seq, id, at, prev)
		prev = env.Hash
		for j, k := range keys.For(&env) {
			v := raw
			if j > 0 {
				v = nil
			}
			_ = b.Set(k, v, nil)
		}
		err := tree.Append(hasher.HashLeaf(raw), func(id compact.NodeID, h []byte) {
			if id.Level >= keys.TreeStoredLevel {
				_ = b.Set(keys.TreeNode(id.Level, id.Index), h, nil)
			}
		})
		if err != nil {
			tb.Fatal(err)
		}
		if seq%per == 0 || i == n-1 {
			commit(seq)
		}
	}
	b.Close()
	if lay == layoutBulk {
		if err := db.Flush(); err != nil {
			tb.Fatal(err)
		}
	}
	if testing.Verbose() {
		m := db.Metrics()
		tb.Logf("layout %s: %d tables in L0, %d in all; memtables %d (%d bytes)", lay,
			m.Levels[0].TablesCount, m.Total().TablesCount, m.MemTable.Count, m.MemTable.Size)
	}
}

// walEvents is how many events fill about 90% of the ledger's 64 MiB
// memtable (measured with layoutWAL: see its test log).
const walEvents = 100_000

// memoryChildEnv names the directory a child process verifies;
// memoryWriteEnv the one a child process writes.
const (
	memoryChildEnv = "VERIFY_MEMORY_CHILD"
	memoryWriteEnv = "VERIFY_MEMORY_WRITE"
)

// Verifying a directory of any layout stays under MemoryBound, measured as
// the peak RSS of a child process that does nothing else (the test binary
// re-executed; a binary built without the race detector when this one has
// it, whose shadow memory is not the verifier's). The directories are
// written by that binary too. Sizes: layoutWAL, the largest measured, at
// 10^6 events, the others at 10^5 (VERIFY_MEMORY_EVENTS sets all); the
// empty ledger's peak is under RuntimeMemory.
func TestVerifyMemoryBound(t *testing.T) {
	if dir := os.Getenv(memoryWriteEnv); dir != "" {
		n, err := strconv.Atoi(os.Getenv("VERIFY_MEMORY_EVENTS"))
		if err != nil {
			t.Fatal(err)
		}
		writeRawLedger(t, dir, n, layout(os.Getenv("VERIFY_MEMORY_LAYOUT")))
		return
	}
	if dir := os.Getenv(memoryChildEnv); dir != "" {
		rep, err := Dir(context.Background(), dir, Options{Tree: true})
		if err != nil {
			t.Fatal(err)
		}
		hwm, err := ownPeakRSS()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("verified %d events, %d index entries, %d tree nodes\n%s%d\n", rep.Events, rep.Indexes, rep.TreeNodes, peakLinePrefix, hwm)
		return
	}
	if testing.Short() {
		t.Skip("writes and verifies 10^6 events")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads the child's peak RSS from /proc")
	}
	n := 0
	if s := os.Getenv("VERIFY_MEMORY_EVENTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	bin := os.Args[0]
	if raceEnabled {
		bin = buildWithoutRace(t)
	}
	t.Run("empty", func(t *testing.T) {
		dir := t.TempDir()
		l, err := ledger.Open(ledger.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if peak := verifyPeak(t, bin, dir); peak > RuntimeMemory {
			t.Fatalf("peak RSS %d bytes over RuntimeMemory %d", peak, RuntimeMemory)
		}
	})
	for _, lay := range []layout{layoutBulk, layoutSmall, layoutWAL} {
		t.Run(string(lay), func(t *testing.T) {
			size := n
			if size == 0 {
				size = 100_000
				if lay == layoutWAL {
					size = 1_000_000
				}
			}
			dir := t.TempDir()
			start := time.Now()
			w := exec.Command(bin, "-test.run=^TestVerifyMemoryBound$", "-test.count=1")
			w.Env = append(os.Environ(), memoryWriteEnv+"="+dir, "VERIFY_MEMORY_EVENTS="+strconv.Itoa(size), "VERIFY_MEMORY_LAYOUT="+string(lay))
			if out, err := w.CombinedOutput(); err != nil {
				t.Fatalf("writer child: %v\n%s", err, out)
			}
			t.Logf("%d events written in %v", size, time.Since(start).Round(time.Millisecond))
			if peak := verifyPeak(t, bin, dir); peak > int64(MemoryBound) {
				t.Fatalf("peak RSS %d bytes over MemoryBound %d", peak, MemoryBound)
			}
		})
	}
}

// verifyPeak runs Dir on dir in a child process and returns its peak RSS.
func verifyPeak(t *testing.T, bin, dir string) int64 {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(bin, "-test.run=^TestVerifyMemoryBound$", "-test.count=1")
	cmd.Env = append(os.Environ(), memoryChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	// The child reports its own high-water mark. Its rusage cannot be
	// used: Go starts children with clone(CLONE_VM|CLONE_VFORK), so at
	// exec the kernel folds the parent's high-water RSS into the child's
	// ru_maxrss, and a test binary grown by earlier tests would be
	// charged to the verifier.
	i := bytes.LastIndex(out, []byte(peakLinePrefix))
	if i < 0 {
		t.Fatalf("child did not report its peak RSS:\n%s", out)
	}
	line, _, _ := bytes.Cut(out[i+len(peakLinePrefix):], []byte("\n"))
	peak, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil {
		t.Fatalf("child's peak RSS %q: %v", line, err)
	}
	t.Logf("verified in %v (%s): peak RSS %d MiB, MemoryBound %d MiB, RuntimeMemory %d MiB",
		time.Since(start).Round(time.Millisecond), firstLine(out), peak>>20, MemoryBound>>20, RuntimeMemory>>20)
	return peak
}

// Dir opens Pebble with the options PebbleMemory is made of, and the
// writer-side terms are the ledger's own defaults: a change to either
// side that would void the bound fails here.
func TestPebbleMemoryOptions(t *testing.T) {
	po := pebbleOptions()
	if po.CacheSize != PebbleCacheBytes || po.Cache != nil || po.MaxOpenFiles != PebbleMaxOpenFiles || po.MemTableSize != PebbleMemTableBytes {
		t.Fatalf("Dir's Pebble options: cache %d (%v), open files %d, memtable %d", po.CacheSize, po.Cache, po.MaxOpenFiles, po.MemTableSize)
	}
	def := ledger.DefaultPebbleOptions()
	def.EnsureDefaults()
	if def.MemTableSize != writerMemTableBytes || def.MemTableStopWritesThreshold != writerMemTables {
		t.Fatalf("ledger writes with memtables of %d bytes, %d before writes stop; WriterUnflushedBytes assumes %d, %d",
			def.MemTableSize, def.MemTableStopWritesThreshold, writerMemTableBytes, writerMemTables)
	}
	if ledger.MaxAppendEvents > ledger.DefaultMaxBatchEvents {
		t.Fatalf("an append of %d events exceeds the committer batch ledgerBatchBytes assumes", ledger.MaxAppendEvents)
	}
}

// peakLinePrefix begins the line on which a verifying child reports its
// peak RSS in bytes.
const peakLinePrefix = "peak_rss_bytes="

// ownPeakRSS returns this process's peak resident set size (VmHWM) in
// bytes.
func ownPeakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kib, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmHWM %q: %w", v, err)
			}
			return kib << 10, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// buildWithoutRace compiles this package's tests without the race detector.
func buildWithoutRace(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "verify.test")
	cmd := exec.Command(gobin, "test", "-c", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test binary without -race: %v\n%s", err, out)
	}
	return bin
}
