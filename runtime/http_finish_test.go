//go:build linux

package runtime

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
)

// blockingCloser is a response body whose Close blocks until released.
type blockingCloser struct {
	io.Reader
	closing chan struct{}
	release chan struct{}
}

func (b *blockingCloser) Close() error {
	close(b.closing)
	<-b.release
	return nil
}

// TestHTTPFinishBoundsAbortClose: the cleanup worker is aborting a request
// whose body's Close blocks (I/O). The close's finish does not wait for it
// past its deadline: it returns timeout cleanup_worker_running (and
// http.lost for the request) in time; the worker exits once the Close
// returns.
func TestHTTPFinishBoundsAbortClose(t *testing.T) {
	rec := &recorder{}
	ev := newHTTPEvidence(rec.emit, draftOf)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r, err := ev.register(ctx, events.HTTPPost, scopeRequest, "http://127.0.0.1:1", cancel)
	if err != nil {
		t.Fatal(err)
	}
	bc := &blockingCloser{Reader: strings.NewReader(""), closing: make(chan struct{}), release: make(chan struct{})}
	rt := &leaseRoundTripper{ev: ev}
	tb := &trackedBody{rc: bc, rt: rt, ctx: ctx, cancel: cancel, req: r, status: 200, release: func() {}}
	ev.attach(r, tb)
	deadline := time.Now().Add(300 * time.Millisecond)
	ev.abort(deadline, false)
	<-bc.closing
	// A finish that waited for the worker would wait for the Close, which
	// this test releases only at its end: it would not return at all.
	type finished struct {
		out    events.BarrierOutcome
		detail string
		rest   []events.Draft
	}
	done := make(chan finished, 1)
	go func() {
		out, detail, rest := ev.finish(deadline)
		done <- finished{out, detail, rest}
	}()
	var f finished
	select {
	case f = <-done:
	case <-time.After(testproc.HangBound):
		close(bc.release)
		t.Fatal("finish waits for the worker's blocked Close past its deadline")
	}
	out, detail, rest := f.out, f.detail, f.rest
	if out != events.BarrierTimeout || detail != "cleanup_worker_running" {
		t.Fatalf("finish: %s %s", out, detail)
	}
	lost := 0
	for _, d := range rest {
		if l, ok := d.Payload.(*events.HTTPLost); ok && l.Ref == r.ref {
			lost++
		}
	}
	if lost != 1 {
		t.Fatalf("%d http.lost for the unsettled request", lost)
	}
	close(bc.release)
	<-ev.exited
}
