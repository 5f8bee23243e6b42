package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// NotificationFlushWait bounds how long a call or request that got its
// response waits for the server's notifications read before it (log
// messages, resource updates, list changes) to be delivered to the
// session's peer.
const NotificationFlushWait = 2 * time.Second

// noteBarrier keeps a lease's notifications ahead of the responses that
// follow them. The go-sdk hands a response to its waiting call straight
// from the connection's reader but queues notifications for a handler
// goroutine, so a tool's last log message can reach the peer after the
// call returned — after the gateway answered the client and closed the
// request's stream the message belonged on. The reader counts the
// notifications the peer handlers will see (seen); each handler counts
// its delivery (delivered); a call that got its response waits (flush)
// until everything read before it was delivered. The go-sdk runs those
// handlers one at a time in arrival order, so the counts meet.
//
// A notification the go-sdk read but never handed to a handler (params it
// could not decode) would hold every later flush for the whole bound: a
// flush that runs out of time therefore counts everything it waited for
// as delivered, so one such message costs one bounded wait, once; later
// deliveries then run ahead of the count and order is kept only as well
// as the go-sdk keeps it.
type noteBarrier struct {
	read atomic.Uint64

	mu   sync.Mutex
	done uint64
	wake chan struct{} // closed and replaced at every delivery
}

// relayedNotes are the notifications a lease's handlers deliver (see
// lease.newClient); each is counted by the reader and by its handler.
var relayedNotes = map[string]bool{
	string(NotifyLog): true, string(NotifyResourceUpdated): true, string(NotifyToolsChanged): true,
	string(NotifyPromptsChanged): true, string(NotifyResourcesChanged): true,
}

// seen counts m when it is a notification a handler will deliver; the
// connection's reader calls it for every message read.
func (b *noteBarrier) seen(m jsonrpc.Message) {
	if r, ok := m.(*jsonrpc.Request); ok && !r.ID.IsValid() && relayedNotes[r.Method] {
		b.read.Add(1)
	}
}

// delivered counts one notification handled.
func (b *noteBarrier) delivered() {
	b.mu.Lock()
	b.done++
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
	b.mu.Unlock()
}

// flush waits until every notification read so far was delivered, for at
// most NotificationFlushWait, or until ctx ends.
func (b *noteBarrier) flush(ctx context.Context) {
	target := b.read.Load()
	var timer *time.Timer
	for {
		b.mu.Lock()
		if b.done >= target {
			b.mu.Unlock()
			return
		}
		if b.wake == nil {
			b.wake = make(chan struct{})
		}
		wake := b.wake
		b.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(NotificationFlushWait)
			defer timer.Stop()
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return
		case <-timer.C:
			b.mu.Lock()
			b.done = max(b.done, target)
			b.mu.Unlock()
			return
		}
	}
}
