//go:build linux || darwin

package helper

import (
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/leaseledger/leaseledger/guardian/internal/wire"
)

// newTestHelper is a helper with its event channels and nothing else: no
// target, no host pipes.
func newTestHelper() *helper {
	return &helper{
		ppid0: os.Getppid(), pid: os.Getpid(),
		hostEv: make(chan hostEvent, 4), exited: make(chan exitInfo, 1), sigs: make(chan os.Signal, 8),
		desc: newDescendants(os.Getpid(), -1),
	}
}

func TestTriggerRankIsTotal(t *testing.T) {
	for i, a := range triggerRank {
		for j, b := range triggerRank {
			want := a
			if j < i {
				want = b
			}
			if got := higher(a, b); got != want {
				t.Errorf("higher(%s, %s) = %s, want %s", a, b, got, want)
			}
		}
		if higher(a, "") != a || higher("", a) != a {
			t.Errorf("%s does not outrank no trigger", a)
		}
	}
}

// Triggers ready at the same moment: the recorded one never depends on
// which channel select happens to pick, and the loser's facts are kept.
func TestServeRecordsHighestRankedReadyTrigger(t *testing.T) {
	cases := []struct {
		name string
		fill func(h *helper)
		want string
	}{
		{"cut frame and SIGTERM", func(h *helper) {
			h.hostEv <- hostEvent{err: io.ErrUnexpectedEOF, fault: "host frame stream: unexpected EOF"}
			h.sigs <- syscall.SIGTERM
		}, wire.TriggerSignal},
		{"host EOF and SIGTERM", func(h *helper) {
			h.hostEv <- hostEvent{err: io.EOF}
			h.sigs <- syscall.SIGTERM
		}, wire.TriggerSignal},
		{"close frame, EOF and SIGTERM", func(h *helper) {
			h.hostEv <- hostEvent{ctrl: wire.ControlClose}
			h.hostEv <- hostEvent{err: io.EOF}
			h.sigs <- syscall.SIGHUP
		}, wire.TriggerClose},
		{"target exit and protocol fault", func(h *helper) {
			h.hostEv <- hostEvent{err: wire.ErrFrameMalformed, fault: "host frame stream: unknown control code"}
			h.exited <- exitInfo{err: syscall.ECHILD}
		}, wire.TriggerTargetExit},
		{"SIGPIPE is no trigger", func(h *helper) {
			h.sigs <- syscall.SIGPIPE
			h.hostEv <- hostEvent{err: io.EOF}
		}, wire.TriggerHostEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// select picks among ready cases at random: many rounds make a
			// rank that depended on it fail here.
			for range 200 {
				h := newTestHelper()
				c.fill(h)
				if got := h.serve(); got != c.want {
					t.Fatalf("trigger %q, want %q", got, c.want)
				}
				if c.want == wire.TriggerSignal && c.name == "cut frame and SIGTERM" && len(h.rc.Faults) != 1 {
					t.Fatalf("the fault that lost the rank was not recorded: %q", h.rc.Faults)
				}
			}
		})
	}
}

// A host reader blocked on a full stdin queue stops blocking when the host
// hangs up, and counts the chunk it could not queue as dropped.
func TestEnqueueStopsBlockingWhenHostHangsUp(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := newTestHelper()
	h.hostIn = r
	h.cleanup = make(chan struct{})
	h.stdinQ = make(chan *[]byte, 1)
	h.stdinQ <- wire.GetChunk([]byte("queued"))

	blocked := make(chan struct{})
	q := stdinEnqueuer{h: h, blocked: func() { close(blocked) }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.enqueue(wire.GetChunk([]byte("dropped")))
	}()
	<-blocked // waiting on the full queue, the host still connected
	_ = w.Close()
	<-done
	if !q.hungUp || h.stdinDropped.Load() != int64(len("dropped")) || len(h.stdinQ) != 1 {
		t.Fatalf("hung up %v, dropped %d, queued %d", q.hungUp, h.stdinDropped.Load(), len(h.stdinQ))
	}
	// Once hung up, a full queue never blocks again.
	q.enqueue(wire.GetChunk([]byte("x")))
	if h.stdinDropped.Load() != int64(len("dropped")+1) {
		t.Fatalf("dropped %d", h.stdinDropped.Load())
	}
}
