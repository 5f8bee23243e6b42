package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/bus/busclient"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/nats-io/nats.go"
)

// TestMain fails the run when the tests leave a goroutine or a child
// process behind (serve, MCP servers, node clients are all real processes).
func TestMain(m *testing.M) { testproc.Main(m) }

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, ctx context.Context, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func examples(t *testing.T) (string, int) {
	t.Helper()
	b, err := os.ReadFile("../../examples/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return string(b), strings.Count(strings.TrimSpace(string(b)), "\n") + 1
}

var ackLine = regexp.MustCompile(`^[1-9][0-9]* [0-9A-HJKMNP-TV-Z]{26}$`)

func TestAppendHeadVerifyExport(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	in, n := examples(t)
	r := runCLI(t, ctx, in, "--data-dir", dir, "append", "--concurrency", "4")
	if r.code != 0 {
		t.Fatalf("append: %d %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != n {
		t.Fatalf("%d ack lines for %d events", len(lines), n)
	}
	for _, l := range lines {
		if !ackLine.MatchString(l) {
			t.Fatalf("ack line %q", l)
		}
	}
	// One bad line is refused with its number; the others still land.
	r = runCLI(t, ctx, "not json\n"+strings.SplitN(in, "\n", 2)[0]+"\n", "--data-dir", dir, "append")
	if r.code != 1 || !strings.Contains(r.stderr, "line 1:") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("bad line: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "head")
	if r.code != 0 || !regexp.MustCompile(`^`+strconv.Itoa(n+1)+` [0-9a-f]{64}\n$`).MatchString(r.stdout) {
		t.Fatalf("head: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "verify")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ok: "+strconv.Itoa(n+1)+" events verified") {
		t.Fatalf("verify: %+v", r)
	}
	headLine := strings.TrimSpace(runCLI(t, ctx, "", "--data-dir", dir, "head").stdout)
	if r := runCLI(t, ctx, "", "--data-dir", dir, "verify", "--quiet", "--expect-head", headLine); r.code != 0 {
		t.Fatalf("verify with the current head as anchor: %+v", r)
	}
	bogus := "2 " + strings.Repeat("0", 64)
	if r := runCLI(t, ctx, "", "--data-dir", dir, "verify", "--quiet", "--expect-head", bogus); r.code != 1 || !strings.Contains(r.stderr, "anchor") {
		t.Fatalf("verify with a wrong anchor: %+v", r)
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir+"-missing", "head"); r.code == 0 || !strings.Contains(r.stderr, "no ledger") {
		t.Fatalf("head on a missing dir: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "export", "--kind", "guardian.receipt")
	if kind, _ := events.PeekKind([]byte(r.stdout)); r.code != 0 || strings.Count(r.stdout, "\n") != 1 || kind != "guardian.receipt" {
		t.Fatalf("export --kind: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "export", "--from", "2", "--to", "4")
	if seq, _ := events.PeekSeq([]byte(r.stdout)); r.code != 0 || strings.Count(r.stdout, "\n") != 3 || seq != 2 {
		t.Fatalf("export range: %+v", r)
	}
}

func TestVerifyNamesTamperedSeq(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	in, _ := examples(t)
	if r := runCLI(t, ctx, in, "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	key := binary.BigEndian.AppendUint64([]byte("e/"), 3)
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	mut := append([]byte(nil), v...)
	closer.Close()
	mut[len(mut)/2] ^= 0x20
	if err := db.Set(key, mut, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r := runCLI(t, ctx, "", "--data-dir", dir, "verify", "--quiet")
	if r.code != 1 || !strings.Contains(r.stderr, "at seq 3") {
		t.Fatalf("verify of a tampered log: %+v", r)
	}
}

func TestLockedDataDir(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := runCLI(t, context.Background(), "", "--data-dir", dir, "head")
	if r.code == 0 || !strings.Contains(r.stderr, "in use by another process") {
		t.Fatalf("head on a locked dir: %+v", r)
	}
}

// TestServeTailAppend runs serve, appends through its writer user and tails
// from seq 1: catch-up and live, every event once, in order.
func TestServeTailAppend(t *testing.T) {
	dir := t.TempDir()
	in, n := examples(t)
	if r := runCLI(t, context.Background(), in, "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	served := make(chan int, 1)
	go func() {
		var errb bytes.Buffer
		served <- run(serveCtx, []string{"--data-dir", dir, "serve", "--port", "-1", "--writer-user", "w", "--writer-password", "pw", "--metrics-addr", "127.0.0.1:0"}, strings.NewReader(""), pw, &errb)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var url, metricsURL string
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "leaseledger: metrics on "); ok {
			metricsURL = u
		}
		if u, ok := strings.CutPrefix(sc.Text(), "leaseledger: NATS listening on "); ok {
			url = u
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if url == "" {
		t.Fatal("serve printed no URL")
	}

	tailCtx, stopTail := context.WithTimeout(context.Background(), 20*time.Second)
	defer stopTail()
	tailOut := &lockedBuffer{}
	tailDone := make(chan int, 1)
	go func() {
		tailDone <- run(tailCtx, []string{"tail", "--nats", url, "--from-seq", "1"}, strings.NewReader(""), tailOut, io.Discard)
	}()
	r := runCLI(t, context.Background(), in, "append", "--nats", url, "--user", "w", "--password", "pw", "--batch", "5")
	if r.code != 0 || strings.Count(r.stdout, "\n") != n {
		t.Fatalf("append over NATS: %+v", r)
	}
	deadline := time.Now().Add(15 * time.Second)
	for strings.Count(tailOut.String(), "\n") < 2*n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stopTail()
	if code := <-tailDone; code != 0 {
		t.Fatalf("tail exit %d", code)
	}
	got := strings.Split(strings.TrimSpace(tailOut.String()), "\n")
	if len(got) != 2*n {
		t.Fatalf("tail printed %d events, want %d", len(got), 2*n)
	}
	for i, line := range got {
		if seq, _ := events.PeekSeq([]byte(line)); seq != events.Seq(i+1) {
			t.Fatalf("tail line %d is %.40s…: gap or duplicate", i, line)
		}
	}
	r = runCLI(t, context.Background(), "", "replay", "--nats", url, "--from", "3", "--to", "7", "--kind", "")
	if seq, _ := events.PeekSeq([]byte(r.stdout)); r.code != 0 || strings.Count(r.stdout, "\n") != 5 || seq != 3 {
		t.Fatalf("replay: %+v", r)
	}
	r = runCLI(t, context.Background(), "", "leases", "--nats", url)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "lease table at seq "+strconv.Itoa(2*n)+": ") {
		t.Fatalf("leases over NATS: %+v", r)
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "leaseledger_head_seq "+strconv.Itoa(2*n)) {
		t.Fatalf("metrics do not show the head:\n%.2000s", body)
	}
	stopServe()
	if code := <-served; code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "LEASELEDGER.LOCK")); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", dir, "verify", "--quiet"); r.code != 0 {
		t.Fatalf("verify after serve: %+v", r)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// failingSink acknowledges every call but one, which it refuses.
type failingSink struct {
	mu    sync.Mutex
	calls int
	next  uint64
	err   error // the refusal; "refused by the sink" when nil
}

func (s *failingSink) append(_ context.Context, _ [][]byte, drafts []events.Draft) ([]ack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls == 3 {
		if s.err != nil {
			return nil, s.err
		}
		return nil, errors.New("refused by the sink")
	}
	acks := make([]ack, len(drafts))
	for i := range acks {
		s.next++
		acks[i] = ack{seq: events.Seq(s.next)}
	}
	return acks, nil
}

// After a failed append, reading stops, every acknowledged event still gets
// its line, and the failure names its lines.
func TestAppendStreamStopsOnFailureAndPrintsEveryAck(t *testing.T) {
	in, n := examples(t)
	var out, errb bytes.Buffer
	a := &app{stdin: strings.NewReader(in), stdout: &out, stderr: &errb}
	sink := &failingSink{}
	err := appendStream(context.Background(), a, sink, 2, 1)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("err = %v", err)
	}
	acked := strings.Count(out.String(), "\n")
	if uint64(acked) != sink.next || acked >= n || acked < 2 {
		t.Fatalf("%d ack lines printed, the sink acknowledged %d (of %d lines)", acked, sink.next, n)
	}
	if !strings.Contains(errb.String(), "not appended: refused by the sink") {
		t.Fatalf("stderr: %s", errb.String())
	}
}

// An append in doubt is reported as such, never as "not appended".
func TestAppendStreamReportsInDoubt(t *testing.T) {
	in, _ := examples(t)
	for _, err := range []error{
		&busclient.Error{Op: "append", Err: fmt.Errorf("%w: %w", busclient.ErrInDoubt, nats.ErrConnectionClosed)},
		&ledger.Error{Op: "append", Err: fmt.Errorf("%w: sync: disk gone", ledger.ErrFailed)},
	} {
		var out, errb bytes.Buffer
		a := &app{stdin: strings.NewReader(in), stdout: &out, stderr: &errb}
		if appendStream(context.Background(), a, &failingSink{err: err}, 1, 1) == nil {
			t.Fatal("no error")
		}
		if !strings.Contains(errb.String(), "in doubt") || strings.Contains(errb.String(), "not appended") {
			t.Fatalf("stderr: %s", errb.String())
		}
	}
}

// keygen → checkpoint → verify --checkpoint; a checkpoint covering more
// events than the log holds fails verification, naming the seq.
func TestCheckpointCommands(t *testing.T) {
	dir, keys := t.TempDir(), t.TempDir()
	ctx := context.Background()
	in, n := examples(t)
	if r := runCLI(t, ctx, in, "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	skey := filepath.Join(keys, "signer.key")
	r := runCLI(t, ctx, "", "checkpoint", "keygen", "--name", "test-log", "--out", skey)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "test-log+") {
		t.Fatalf("keygen: %+v", r)
	}
	vkey := strings.TrimSpace(r.stdout)
	if st, err := os.Stat(skey); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("signer key file: %v %v", st, err)
	}
	if r := runCLI(t, ctx, "", "checkpoint", "keygen", "--out", skey); r.code == 0 {
		t.Fatal("keygen overwrote an existing key file")
	}
	r = runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--origin", "leaseledger.test/ci")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "leaseledger.test/ci\n"+strconv.Itoa(n)+"\n") || !strings.Contains(r.stdout, "\n— test-log ") {
		t.Fatalf("checkpoint: %+v", r)
	}
	cp := filepath.Join(keys, "cp1")
	if err := os.WriteFile(cp, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir, "verify", "--quiet", "--checkpoint", cp, "--vkey", vkey); r.code != 0 {
		t.Fatalf("verify with the checkpoint: %+v", r)
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir, "verify", "--quiet", "--checkpoint", cp); r.code == 0 || !strings.Contains(r.stderr, "--vkey") {
		t.Fatalf("verify without --vkey: %+v", r)
	}
	// A second ledger with fewer events cannot satisfy the checkpoint.
	short := t.TempDir()
	if r := runCLI(t, ctx, strings.SplitN(in, "\n", 2)[0]+"\n", "--data-dir", short, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r = runCLI(t, ctx, "", "--data-dir", short, "verify", "--quiet", "--checkpoint", cp, "--vkey", vkey)
	if r.code != 1 || !strings.Contains(r.stderr, "checkpoint") {
		t.Fatalf("verify of a shorter log: %+v", r)
	}
}

// The grace timer that bounds a shutdown (a signal's, or serve's after the
// ledger failed) exits with code 3 when closing outlives it, and does
// nothing once stopped.
func TestShutdownGraceTimer(t *testing.T) {
	exited := make(chan int, 1)
	var stderr syncBuffer
	startGraceTimer(&stderr, "the ledger's failure", 20*time.Millisecond, func(code int) { exited <- code })
	select {
	case code := <-exited:
		if code != 3 || !strings.Contains(stderr.String(), "did not stop within") {
			t.Fatalf("exit %d, stderr %q", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a shutdown past its grace did not exit")
	}
	stop := startGraceTimer(io.Discard, "x", 20*time.Millisecond, func(code int) { exited <- code })
	stop()
	select {
	case <-exited:
		t.Fatal("a stopped grace timer exited")
	case <-time.After(100 * time.Millisecond):
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
