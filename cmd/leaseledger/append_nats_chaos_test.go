//go:build unix

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// serveProc is a `serve` process on a fixed port, restartable.
type serveProc struct {
	t         *testing.T
	bin, dir  string
	port      int
	cmd       *exec.Cmd
	out       *lockedBuffer
	restarted int
}

func (s *serveProc) start() {
	s.t.Helper()
	s.out = &lockedBuffer{}
	s.cmd = exec.Command(s.bin, "--data-dir", s.dir, "serve", "--port", strconv.Itoa(s.port), "--writer-user", "w", "--writer-password", "pw")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.out.String(), "NATS listening on") {
		if time.Now().After(deadline) {
			s.t.Fatalf("serve did not start:\n%s", s.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *serveProc) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

var failureRange = regexp.MustCompile(`lines (\d+)–(\d+) (not appended|in doubt)`)

// TestChaosAppendOverNATS runs `serve` as a real process under concurrent
// `append --nats` processes, SIGKILLs (and restarts) and SIGSTOPs (for
// longer than the clients' request timeout, then SIGCONTs) it repeatedly,
// and checks from the export that every input line is in the log exactly
// once and that every client reported each line as appended with the seq
// that holds it — or, where it could not know, as in doubt; never wrongly.
func TestChaosAppendOverNATS(t *testing.T) {
	bin := cliBinary(t)
	clients, perClient, faults := 4, 200, 8
	if testing.Short() {
		clients, perClient, faults = 3, 100, 4
	}
	dir := t.TempDir()
	srv := &serveProc{t: t, bin: bin, dir: dir, port: freePort(t)}
	srv.start()
	defer func() {
		if srv.cmd.ProcessState == nil {
			_ = srv.cmd.Process.Signal(syscall.SIGCONT)
			srv.kill()
		}
	}()
	url := "nats://127.0.0.1:" + strconv.Itoa(srv.port)

	type client struct {
		cmd      *exec.Cmd
		out, err *lockedBuffer
		done     chan error
	}
	cs := make([]*client, clients)
	for c := range cs {
		cl := &client{out: &lockedBuffer{}, err: &lockedBuffer{}, done: make(chan error, 1)}
		cl.cmd = exec.Command(bin, "append", "--nats", url, "--user", "w", "--password", "pw",
			"--batch", "4", "--concurrency", "3", "--request-timeout", "1s", "--retry-deadline", "50s", "--retries", "1000")
		cl.cmd.Stdout, cl.cmd.Stderr = cl.out, cl.err
		stdin, err := cl.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if cl.cmd.ProcessState == nil {
				_ = cl.cmd.Process.Kill()
				<-cl.done
			}
		}()
		// Lines trickle in for the whole run, so appends are in flight
		// whenever serve is killed or stopped.
		go func() {
			for i := 1; i <= perClient; i++ {
				fmt.Fprintf(stdin, `{"kind":"lease.terminated","activation":"act-c%d-l%d","data":{"reason":"revoked"}}`+"\n", c, i)
				time.Sleep(time.Duration(10+rand.IntN(30)) * time.Millisecond)
			}
			stdin.Close()
		}()
		go func() { cl.done <- cl.cmd.Wait() }()
		cs[c] = cl
	}

	kills, stops := 0, 0
	for i := range faults {
		time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
		if i%2 == 0 {
			srv.kill()
			kills++
			srv.start()
		} else {
			_ = srv.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(1500 * time.Millisecond) // longer than --request-timeout
			_ = srv.cmd.Process.Signal(syscall.SIGCONT)
			stops++
		}
	}
	for c, cl := range cs {
		select {
		case <-cl.done:
		case <-time.After(90 * time.Second):
			t.Fatalf("client %d did not finish:\n%s", c, cl.err.String())
		}
	}
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	_ = srv.cmd.Wait()
	t.Logf("%d clients × %d lines, serve SIGKILLed and restarted %d times, SIGSTOPped %d times", clients, perClient, kills, stops)

	r := runCLI(t, context.Background(), "", "--data-dir", dir, "export")
	if r.code != 0 {
		t.Fatalf("export: %+v", r.stderr)
	}
	type stored struct {
		seq events.Seq
		id  string
	}
	byActivation := map[string]stored{}
	bySeq := map[events.Seq]events.Envelope{}
	for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
		env, err := events.Decode([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := byActivation[env.Activation]; dup {
			t.Fatalf("%s is in the log twice: seqs %d and %d", env.Activation, prev.seq, env.Seq)
		}
		byActivation[env.Activation] = stored{env.Seq, env.ID.String()}
		bySeq[env.Seq] = env
	}
	inDoubt := 0
	for c, cl := range cs {
		reported := map[int]string{}
		for _, m := range failureRange.FindAllStringSubmatch(cl.err.String(), -1) {
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			for l := a; l <= b; l++ {
				reported[l] = m[3]
			}
		}
		acked := map[int]bool{}
		for line := range strings.SplitSeq(strings.TrimSpace(cl.out.String()), "\n") {
			seqText, id, _ := strings.Cut(line, " ")
			seq, _ := strconv.ParseUint(seqText, 10, 64)
			env, ok := bySeq[events.Seq(seq)]
			var l int
			if ok {
				_, err := fmt.Sscanf(env.Activation, "act-c"+strconv.Itoa(c)+"-l%d", &l)
				ok = err == nil && env.ID.String() == id
			}
			if !ok {
				t.Fatalf("client %d acknowledged %q, which is not the event at that seq of one of its lines", c, line)
			}
			acked[l] = true
		}
		for l := 1; l <= perClient; l++ {
			_, present := byActivation[fmt.Sprintf("act-c%d-l%d", c, l)]
			switch what := reported[l]; {
			case what == "not appended" && present:
				t.Errorf("client %d reported line %d not appended, but it is in the log", c, l)
			case what == "in doubt":
				inDoubt++
			case !acked[l] && what == "":
				t.Errorf("client %d neither acknowledged nor reported line %d", c, l)
			}
			if !present {
				t.Errorf("client %d line %d is not in the log (reported: %q)", c, l, reported[l])
			}
		}
		if cl.cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("client %d exit %d:\n%s", c, cl.cmd.ProcessState.ExitCode(), cl.err.String())
		}
	}
	if inDoubt > 0 {
		t.Errorf("%d line(s) reported in doubt although serve always came back", inDoubt)
	}
	if r := runCLI(t, context.Background(), "", "--data-dir", dir, "verify", "--quiet"); r.code != 0 {
		t.Fatalf("verify: %+v", r)
	}
}
