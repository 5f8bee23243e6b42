package verify_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"golang.org/x/mod/sumdb/note"
)

// bundleKeys makes a signer and its verifier.
func bundleKeys(t testing.TB, name string) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// activationDrafts are the events of one activation's life: opened, a
// guardian, n HTTP requests (registered, barrier, worker down), closed.
func activationDrafts(a string, n int) []events.Draft {
	d := func(p events.Payload) events.Draft {
		return events.Draft{Activation: a, Session: "s-1", Server: "github", Payload: p}
	}
	ds := []events.Draft{
		d(&events.ConnectionOpened{Transport: "stdio", Cleanup: "verified", OneShot: true}),
		d(&events.GuardianStarted{GuardianPID: 10, TargetPID: 11, HelperVersion: "leaseledger-guardian/1", PIDFD: true}),
	}
	for i := range n {
		ref := fmt.Sprintf("h-%d", i)
		ds = append(ds, d(&events.HTTPRegistered{Ref: ref, Scope: "request", Method: "POST", Origin: "https://mcp.example.com"}),
			d(&events.HTTPBarrier{Ref: ref, Outcome: "ok"}),
			d(&events.HTTPWorkerDown{Ref: ref, Worker: "w-1", Reason: "normal"}))
	}
	return append(ds, d(&events.ConnectionPhase{Phase: "closing", BudgetNS: 5e9}), d(&events.ConnectionClosed{ElapsedNS: 7}))
}

// interleave appends the activations' events round robin, one event per
// activation at a time, so that each activation's seqs are scattered.
func interleave(t testing.TB, l *ledger.Ledger, acts map[string]int, names ...string) {
	t.Helper()
	var all [][]events.Draft
	for _, a := range names {
		all = append(all, activationDrafts(a, acts[a]))
	}
	var ds []events.Draft
	for i := 0; ; i++ {
		added := false
		for _, q := range all {
			if i < len(q) {
				ds, added = append(ds, q[i]), true
				// Runs of two: consecutive seqs of one activation too.
				if i%5 == 0 && i+1 < len(q) {
					ds = append(ds, q[i+1])
				}
			}
		}
		if !added {
			break
		}
	}
	if _, err := l.Append(context.Background(), ds...); err != nil {
		t.Fatal(err)
	}
}

// bundleLedger opens a ledger in a fresh directory holding three
// interleaved activations (act-a, act-b, act-c).
func bundleLedger(t testing.TB) (*ledger.Ledger, string) {
	t.Helper()
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	interleave(t, l, map[string]int{"act-a": 20, "act-b": 6, "act-c": 30}, "act-a", "act-b", "act-c")
	return l, dir
}

func writeBundle(t testing.TB, l *ledger.Ledger, s note.Signer, sel verify.BundleSelector) ([]byte, verify.BundleReport) {
	t.Helper()
	var buf bytes.Buffer
	rep, err := verify.WriteBundle(context.Background(), &buf, l, s, "leaseledger.test/bundle", sel)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), rep
}

// wantBundleFault checks that err is a bundle *Error at seq with fault f.
func wantBundleFault(t testing.TB, what string, err error, seq ledger.Seq, f verify.Fault) {
	t.Helper()
	var ve *verify.Error
	if !errors.As(err, &ve) || !errors.Is(err, verify.ErrVerify) || ve.Op != "bundle" || ve.Seq != seq || (f != "" && ve.Fault != f) {
		t.Fatalf("%s: %v, want a bundle fault %q at seq %d", what, err, f, seq)
	}
}

// lines splits a bundle into its lines (without newlines).
func lines(b []byte) [][]byte { return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) }

func join(ls [][]byte) []byte { return append(bytes.Join(ls, []byte("\n")), '\n') }

