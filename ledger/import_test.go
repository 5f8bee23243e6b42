package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/oklog/ulid/v2"
)

func nowNanos() int64 { return time.Now().UnixNano() }

// sourceLedger appends n varied events (several activations, sessions and
// kinds, calls of 1 to 7 events) to a new ledger in dir and returns it open.
func sourceLedger(t testing.TB, dir string, n int) *ledger.Ledger {
	t.Helper()
	l := open(t, dir)
	appendVaried(t, l, 0, n)
	return l
}

func appendVaried(t testing.TB, l *ledger.Ledger, from, n int) {
	t.Helper()
	for i := from; i < from+n; {
		k := min(1+i%7, from+n-i)
		ds := make([]events.Draft, k)
		for j := range ds {
			a := fmt.Sprintf("a%d", (i+j)%5)
			switch (i + j) % 3 {
			case 0:
				ds[j] = draft(a, fmt.Sprintf("s%d", (i+j)%4), i+j)
			case 1:
				ds[j] = events.Draft{Activation: a, Payload: &events.LeaseTerminated{Reason: events.TerminatedSessionEnded}}
			default:
				ds[j] = events.Draft{Payload: &events.LeaseTerminated{Reason: events.TerminatedAll}}
			}
		}
		if _, err := l.Append(context.Background(), ds...); err != nil {
			t.Fatal(err)
		}
		i += k
	}
}

// rawsOf returns the stored bytes of seqs 1..head.
func rawsOf(t testing.TB, l *ledger.Ledger) [][]byte {
	t.Helper()
	var out [][]byte
	for s := ledger.Seq(1); s <= l.Head().Seq; s++ {
		raw, err := l.GetRaw(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(raw))
	}
	return out
}

func openMirror(t testing.TB, dir string) *ledger.Ledger {
	t.Helper()
	m, err := ledger.Open(ledger.Options{Dir: dir, Mirror: true})
	if err != nil {
		t.Fatalf("open mirror: %v", err)
	}
	return m
}

