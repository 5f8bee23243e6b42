package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/internal/keys"
)

// benchDraft is a call.finished with digests, typical of the runtime's
// traffic (as ledgerbench writes).
func benchDraft(i int) events.Draft {
	return events.Draft{Activation: fmt.Sprintf("act-%d", i%64), Session: fmt.Sprintf("session-%d", i%8), Server: "everything",
		Payload: &events.CallFinished{CallID: fmt.Sprintf("call-%d", i), Tool: "echo", Outcome: "ok", DurationNS: 123456,
			ArgsBytes: 42, ArgsSHA256: strings.Repeat("ab", 32), ResultBytes: 99, ResultSHA256: strings.Repeat("cd", 32)}}
}

// writeLedger appends n events to a new ledger in dir in the largest
// batches the ledger takes, and closes it.
func writeLedger(tb testing.TB, dir string, n int) {
	tb.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	drafts := make([]events.Draft, 0, ledger.MaxAppendEvents)
	for i := 0; i < n; {
		drafts = drafts[:0]
		for ; len(drafts) < ledger.MaxAppendEvents && i < n; i++ {
			drafts = append(drafts, benchDraft(i))
		}
		if _, err := l.Append(context.Background(), drafts...); err != nil {
			tb.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
}

// rehash is the baseline: read every event, decode it strictly and check
// its hash and link — what any verification must at least do.
func rehash(ctx context.Context, db *pebble.DB) (ledger.Seq, error) {
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte(keys.PrefixEvent), UpperBound: keys.UpperBound([]byte(keys.PrefixEvent))})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var prev events.Hash
	var n ledger.Seq
	for ok := it.First(); ok; ok = it.Next() {
		env, err := events.Decode(it.Value())
		if err != nil {
			return n, err
		}
		if !env.CheckHash() || env.Prev != prev {
			return n, fmt.Errorf("seq %d: bad hash", env.Seq)
		}
		prev = env.Hash
		n++
	}
	return n, it.Error()
}

const benchEvents = 100_000

// benchLedger is a closed ledger of n events: under $VERIFY_BENCH_DIR
// when set (kept between runs, written on first use), else a temporary one.
func benchLedger(b *testing.B, n int) string {
	root := os.Getenv("VERIFY_BENCH_DIR")
	if root == "" {
		dir := b.TempDir()
		writeLedger(b, dir, n)
		return dir
	}
	dir := filepath.Join(root, fmt.Sprintf("ledger-%d", n))
	if _, err := os.Stat(filepath.Join(dir, "done")); err != nil {
		os.RemoveAll(dir)
		writeLedger(b, dir, n)
		if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkVerify measures, in one run and interleaved each iteration,
// the decode-and-rehash baseline, the previous sequential check
// (legacyCheck) and the check the command runs (Options.Tree) over the same
// 10^5-event log, and reports the ratios: verify/rehash (goal ≥ 0.5) and
// verify/legacy (the speed-up).
//
//	go test -run '^$' -bench BenchmarkVerify -benchtime 3x ./ledger/verify/
func BenchmarkVerify(b *testing.B) {
	dir := benchLedger(b, benchEvents)
	po := ledger.DefaultPebbleOptions()
	po.ReadOnly, po.Logger = true, silent{}
	db, err := pebble.Open(dir, po)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	var tRehash, tLegacy, tVerify time.Duration
	timed := func(d *time.Duration, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*d += time.Since(start)
	}
	only := os.Getenv("VERIFY_BENCH_ONLY") // "verify": profile the new check alone
	b.ResetTimer()
	for range b.N {
		if only == "verify" {
			timed(&tVerify, func() error { _, err := verifyDB(ctx, db, Options{Tree: true}); return err })
			continue
		}
		timed(&tRehash, func() error { _, err := rehash(ctx, db); return err })
		timed(&tLegacy, func() error { _, err := legacyDB(ctx, db, Options{}); return err })
		timed(&tVerify, func() error { _, err := verifyDB(ctx, db, Options{Tree: true}); return err })
	}
	rate := func(d time.Duration) float64 { return float64(b.N*benchEvents) / d.Seconds() }
	b.ReportMetric(rate(tRehash), "rehash-ev/s")
	b.ReportMetric(rate(tLegacy), "legacy-ev/s")
	b.ReportMetric(rate(tVerify), "verify-ev/s")
	b.ReportMetric(tRehash.Seconds()/tVerify.Seconds(), "verify/rehash")
	b.ReportMetric(tLegacy.Seconds()/tVerify.Seconds(), "verify/legacy")
}
