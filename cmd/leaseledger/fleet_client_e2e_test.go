package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Bounds of TestFleetClientsStayWithTheirHost (waits on output, never
// timings).
const (
	// clientAcksBeforeKill is how many lines `append` must have had
	// acknowledged before its host is killed, and again after its
	// restart before its input ends: appends are in flight at the kill
	// and flow again after the restart.
	clientAcksBeforeKill = 200
	// clientFinishWait bounds the wait for `append` to end once its input
	// is closed (its retries are bounded by its own --retry-deadline).
	clientFinishWait = 3 * time.Minute
)

// clientProc is a CLI process whose output the test reads.
type clientProc struct {
	cmd      *exec.Cmd
	out, err *lockedBuffer
	done     chan struct{}
}

func startClient(t *testing.T, bin string, stdin io.Reader, args ...string) *clientProc {
	t.Helper()
	p := &clientProc{out: &lockedBuffer{}, err: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = repoRoot
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = stdin, p.out, p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// lines is the number of non-empty lines p printed on stdout.
func (p *clientProc) lines() int {
	return strings.Count(p.out.String(), "\n")
}

// TestFleetClientsStayWithTheirHost: `append --nats`
// and `tail --nats` pointed at host h2 of a two-host cluster, whose
// cluster advertises h1's client URL to them, while h2 is killed (SIGKILL)
// mid-stream and restarted on the same directory and client port. The
// clients never follow the cluster to h1 (where h2's subjects are refused):
// the append ends with status 0 and every input line acknowledged exactly
// once, with the seq that holds it, none in doubt; the log holds every
// line once; the tail prints every event of h2 from seq 1 to its head,
// each once; no process reports a permissions violation.
func TestFleetClientsStayWithTheirHost(t *testing.T) {
	bin := cliBinary(t)
	f := newFleet(t, bin, 2, "")
	h1, h2 := f.hosts[0], f.hosts[1]
	h2.port = freePort(t)
	h1.start()
	h2.start()
	url, _ := h2.endpoints()

	// The cluster is formed and advertises h1 to h2's clients: what a
	// client that does not ignore discovered servers would follow.
	plain, err := nats.Connect(url, nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	h1URL, _ := h1.endpoints()
	h1Port := h1URL[strings.LastIndex(h1URL, ":"):]
	testproc.Eventually(t, "h1 advertised to h2's clients", func() error {
		if !strings.Contains(strings.Join(plain.DiscoveredServers(), " "), h1Port) {
			return fmt.Errorf("h2's clients are told of %v", plain.DiscoveredServers())
		}
		return nil
	})
	plain.Close()

	tail := startClient(t, bin, nil, "tail", "--nats", url, "--host-id", "h2", "--from-seq", "1")
	testproc.Eventually(t, "the tail prints h2's host.bound", func() bool { return tail.lines() >= 1 })

	stdin, feed := io.Pipe()
	app := startClient(t, bin, stdin, "append", "--nats", url, "--host-id", "h2", "--user", fleetWriterUser, "--password", fleetWriterPass,
		"--batch", "4", "--concurrency", "4", "--request-timeout", "5s", "--retry-deadline", "2m")
	// The input flows for as long as the append takes it: lines are in
	// flight whenever h2 is killed.
	var produced atomic.Int64
	stop := make(chan struct{})
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		defer feed.Close()
		w := bufio.NewWriter(feed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				_ = w.Flush()
				return
			default:
			}
			fmt.Fprintf(w, `{"kind":"lease.terminated","activation":"act-e2e-%d","data":{"reason":"revoked"}}`+"\n", i)
			if err := w.Flush(); err != nil {
				return
			}
			produced.Add(1)
		}
	}()

	testproc.Eventually(t, "acknowledgements before the kill", func() bool { return app.lines() >= clientAcksBeforeKill })
	h2.stop(syscall.SIGKILL)
	h2.start()
	if u, _ := h2.endpoints(); u != url {
		t.Fatalf("h2 restarted on %s, want %s", u, url)
	}
	atRestart := app.lines()
	testproc.Eventually(t, "acknowledgements after the restart", func() bool { return app.lines() >= atRestart+clientAcksBeforeKill })
	close(stop)
	<-fed
	select {
	case <-app.done:
	case <-time.After(clientFinishWait):
		t.Fatalf("append did not end:\n%s", app.err.String())
	}
	if code := app.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("append exit %d:\n%s", code, app.err.String())
	}
	n := int(produced.Load())

	// The tail shows every event of h2, seq 1 to its head, each once.
	head, err := h2.head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "the tail at h2's head", func() error {
		if got := tail.lines(); uint64(got) < head {
			return fmt.Errorf("tail printed %d of %d events", got, head)
		}
		return nil
	})
	bySeq := map[uint64]events.Envelope{}
	lineOf := map[string]uint64{} // activation → seq
	for i, raw := range strings.Split(strings.TrimSuffix(tail.out.String(), "\n"), "\n") {
		env, err := events.Decode([]byte(raw))
		if err != nil {
			t.Fatalf("tail line %d: %v", i+1, err)
		}
		if uint64(env.Seq) != uint64(i+1) {
			t.Fatalf("tail line %d holds seq %d: an event missing or repeated", i+1, env.Seq)
		}
		bySeq[uint64(env.Seq)] = env
		if strings.HasPrefix(env.Activation, "act-e2e-") {
			if prev, dup := lineOf[env.Activation]; dup {
				t.Fatalf("%s is in h2's log twice: seqs %d and %d", env.Activation, prev, env.Seq)
			}
			lineOf[env.Activation] = uint64(env.Seq)
		}
	}
	if len(lineOf) != n {
		t.Fatalf("h2's log holds %d of the %d input lines", len(lineOf), n)
	}

	// Every line acknowledged exactly once, with the seq that holds it.
	acked := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(app.out.String(), "\n"), "\n") {
		seqText, id, _ := strings.Cut(line, " ")
		seq, _ := strconv.ParseUint(seqText, 10, 64)
		env, ok := bySeq[seq]
		if !ok || env.ID.String() != id || !strings.HasPrefix(env.Activation, "act-e2e-") {
			t.Fatalf("append acknowledged %q, which is not the event of an input line at that seq", line)
		}
		if acked[env.Activation] {
			t.Fatalf("%s acknowledged twice", env.Activation)
		}
		acked[env.Activation] = true
	}
	if len(acked) != n {
		t.Fatalf("%d of %d lines acknowledged:\n%s", len(acked), n, app.err.String())
	}

	for what, out := range map[string]string{"append": app.err.String(), "tail": tail.err.String(), "h1": h1.output(), "h2": h2.output()} {
		if strings.Contains(strings.ToLower(out), "permissions violation") {
			t.Errorf("%s reports a permissions violation:\n%s", what, out)
		}
	}
	if s := app.err.String(); strings.Contains(s, "in doubt") || strings.Contains(s, "not appended") {
		t.Errorf("append reported lines it could not settle:\n%s", s)
	}
	_ = tail.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-tail.done:
	case <-time.After(fleetWait):
		t.Fatal("tail did not stop on SIGTERM")
	}
	t.Logf("%d lines appended through h2's SIGKILL and restart; h2's head %d", n, head)
}