// dumpDir returns every key and value of a closed ledger directory but
// m/mirror, the one key only a mirror has.
func dumpDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, FormatMajorVersion: pebble.FormatNewest, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for ok := it.First(); ok; ok = it.Next() {
		if string(it.Key()) != keys.Mirror {
			out[string(it.Key())] = bytes.Clone(it.Value())
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportTwin: a mirror fed a source's raws in random chunks, with random
// re-deliveries of stored events and two importers racing over the same
// raws, stores exactly the source's keys and values (events, indexes, head,
// Merkle nodes, tree size), and its reads, roots and proofs equal the
// source's.
func TestImportTwin(t *testing.T) {
	ctx := context.Background()
	srcDir, mDir := t.TempDir(), t.TempDir()
	src := sourceLedger(t, srcDir, 1500)
	raws := rawsOf(t, src)
	m := openMirror(t, mDir)
	rng := rand.New(rand.NewPCG(uint64(len(raws)), 3))
	var mu sync.Mutex // the rng
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for int(m.Head().Seq) < len(raws) {
				mu.Lock()
				head := int(m.Head().Seq)
				from := head - rng.IntN(min(head, 40)+1) // a re-delivery of up to 40 stored events
				if w == 1 && rng.IntN(3) == 0 {
					from = head + rng.IntN(3) // sometimes ahead of the other importer
				}
				n := 1 + rng.IntN(300)
				mu.Unlock()
				to := min(from+n, len(raws))
				if from >= to {
					continue
				}
				_, err := m.Import(ctx, raws[from:to])
				if err != nil && !errors.Is(err, ledger.ErrImportGap) {
					t.Errorf("import %d..%d: %v", from+1, to, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m.Head() != src.Head() {
		t.Fatalf("mirror head %+v, source %+v", m.Head(), src.Head())
	}
	if got := rawsOf(t, m); !slices.EqualFunc(got, raws, bytes.Equal) {
		t.Fatal("mirror events differ from the source's")
	}
	for _, q := range []ledger.Query{{Kind: "lease.terminated"}, {Activation: "a3"}, {Session: "s1"}} {
		if a, b := scanSeqs(t, src, q), scanSeqs(t, m, q); !slices.Equal(a, b) || len(a) == 0 {
			t.Fatalf("scan %+v: source %d seqs, mirror %d", q, len(a), len(b))
		}
	}
	size := src.Head().Seq
	for _, s := range []ledger.Seq{1, 17, size / 2, size} {
		r1, err1 := src.TreeRoot(ctx, s)
		r2, err2 := m.TreeRoot(ctx, s)
		if err1 != nil || err2 != nil || !bytes.Equal(r1, r2) {
			t.Fatalf("root %d: %x %v, mirror %x %v", s, r1, err1, r2, err2)
		}
		p1, _ := src.InclusionProof(ctx, s, size)
		p2, err := m.InclusionProof(ctx, s, size)
		if err != nil || !slices.EqualFunc(p1, p2, bytes.Equal) {
			t.Fatalf("inclusion proof %d: %v", s, err)
		}
		c1, _ := src.ConsistencyProof(ctx, s, size)
		c2, err := m.ConsistencyProof(ctx, s, size)
		if err != nil || !slices.EqualFunc(c1, c2, bytes.Equal) {
			t.Fatalf("consistency proof %d: %v", s, err)
		}
	}
	if _, err := verify.Ledger(ctx, m, verify.Options{}); err != nil {
		t.Fatalf("verify mirror: %v", err)
	}
	src.Close()
	m.Close()
	a, b := dumpDir(t, srcDir), dumpDir(t, mDir)
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			t.Fatalf("key %q: source %x, mirror %x (present %v)", k, v, w, ok)
		}
	}
	if len(a) != len(b) {
		t.Fatalf("source has %d keys, mirror %d", len(a), len(b))
	}
}

func scanSeqs(t *testing.T, l *ledger.Ledger, q ledger.Query) []ledger.Seq {
	t.Helper()
	var out []ledger.Seq
	if err := l.Scan(context.Background(), q, func(s ledger.Seq, _ []byte) error { out = append(out, s); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportGap: a batch starting past head+1 is refused with
// ErrImportGap and nothing of it is written.
func TestImportGap(t *testing.T) {
	src := sourceLedger(t, t.TempDir(), 30)
	defer src.Close()
	raws := rawsOf(t, src)
	m := openMirror(t, t.TempDir())
	defer m.Close()
	if _, err := m.Import(context.Background(), raws[:10]); err != nil {
		t.Fatal(err)
	}
	_, err := m.Import(context.Background(), raws[11:20])
	var le *ledger.Error
	if !errors.Is(err, ledger.ErrImportGap) || !errors.As(err, &le) {
		t.Fatalf("import after a hole: %v, want ErrImportGap in *ledger.Error", err)
	}
	if m.Head().Seq != 10 {
		t.Fatalf("head %d after a refused gap, want 10", m.Head().Seq)
	}
	if _, err := m.GetRaw(12); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("seq 12 after a refused gap: %v", err)
	}
}

// forkedRaws returns the raws of a source of n events and of a rewrite of
// it that keeps the first keep events and then differs.
func forkedRaws(t *testing.T, n int, keep ledger.Seq) (orig, forked [][]byte) {
	t.Helper()
	dir := t.TempDir()
	src := sourceLedger(t, dir, n)
	orig = rawsOf(t, src)
	src.Close()
	ledgertest.Fork(t, dir, keep)
	l := open(t, dir)
	defer l.Close()
	appendVaried(t, l, 1000, n-int(keep))
	forked = rawsOf(t, l)
	if !bytes.Equal(orig[keep-1], forked[keep-1]) || bytes.Equal(orig[keep], forked[keep]) {
		t.Fatal("the rewrite does not fork at keep+1")
	}
	return orig, forked
}

func hashOf(t *testing.T, raw []byte) events.Hash {
	t.Helper()
	env, err := events.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return env.Hash
}

// TestImportFork: offered events that contradict the stored chain are
// refused whole with a *ForkError naming the first differing seq and both
// hashes — an overlapping batch (also one whose new tail would chain), and
// a batch that starts at head+1 but whose prev is not the stored head.
func TestImportFork(t *testing.T) {
	ctx := context.Background()
	orig, forked := forkedRaws(t, 20, 8)
	m := openMirror(t, t.TempDir())
	defer m.Close()
	if _, err := m.Import(ctx, orig[:12]); err != nil {
		t.Fatal(err)
	}
	want := m.Head()
	check := func(what string, batch [][]byte, seq ledger.Seq, stored, offered events.Hash) {
		t.Helper()
		_, err := m.Import(ctx, batch)
		var fe *ledger.ForkError
		if !errors.Is(err, ledger.ErrForked) || !errors.As(err, &fe) {
			t.Fatalf("%s: %v, want a *ForkError", what, err)
		}
		if *fe != (ledger.ForkError{Seq: seq, Stored: stored, Offered: offered}) {
			t.Fatalf("%s: %+v, want seq %d stored %s offered %s", what, fe, seq, stored, offered)
		}
		if m.Head() != want {
			t.Fatalf("%s: head moved to %d", what, m.Head().Seq)
		}
	}
	// Seqs 6..18 of the rewrite: 6..8 equal, 9 differs, 13..18 new.
	check("partial overlap", forked[5:18], 9, hashOf(t, orig[8]), hashOf(t, forked[8]))
	check("stored range only", forked[9:11], 10, hashOf(t, orig[9]), hashOf(t, forked[9]))
	check("next events of another chain", forked[12:15], 12, hashOf(t, orig[11]), hashOf(t, forked[11]))
	for s := ledger.Seq(13); s <= 18; s++ {
		if _, err := m.GetRaw(s); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("seq %d written by a refused batch: %v", s, err)
		}
	}
	// The honest continuation still imports.
	if _, err := m.Import(ctx, orig[10:]); err != nil || m.Head().Seq != 20 {
		t.Fatalf("honest continuation: %v, head %d", err, m.Head().Seq)
	}
}

// TestImportChainBroken: a batch holding a malformed event, an event whose
// hash does not recompute, a seq out of order or a broken prev link is
// refused whole with ErrChainBroken.
func TestImportChainBroken(t *testing.T) {
	src := sourceLedger(t, t.TempDir(), 10)
	defer src.Close()
	raws := rawsOf(t, src)
	m := openMirror(t, t.TempDir())
	defer m.Close()
	tampered := bytes.Replace(bytes.Clone(raws[3]), []byte(`"reason":"`), []byte(`"reason":"x`), 1)
	if bytes.Equal(tampered, raws[3]) {
		tampered = bytes.Replace(bytes.Clone(raws[3]), []byte(`"call_id":"c`), []byte(`"call_id":"x`), 1)
	}
	cases := map[string][][]byte{
		"garbage":       {raws[0], []byte("{nope")},
		"hash":          {raws[0], raws[1], raws[2], tampered},
		"seq order":     {raws[0], raws[2]},
		"repeated":      {raws[0], raws[0]},
		"wrong genesis": {wrongGenesis(t)},
	}
	for name, batch := range cases {
		if _, err := m.Import(context.Background(), batch); !errors.Is(err, ledger.ErrChainBroken) {
			t.Fatalf("%s: %v, want ErrChainBroken", name, err)
		}
		if m.Head().Seq != 0 {
			t.Fatalf("%s: head %d after a refused batch", name, m.Head().Seq)
		}
	}
}

// wrongGenesis is a sealed seq 1 whose prev is not the zero hash.
func wrongGenesis(t *testing.T) []byte {
	p, err := events.Prepare(draft("a", "s", 1))
	if err != nil {
		t.Fatal(err)
	}
	_, raw := events.Seal(p, 1, ulid.Make(), time.Now(), events.Hash{1})
	return raw
}

// TestImportMirrorOnly: Append (also async and keyed) on a mirror and
// Import on an ordinary ledger fail with ErrMirror.
func TestImportMirrorOnly(t *testing.T) {
	ctx := context.Background()
	src := sourceLedger(t, t.TempDir(), 3)
	defer src.Close()
	if _, err := src.Import(ctx, rawsOf(t, src)); !errors.Is(err, ledger.ErrMirror) {
		t.Fatalf("import into an ordinary ledger: %v", err)
	}
	m := openMirror(t, t.TempDir())
	defer m.Close()
	if !m.IsMirror() || src.IsMirror() {
		t.Fatal("IsMirror")
	}
	if _, err := m.Append(ctx, draft("a", "s", 1)); !errors.Is(err, ledger.ErrMirror) {
		t.Fatalf("append to a mirror: %v", err)
	}
	if _, err := m.AppendAsync(ctx, draft("a", "s", 1)); !errors.Is(err, ledger.ErrMirror) {
		t.Fatalf("async append to a mirror: %v", err)
	}
	if _, _, err := m.AppendIdempotent(ctx, ledger.Idempotency{Key: "k"}, draft("a", "s", 1)); !errors.Is(err, ledger.ErrMirror) {
		t.Fatalf("keyed append to a mirror: %v", err)
	}
	if m.Head().Seq != 0 {
		t.Fatal("a refused append wrote")
	}
}

// TestMirrorFlagPersists: the mirror flag survives reopening; a writable
// open disagreeing with the directory fails with ErrMirror; read-only opens
// of a mirror work and verify it.
func TestMirrorFlagPersists(t *testing.T) {
	ctx := context.Background()
	srcDir, mDir := t.TempDir(), t.TempDir()
	src := sourceLedger(t, srcDir, 20)
	raws := rawsOf(t, src)
	src.Close()
	m := openMirror(t, mDir)
	if _, err := m.Import(ctx, raws[:15]); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := ledger.Open(ledger.Options{Dir: mDir}); !errors.Is(err, ledger.ErrMirror) {
		t.Fatalf("writable open of a mirror without Mirror: %v", err)
	}
	if _, err := ledger.Open(ledger.Options{Dir: srcDir, Mirror: true}); !errors.Is(err, ledger.ErrMirror) {
		t.Fatalf("open of an ordinary ledger as a mirror: %v", err)
	}
	ro, err := ledger.Open(ledger.Options{Dir: mDir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !ro.IsMirror() || ro.Head().Seq != 15 {
		t.Fatalf("read-only mirror: IsMirror %v head %d", ro.IsMirror(), ro.Head().Seq)
	}
	if rep, err := verify.Ledger(ctx, ro, verify.Options{}); err != nil || rep.Events != 15 {
		t.Fatalf("verify read-only mirror: %v", err)
	}
	if _, err := ro.Import(ctx, raws[15:]); err == nil {
		t.Fatal("import into a read-only mirror succeeded")
	}
	ro.Close()
	m = openMirror(t, mDir)
	defer m.Close()
	if h, err := m.Import(ctx, raws[10:]); err != nil || h.Seq != 20 {
		t.Fatalf("import after reopen: head %d, %v", h.Seq, err)
	}
}

type batchRecorder struct {
	mu   sync.Mutex
	raws [][]byte
}

func (r *batchRecorder) Committed(batch []ledger.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range batch {
		r.raws = append(r.raws, bytes.Clone(rec.Raw))
	}
}

func (r *batchRecorder) get() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.raws)
}

// TestImportObservers: BeforeAck and Watch observers of a mirror see every
// imported event once, in seq order, with the source's bytes; BeforeAck has
// seen an import's events when Import returns.
func TestImportObservers(t *testing.T) {
	ctx := context.Background()
	src := sourceLedger(t, t.TempDir(), 200)
	defer src.Close()
	raws := rawsOf(t, src)
	before, watched := &batchRecorder{}, &batchRecorder{}
	m, err := ledger.Open(ledger.Options{Dir: t.TempDir(), Mirror: true, BeforeAck: before})
	if err != nil {
		t.Fatal(err)
	}
	unwatch := m.Watch(watched)
	for i := 0; i < len(raws); i += 30 {
		h, err := m.Import(ctx, raws[max(0, i-5):min(i+30, len(raws))])
		if err != nil {
			t.Fatal(err)
		}
		if got := before.get(); len(got) < int(h.Seq) {
			t.Fatalf("Import returned head %d, BeforeAck saw %d events", h.Seq, len(got))
		}
	}
	// Watch observers are behind a queue: wait for the last batch.
	for deadline := time.Now().Add(10 * time.Second); len(watched.get()) < len(raws) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	unwatch()
	m.Close()
	if got := before.get(); !slices.EqualFunc(got, raws, bytes.Equal) {
		t.Fatalf("BeforeAck saw %d events, want the source's %d", len(got), len(raws))
	}
	if got := watched.get(); !slices.EqualFunc(got, raws, bytes.Equal) {
		t.Fatalf("Watch saw %d events, want the source's %d", len(got), len(raws))
	}
}

// BenchmarkImportVsAppend appends b.N events in calls of 256 to one
// ledger, then imports the same raws in chunks of 256 into a mirror, and
// reports both rates and import/append (the collector's ingest cost against
// a host's own append, same disk, same run).
func BenchmarkImportVsAppend(b *testing.B) {
	ctx := context.Background()
	src := open(b, b.TempDir())
	defer src.Close()
	m := openMirror(b, b.TempDir())
	defer m.Close()
	const chunk = 256
	ds := make([]events.Draft, chunk)
	for i := range ds {
		ds[i] = draft(fmt.Sprintf("a%d", i%8), "s", i)
	}
	b.ResetTimer()
	start := nowNanos()
	for done := 0; done < b.N; done += chunk {
		if _, err := src.Append(ctx, ds[:min(chunk, b.N-done)]...); err != nil {
			b.Fatal(err)
		}
	}
	appendNs := nowNanos() - start
	b.StopTimer()
	raws := rawsOf(b, src)
	b.StartTimer()
	start = nowNanos()
	for i := 0; i < len(raws); i += chunk {
		if _, err := m.Import(ctx, raws[i:min(i+chunk, len(raws))]); err != nil {
			b.Fatal(err)
		}
	}
	importNs := nowNanos() - start
	b.ReportMetric(float64(b.N)/(float64(appendNs)/1e9), "append-events/s")
	b.ReportMetric(float64(b.N)/(float64(importNs)/1e9), "import-events/s")
	b.ReportMetric(float64(appendNs)/float64(importNs), "import/append")
}

const importCrashEnv = "LEASELEDGER_IMPORT_CRASH_CHILD"

// importCrashChild runs in a re-executed test binary: it imports the
// source ledger <src> into the mirror <dst> (env "<src> <dst>") in random
// chunks that re-deliver some stored events, printing the head each Import
// returns as soon as it returns, and then waits to be killed.
func importCrashChild() {
	src, dst, _ := strings.Cut(os.Getenv(importCrashEnv), " ")
	s, err := ledger.Open(ledger.Options{Dir: src, ReadOnly: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open source:", err)
		os.Exit(2)
	}
	m, err := ledger.Open(ledger.Options{Dir: dst, Mirror: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open mirror:", err)
		os.Exit(2)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	last := s.Head().Seq
	// The first line, the head reopened, arms the parent's kill even when
	// there is nothing left to import.
	os.Stdout.WriteString(strconv.FormatUint(uint64(m.Head().Seq), 10) + "\n")
	for m.Head().Seq < last {
		head := m.Head().Seq
		from := head + 1 - ledger.Seq(rng.IntN(int(min(head, 20))+1))
		to := min(from+ledger.Seq(1+rng.IntN(300)), last+1)
		var raws [][]byte
		for q := from; q < to; q++ {
			raw, err := s.GetRaw(q)
			if err != nil {
				fmt.Fprintln(os.Stderr, "read source:", err)
				os.Exit(3)
			}
			raws = append(raws, raw)
		}
		h, err := m.Import(context.Background(), raws)
		if err != nil {
			fmt.Fprintln(os.Stderr, "import:", err)
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.FormatUint(uint64(h.Seq), 10) + "\n")
	}
	time.Sleep(time.Hour) // until killed
}

// TestImportCrashDurability kills an importing mirror with SIGKILL at
// random moments, many times over the same directory: every head an Import
// acknowledged must be durable, the mirror must hold the source's bytes up
// to its head and verify, and each restart resumes from the mirror's head.
func TestImportCrashDurability(t *testing.T) {
	rounds := 8
	if testing.Short() {
		rounds = 2
	}
	srcDir, mDir := t.TempDir(), t.TempDir()
	src := sourceLedger(t, srcDir, 30000)
	raws := rawsOf(t, src)
	src.Close()
	openMirror(t, mDir).Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	maxAcked := ledger.Seq(0)
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), importCrashEnv+"="+srcDir+" "+mDir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// The kill comes a random while after the first acknowledgement,
		// however long the child took to start.
		killAfter := time.Duration(rng.IntN(60)) * time.Millisecond
		var deadline <-chan time.Time
		armed := false
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				if !armed {
					armed, deadline = true, time.After(killAfter)
				}
				if n, err := strconv.ParseUint(line, 10, 64); err == nil && ledger.Seq(n) > maxAcked {
					maxAcked = ledger.Seq(n)
				}
			case <-deadline:
				_ = cmd.Process.Signal(syscall.SIGKILL)
				deadline = nil
			}
		}
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL", round)
		}
		m, err := ledger.Open(ledger.Options{Dir: mDir, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		head := m.Head().Seq
		if head < maxAcked {
			t.Fatalf("round %d: acknowledged head %d lost, mirror head %d", round, maxAcked, head)
		}
		got := rawsOf(t, m)
		if !slices.EqualFunc(got, raws[:head], bytes.Equal) {
			t.Fatalf("round %d: mirror differs from the source below its head %d", round, head)
		}
		if _, err := verify.Ledger(context.Background(), m, verify.Options{}); err != nil {
			t.Fatalf("round %d: verify: %v", round, err)
		}
		m.Close()
		t.Logf("round %d: head %d, acknowledged %d", round, head, maxAcked)
	}
	if maxAcked == 0 {
		t.Fatal("no import was ever acknowledged: the test proved nothing")
	}
}
