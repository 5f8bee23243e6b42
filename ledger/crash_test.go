package ledger_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
)

const crashChildEnv = "LEASELEDGER_CRASH_CHILD_DIR"

// crashChild runs in a re-executed test binary: 64 writers append until the
// parent kills the process, printing "<seq> <ulid>" for every acknowledged
// event as soon as Append returns.
func crashChild() {
	l, err := ledger.Open(ledger.Options{Dir: os.Getenv(crashChildEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := 0; ; i++ {
				n := 1 + i%4
				ds := make([]events.Draft, n)
				for j := range ds {
					ds[j] = draft(fmt.Sprintf("w%d", w), "s", i)
				}
				acks, err := l.AppendAcks(context.Background(), ds...)
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				mu.Lock()
				for _, a := range acks {
					// One write per line, straight to the fd: a line the
					// parent reads was acknowledged before it was written.
					os.Stdout.WriteString(strconv.FormatUint(uint64(a.Seq), 10) + " " + a.ID.String() + "\n")
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// crashChildStartBound bounds how long TestCrashDurability waits for a
// child's first acknowledgement before it kills the child and fails.
const crashChildStartBound = 30 * time.Second

// TestCrashDurability kills a 64-writer appender with SIGKILL at a random
// moment after its first acknowledgement, many times over the same
// directory. After each kill every acknowledged seq must be present with
// its ULID, the chain must verify and there must be no gap.
// LEASELEDGER_CRASH_ROUNDS raises the round count.
func TestCrashDurability(t *testing.T) {
	rounds := 10
	if v, err := strconv.Atoi(os.Getenv("LEASELEDGER_CRASH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if testing.Short() {
		rounds = 2
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	totalAcked := 0
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[ledger.Seq]string{}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// The kill comes at a random point after the child's first
		// acknowledgement, not after its start: a loaded machine can take
		// longer than the whole window to start a race-built child, and a
		// round killed before any ack proves nothing.
		killAfter := time.Duration(20+rng.IntN(300)) * time.Millisecond
		var deadline <-chan time.Time
		noAck := time.After(crashChildStartBound)
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				addAck(t, acked, line)
				if noAck != nil && len(acked) > 0 {
					noAck, deadline = nil, time.After(killAfter)
				}
			case <-noAck:
				_ = cmd.Process.Signal(syscall.SIGKILL)
				noAck = nil
				t.Errorf("round %d: no acknowledgement within %v of the child's start", round, crashChildStartBound)
			case <-deadline:
				_ = cmd.Process.Signal(syscall.SIGKILL)
				deadline = nil
			}
		}
		if t.Failed() {
			_ = cmd.Wait()
			t.FailNow()
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL: %v", round, err)
		}
		totalAcked += len(acked)

		l := open(t, dir)
		head := l.Head().Seq
		for seq, id := range acked {
			env, err := l.Get(seq)
			if err != nil {
				t.Fatalf("round %d: acknowledged seq %d lost (head %d): %v", round, seq, head, err)
			}
			if env.ID.String() != id {
				t.Fatalf("round %d: seq %d has ULID %s, acknowledged %s", round, seq, env.ID, id)
			}
		}
		rep, err := verify.Ledger(context.Background(), l, verify.Options{})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if rep.Events != head {
			t.Fatalf("round %d: verified %d events, head %d", round, rep.Events, head)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %v, %d acked this round, head %d", round, killAfter, len(acked), head)
	}
	if totalAcked == 0 {
		t.Fatal("no event was ever acknowledged: the test proved nothing")
	}
}

func addAck(t *testing.T, acked map[ledger.Seq]string, line string) {
	seqText, id, ok := strings.Cut(line, " ")
	if !ok || len(id) != 26 {
		return // a torn last line: not an acknowledgement the parent saw whole
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		t.Fatalf("malformed ack line %q", line)
	}
	acked[ledger.Seq(seq)] = id
}
