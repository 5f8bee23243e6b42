package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// An async append is sealed before every append queued after it returned,
// its wait returns its durable seqs, and a cancelled wait says "in doubt".
func TestAppendAsyncOrderAndWait(t *testing.T) {
	l := open(t, t.TempDir())
	defer l.Close()
	ctx := context.Background()
	for i := range 50 {
		wait, err := l.AppendAsync(ctx, draft("a", "s", 2*i), draft("a", "s", 2*i+1))
		if err != nil {
			t.Fatal(err)
		}
		// Queued by another goroutine after AppendAsync returned: sealed after.
		later := make(chan []ledger.Seq, 1)
		go func() {
			seqs, err := l.Append(ctx, draft("b", "s", i))
			if err != nil {
				t.Error(err)
			}
			later <- seqs
		}()
		seqs, err := wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		after := <-later
		if len(seqs) != 2 || seqs[1] != seqs[0]+1 || len(after) != 1 || after[0] <= seqs[1] {
			t.Fatalf("async %v, appended after it %v", seqs, after)
		}
		if again, err := wait(ctx); err != nil || fmt.Sprint(again) != fmt.Sprint(seqs) {
			t.Fatalf("second wait: %v %v", again, err)
		}
	}
	wait, err := l.AppendAsync(ctx, draft("a", "s", 1))
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := wait(cancelled); err != nil && !errors.Is(err, ledger.ErrUnacknowledged) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if _, err := wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// Refused drafts and a closed ledger queue nothing and return no wait.
func TestAppendAsyncRefusals(t *testing.T) {
	l := open(t, t.TempDir())
	ctx := context.Background()
	bad := events.Draft{Activation: "a", Payload: &events.CallAdmitted{CallID: "c1"}}
	if wait, err := l.AppendAsync(ctx, bad); !errors.Is(err, events.ErrInvalid) || wait != nil {
		t.Fatalf("invalid draft: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if wait, err := l.AppendAsync(ctx, draft("a", "s", 1)); !errors.Is(err, ledger.ErrClosed) || wait != nil {
		t.Fatalf("closed ledger: %v", err)
	}
	l2 := open(t, l.Dir())
	defer l2.Close()
	if h := l2.Head().Seq; h != 0 {
		t.Fatalf("head %d after refusals", h)
	}
}

// Close commits an async append nobody waited for: it is durable after a
// reopen.
func TestAppendAsyncCloseCommits(t *testing.T) {
	l := open(t, t.TempDir())
	ctx := context.Background()
	for i := range 20 {
		if _, err := l.AppendAsync(ctx, draft("a", "s", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := open(t, l.Dir())
	defer l2.Close()
	if h := l2.Head().Seq; h != 20 {
		t.Fatalf("head %d after closing with 20 async appends queued, want 20", h)
	}
}

// Append events without waiting for their fsync, then wait for them.
func ExampleLedger_AppendAsync() {
	dir, _ := os.MkdirTemp("", "ledger-example-")
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	wait, err := l.AppendAsync(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseRevoked{Reason: "revoked"}})
	if err != nil {
		panic(err) // nothing queued
	}
	// Queued after the async append returned: sealed after it.
	later, _ := l.Append(ctx, events.Draft{Activation: "act-1", Payload: &events.LeaseTerminated{Reason: "revoked"}})
	seqs, err := wait(ctx)
	fmt.Println(seqs, later, err)
	// Output: [1] [2] <nil>
}
