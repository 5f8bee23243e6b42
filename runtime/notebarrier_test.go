package runtime

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func note(method string) jsonrpc.Message { return &jsonrpc.Request{Method: method} }

// TestNoteBarrierOrders: a flush returns only after every notification
// read before it was delivered; notifications the handlers never see
// (progress, requests) are not waited for.
func TestNoteBarrierOrders(t *testing.T) {
	var b noteBarrier
	b.seen(note("notifications/progress")) // delivered elsewhere: not counted
	id, _ := jsonrpc.MakeID(int64(1))
	b.seen(&jsonrpc.Request{ID: id, Method: "sampling/createMessage"})
	b.flush(context.Background()) // nothing to wait for: returns at once

	for range 3 {
		b.seen(note("notifications/message"))
	}
	var handled atomic.Int32
	release := make(chan struct{})
	go func() {
		for range 3 {
			<-release
			handled.Add(1)
			b.delivered()
		}
	}()
	flushed := make(chan struct{})
	go func() { b.flush(context.Background()); close(flushed) }()
	for i := range 3 {
		select {
		case <-flushed:
			t.Fatalf("flush returned with %d of 3 notifications delivered", i)
		default:
		}
		release <- struct{}{}
	}
	<-flushed
	if n := handled.Load(); n != 3 {
		t.Fatalf("flush returned after %d deliveries, want 3", n)
	}
}

// TestNoteBarrierHeals: a notification never delivered holds one flush
// for its bound only; the next flush has nothing to wait for. A flush
// whose context ends returns.
func TestNoteBarrierHeals(t *testing.T) {
	var b noteBarrier
	b.seen(note("notifications/resources/updated"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.flush(ctx) // ended context: returns without healing
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done != 0 {
		t.Fatalf("a cancelled flush counted %d as delivered", done)
	}
	b.flush(context.Background()) // runs out its bound, heals
	b.mu.Lock()
	done = b.done
	b.mu.Unlock()
	if done != 1 {
		t.Fatalf("after the bound: %d delivered, want 1 (healed)", done)
	}
}