// A range bundle and an activation bundle verify with the verifier key
// alone, and hand out exactly the selected events' stored bytes in order.
func TestBundleRoundTrip(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	ctx := context.Background()
	s, v := bundleKeys(t, "bundle-test")
	head := l.Head().Seq

	scan := func(q ledger.Query) (seqs []ledger.Seq, raws [][]byte) {
		if err := l.Scan(ctx, q, func(seq ledger.Seq, raw []byte) error {
			seqs, raws = append(seqs, seq), append(raws, append([]byte(nil), raw...))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, tc := range []struct {
		name string
		sel  verify.BundleSelector
		q    ledger.Query
	}{
		{"range", verify.BundleSelector{From: 7, To: head - 3}, ledger.Query{From: 7, To: head - 3}},
		{"whole log", verify.BundleSelector{From: 1, To: head}, ledger.Query{}},
		{"activation", verify.BundleSelector{Activation: "act-b"}, ledger.Query{Activation: "act-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, wrep := writeBundle(t, l, s, tc.sel)
			rep, err := verify.Bundle(bytes.NewReader(b), v)
			if err != nil {
				t.Fatal(err)
			}
			seqs, raws := scan(tc.q)
			m := rep.Manifest
			if m.Events != len(seqs) || rep.Checkpoint.Size != head || m.Activation != tc.sel.Activation || wrep.Manifest.Text() != m.Text() {
				t.Fatalf("report %+v for %d events", rep, len(seqs))
			}
			if tc.sel.Activation != "" && len(m.Seqs) < 2 {
				t.Fatalf("activation seqs %v: want several runs", m.Seqs)
			}
			br, err := verify.NewBundleReader(bytes.NewReader(b), v)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				seq, raw, err := br.Next()
				if errors.Is(err, io.EOF) {
					if i != len(seqs) {
						t.Fatalf("%d events read, want %d", i, len(seqs))
					}
					break
				}
				if err != nil || seq != seqs[i] || !bytes.Equal(raw, raws[i]) {
					t.Fatalf("event %d: seq %d err %v, want seq %d and its stored bytes", i, seq, err, seqs[i])
				}
			}
		})
	}
	// Selections that cannot be exported.
	for _, sel := range []verify.BundleSelector{{From: 0, To: 3}, {From: 4, To: 3}, {From: 1, To: head + 1},
		{Activation: "act-none"}, {Activation: "bad/id"}, {Activation: "act-a", From: 1, To: 2}} {
		if _, err := verify.WriteBundle(ctx, &bytes.Buffer{}, l, s, "o", sel); !errors.Is(err, verify.ErrBundle) {
			t.Fatalf("WriteBundle(%+v): %v, want ErrBundle", sel, err)
		}
	}
}

// One byte changed anywhere in an event line fails naming that line's seq.
func TestBundleTamperedByte(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	s, v := bundleKeys(t, "bundle-test")
	b, rep := writeBundle(t, l, s, verify.BundleSelector{Activation: "act-b"})
	ls := lines(b)
	var seqs []ledger.Seq
	for _, r := range rep.Manifest.Seqs {
		for q := r.First; q <= r.Last; q++ {
			seqs = append(seqs, q)
		}
	}
	if len(ls) != len(seqs)+1 {
		t.Fatalf("%d lines for %d events", len(ls), len(seqs))
	}
	tamper := func(i, pos int) {
		t.Helper()
		c := bytes.Clone(ls[i])
		c[pos] ^= 0x01
		mod := append(append(append([][]byte{}, ls[:i]...), c), ls[i+1:]...)
		_, err := verify.Bundle(bytes.NewReader(join(mod)), v)
		wantBundleFault(t, fmt.Sprintf("line %d byte %d (%q→%q)", i, pos, ls[i][pos], c[pos]), err, seqs[i-1], "")
	}
	// Every byte of the first event line (verification stops there, so
	// this is cheap), every 13th byte of the last, and one byte of every
	// other line.
	for pos := range ls[1] {
		tamper(1, pos)
	}
	for pos := 0; pos < len(ls[len(ls)-1]); pos += 13 {
		tamper(len(ls)-1, pos)
	}
	for i := 2; i < len(ls)-1; i++ {
		tamper(i, (i*131)%len(ls[i]))
	}
}

// An event line dropped (or duplicated) fails naming the seq.
func TestBundleDroppedLine(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	s, v := bundleKeys(t, "bundle-test")
	for _, sel := range []verify.BundleSelector{{From: 3, To: 40}, {Activation: "act-a"}} {
		b, rep := writeBundle(t, l, s, sel)
		ls := lines(b)
		var seqs []ledger.Seq
		for _, r := range rep.Manifest.Seqs {
			for q := r.First; q <= r.Last; q++ {
				seqs = append(seqs, q)
			}
		}
		for i := 1; i < len(ls); i++ {
			mod := append(append([][]byte{}, ls[:i]...), ls[i+1:]...)
			_, err := verify.Bundle(bytes.NewReader(join(mod)), v)
			wantBundleFault(t, fmt.Sprintf("%+v: line %d dropped", sel, i), err, seqs[i-1], verify.FaultMissing)
		}
		dup := append(append(append([][]byte{}, ls[:3]...), ls[2]), ls[3:]...)
		_, err := verify.Bundle(bytes.NewReader(join(dup)), v)
		wantBundleFault(t, "a line repeated", err, seqs[2], verify.FaultUnexpected)
		extra := append(append([][]byte{}, ls...), ls[len(ls)-1])
		_, err = verify.Bundle(bytes.NewReader(join(extra)), v)
		wantBundleFault(t, "a line repeated at the end", err, seqs[len(seqs)-1], verify.FaultUnexpected)
	}
}

// Events of a forked history — the log cut after seq keep and different
// events appended, with a consistent m/head — fail against the original
// checkpoint, naming the first forked seq, whether spliced into the
// original bundle or presented under the original header.
func TestBundleFork(t *testing.T) {
	l, dir := bundleLedger(t)
	s, v := bundleKeys(t, "bundle-test")
	head := l.Head().Seq
	orig, _ := writeBundle(t, l, s, verify.BundleSelector{From: 10, To: head})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	keep := head - 20
	ledgertest.Fork(t, dir, keep)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	interleave(t, l, map[string]int{"act-a": 2, "act-d": 2}, "act-a", "act-d") // at least 20 new events
	if l.Head().Seq < head {
		t.Fatalf("forked head %d < %d", l.Head().Seq, head)
	}
	forked, _ := writeBundle(t, l, s, verify.BundleSelector{From: 10, To: head})
	if _, err := verify.Bundle(bytes.NewReader(forked), v); err != nil {
		t.Fatalf("the forked bundle on its own (the same key signed it): %v", err)
	}
	ol, fl := lines(orig), lines(forked)
	firstForked := int(keep+1-10) + 1 // line index of seq keep+1
	// The forked lines spliced into the original bundle.
	spliced := append(append([][]byte{}, ol[:firstForked]...), fl[firstForked:]...)
	_, err = verify.Bundle(bytes.NewReader(join(spliced)), v)
	wantBundleFault(t, "forked lines spliced in", err, keep+1, verify.FaultProof)
	if !errors.Is(err, verify.ErrProof) {
		t.Fatalf("spliced: %v, want ErrProof", err)
	}
	// The forked bundle's lines under the original header: their proofs
	// lead to the forked root, so the first line already fails.
	underOrig := append([][]byte{ol[0]}, fl[1:]...)
	_, err = verify.Bundle(bytes.NewReader(join(underOrig)), v)
	wantBundleFault(t, "forked bundle against the original checkpoint", err, 10, verify.FaultProof)
}

// A changed header — checkpoint or manifest text, another key, a manifest
// of another checkpoint — fails before any event is read.
func TestBundleHeader(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	s, v := bundleKeys(t, "bundle-test")
	_, v2 := bundleKeys(t, "bundle-test")
	b, _ := writeBundle(t, l, s, verify.BundleSelector{Activation: "act-c"})
	ls := lines(b)
	header := string(ls[0])
	rebuild := func(h string) []byte { return join(append([][]byte{[]byte(h)}, ls[1:]...)) }
	for name, h := range map[string]string{
		"checkpoint size":  strings.Replace(header, `bundle\n`, `bundle\n1`, 1),
		"manifest origin":  strings.Replace(header, `origin leaseledger.test`, `origin leaseledger.tesT`, 1),
		"manifest seqs":    strings.Replace(header, `seqs `, `seqs 1,`, 1),
		"manifest events":  strings.Replace(header, `events `, `events 1`, 1),
		"manifest dropped": strings.Replace(header, `"manifest":"`, `"manifest":"x`, 1),
		"format":           strings.Replace(header, verify.BundleFormat, "leaseledger-bundle/2", 1),
		"not json":         header[:len(header)-1],
	} {
		if h == header {
			t.Fatalf("%s: the header did not change", name)
		}
		_, err := verify.Bundle(bytes.NewReader(rebuild(h)), v)
		wantBundleFault(t, name, err, 0, verify.FaultSignature)
	}
	_, err := verify.Bundle(bytes.NewReader(b), v2)
	wantBundleFault(t, "another key", err, 0, verify.FaultSignature)
	_, err = verify.Bundle(strings.NewReader(""), v)
	wantBundleFault(t, "empty file", err, 0, verify.FaultSignature)

	// A correctly signed manifest of another checkpoint.
	if _, err := l.Append(context.Background(), activationDrafts("act-e", 1)...); err != nil {
		t.Fatal(err)
	}
	b2, _ := writeBundle(t, l, s, verify.BundleSelector{Activation: "act-c"})
	var h1, h2 testHeader
	mustJSON(t, ls[0], &h1)
	mustJSON(t, lines(b2)[0], &h2)
	h1.Manifest = h2.Manifest
	_, err = verify.Bundle(bytes.NewReader(rebuild(string(mustMarshal(t, h1)))), v)
	wantBundleFault(t, "manifest of another checkpoint", err, 0, verify.FaultManifest)
}

// A line longer than MaxBundleLine is refused with ErrBundleLimit, naming
// the seq expected there; the bound is not read past.
func TestBundleLineBound(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	s, v := bundleKeys(t, "bundle-test")
	b, _ := writeBundle(t, l, s, verify.BundleSelector{From: 5, To: 9})
	ls := lines(b)
	long := append([]byte(`{"seq":5,"event":"`), bytes.Repeat([]byte("x"), verify.MaxBundleLine)...)
	_, err := verify.Bundle(bytes.NewReader(join([][]byte{ls[0], long})), v)
	wantBundleFault(t, "long line", err, 5, verify.FaultLine)
	if !errors.Is(err, verify.ErrBundleLimit) {
		t.Fatalf("long line: %v, want ErrBundleLimit", err)
	}
}

// The bundle reader refuses to continue after a failure.
func TestBundleReaderSticky(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	s, v := bundleKeys(t, "bundle-test")
	b, _ := writeBundle(t, l, s, verify.BundleSelector{From: 1, To: 4})
	ls := lines(b)
	br, err := verify.NewBundleReader(bytes.NewReader(join([][]byte{ls[0], ls[1], ls[3], ls[4]})), v)
	if err != nil {
		t.Fatal(err)
	}
	if seq, _, err := br.Next(); err != nil || seq != 1 {
		t.Fatalf("first: %d %v", seq, err)
	}
	_, _, err1 := br.Next()
	_, _, err2 := br.Next()
	wantBundleFault(t, "gap", err1, 2, verify.FaultMissing)
	if err2 != err1 {
		t.Fatalf("after a failure: %v, want the same error", err2)
	}
}

// testHeader is a bundle header with its fields in the exporter's order,
// so that a test can change one field and re-encode it canonically.
type testHeader struct {
	Format      string `json:"format"`
	Checkpoint  string `json:"checkpoint"`
	Manifest    string `json:"manifest"`
	Consistency []struct {
		Checkpoint string   `json:"checkpoint"`
		Proof      []string `json:"proof"`
	} `json:"consistency,omitempty"`
}

func mustJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The manifest is checked even though it is signed: a manifest over
// MaxBundleEvents is refused with ErrBundleLimit, and an activation
// bundle's lines must carry its activation.
func TestBundleManifestChecks(t *testing.T) {
	l, _ := bundleLedger(t)
	defer l.Close()
	s, v := bundleKeys(t, "bundle-test")
	b, rep := writeBundle(t, l, s, verify.BundleSelector{From: 1, To: 3})
	ls := lines(b)
	var h testHeader
	mustJSON(t, ls[0], &h)
	withManifest := func(m verify.Manifest, events ...[]byte) []byte {
		t.Helper()
		signed, err := note.Sign(&note.Note{Text: m.Text()}, s)
		if err != nil {
			t.Fatal(err)
		}
		h.Manifest = string(signed)
		return join(append([][]byte{mustMarshal(t, h)}, events...))
	}
	m := rep.Manifest
	m.To, m.Events, m.Seqs = verify.MaxBundleEvents+1, verify.MaxBundleEvents+1, []verify.SeqRun{{First: 1, Last: verify.MaxBundleEvents + 1}}
	_, err := verify.Bundle(bytes.NewReader(withManifest(m)), v)
	wantBundleFault(t, "too many events", err, 0, verify.FaultManifest)
	if !errors.Is(err, verify.ErrBundleLimit) {
		t.Fatalf("too many events: %v, want ErrBundleLimit", err)
	}
	env, err := l.Get(2)
	if err != nil {
		t.Fatal(err)
	}
	other := "act-b"
	if env.Activation == other {
		other = "act-c"
	}
	m = rep.Manifest
	m.From, m.To, m.Activation, m.Events, m.Seqs = 0, 0, other, 1, []verify.SeqRun{{First: 2, Last: 2}}
	_, err = verify.Bundle(bytes.NewReader(withManifest(m, ls[2])), v)
	wantBundleFault(t, "an event of another activation", err, 2, verify.FaultActivation)
	// A range manifest must list exactly its range.
	m = rep.Manifest
	m.Events, m.Seqs = 2, []verify.SeqRun{{First: 1, Last: 2}}
	_, err = verify.Bundle(bytes.NewReader(withManifest(m, ls[1], ls[2])), v)
	wantBundleFault(t, "a range manifest listing less than its range", err, 0, verify.FaultManifest)
}

// BenchmarkBundle measures verifying a range bundle of the whole log
// against verifying the same log with Ledger in the same run
// (bundle/ledger: the cost of checking proofs instead of a whole chain),
// and reports the bundle's bytes per event.
func BenchmarkBundle(b *testing.B) {
	dir := b.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for range 40 {
		interleave(b, l, map[string]int{"act-a": 30, "act-b": 30, "act-c": 30}, "act-a", "act-b", "act-c")
	}
	s, v := bundleKeys(b, "bench")
	head := l.Head().Seq
	bundle, _ := writeBundle(b, l, s, verify.BundleSelector{From: 1, To: head})
	ctx := context.Background()
	var tb, tl time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := verify.Bundle(bytes.NewReader(bundle), v); err != nil {
			b.Fatal(err)
		}
		tb += time.Since(start)
		start = time.Now()
		if _, err := verify.Ledger(ctx, l, verify.Options{}); err != nil {
			b.Fatal(err)
		}
		tl += time.Since(start)
	}
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N)/float64(head), "bundle-ns/event")
	b.ReportMetric(float64(tl.Nanoseconds())/float64(b.N)/float64(head), "ledger-ns/event")
	b.ReportMetric(float64(tb)/float64(tl), "bundle/ledger")
	b.ReportMetric(float64(len(bundle))/float64(head), "bytes/event")
}

// A bundle made from a read-only open of a directory written before the
// Merkle node index existed (the auditor's copy of an old log) is byte for
// byte the one made from the indexed log.
func TestBundleWithoutTreeIndex(t *testing.T) {
	l, dir := bundleLedger(t)
	s, v := bundleKeys(t, "bundle-test")
	sel := verify.BundleSelector{Activation: "act-c"}
	want, _ := writeBundle(t, l, s, sel)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ledgertest.DropTreeIndex(t, dir)
	ro, err := ledger.Open(ledger.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	got, _ := writeBundle(t, ro, s, sel)
	if _, err := verify.Bundle(bytes.NewReader(got), v); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) { // Ed25519 signatures are deterministic
		t.Fatalf("the bundle differs without the tree index")
	}
	if _, present, _ := ledgertest.TreeIndex(t, dir); present {
		t.Fatalf("a read-only bundle wrote the tree index")
	}
}
