package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// reqTable is one lease's resource request handles as its transport sees
// them: by progress token (the handle id) to learn each wire id a handle
// uses, by wire id to match responses, cancel notifications and progress.
// It also counts the handles' live worker goroutines, whose exit the
// connection close's workers obligation waits for.
type reqTable struct {
	live atomic.Int64 // tracked handles: zero keeps tools traffic on the fast path

	mu      sync.Mutex
	byToken map[string]*ResourceHandle
	byWire  map[string]*ResourceHandle
	workers int
	parked  int           // workers waiting, from their releases, for their own lease's close
	exited  chan struct{} // closed (and cleared) at each worker's exit or park; nil when nobody waits

	// calls are the lease's tool calls that asked for progress (transport.go).
	calls progressRoutes
}

// track makes h visible to the transport and counts its worker.
func (t *reqTable) track(h *ResourceHandle) {
	t.mu.Lock()
	if t.byToken == nil {
		t.byToken = make(map[string]*ResourceHandle)
		t.byWire = make(map[string]*ResourceHandle)
	}
	t.byToken[h.id] = h
	t.workers++
	t.mu.Unlock()
	t.live.Add(1)
}

// untrack forgets a settled handle.
func (t *reqTable) untrack(h *ResourceHandle) {
	t.mu.Lock()
	if t.byToken[h.id] == h {
		delete(t.byToken, h.id)
		h.mu.Lock()
		for _, w := range h.wires {
			if t.byWire[w] == h {
				delete(t.byWire, w)
			}
		}
		h.mu.Unlock()
		t.live.Add(-1)
	}
	t.mu.Unlock()
}

// workerExit records a handle worker's exit.
func (t *reqTable) workerExit() {
	t.mu.Lock()
	t.workers--
	t.wakeLocked()
	t.mu.Unlock()
}

// park records that a worker waits, from its releases, for its own
// lease's close; unpark that the wait is over. A parked worker does
// nothing more to the connection: all that is left of it is its return.
func (t *reqTable) park() {
	t.mu.Lock()
	t.parked++
	t.wakeLocked()
	t.mu.Unlock()
}

func (t *reqTable) unpark() {
	t.mu.Lock()
	t.parked--
	t.mu.Unlock()
}

// wakeLocked wakes awaitWorkers to count again.
func (t *reqTable) wakeLocked() {
	if t.exited != nil {
		close(t.exited)
		t.exited = nil
	}
}

// selfWorkerKey marks the context of a handle worker's releases with its
// lease: a close of that lease, whoever runs it, is then awaited by that
// worker, and does not wait for it (park).
type selfWorkerKey struct{}

// isSelfWorker reports whether ctx is the releases' context of one of l's
// workers.
func isSelfWorker(ctx context.Context, l *lease) bool {
	v, _ := ctx.Value(selfWorkerKey{}).(*lease)
	return v == l
}

// awaitWorkers waits until every handle worker has exited or parked, or
// until deadline; it returns the number still running.
func (t *reqTable) awaitWorkers(deadline time.Time) int {
	var late <-chan time.Time
	for {
		t.mu.Lock()
		n := t.workers - t.parked
		if n <= 0 {
			t.mu.Unlock()
			return 0
		}
		if t.exited == nil {
			t.exited = make(chan struct{})
		}
		ch := t.exited
		t.mu.Unlock()
		if late == nil {
			late = until(deadline)
		}
		select {
		case <-ch:
		case <-late:
			t.mu.Lock()
			defer t.mu.Unlock()
			return max(t.workers-t.parked, 0)
		}
	}
}

// wireText is a JSON-RPC id as text (the events' wire_id).
func wireText(id jsonrpc.ID) string {
	switch v := id.Raw().(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case string:
		return v
	}
	return ""
}

var tokenKey = []byte(`"progressToken":"`)

// tokenOf returns the string progress token of a request's params
// (_meta.progressToken); "" when there is none. The params may carry a
// caller's _meta and prompt or completion arguments, any of which may
// hold the text "progressToken" too: when it occurs more than once the
// params are decoded, else the one occurrence (the go-sdk encodes
// _meta first and compactly) is read in place.
func tokenOf(params []byte) string {
	i := bytes.Index(params, tokenKey)
	if i < 0 {
		return ""
	}
	if bytes.Count(params, []byte(`"progressToken"`)) > 1 {
		var p struct {
			Meta struct {
				Token any `json:"progressToken"`
			} `json:"_meta"`
		}
		if json.Unmarshal(params, &p) != nil {
			return ""
		}
		tok, _ := p.Meta.Token.(string)
		return tok
	}
	rest := params[i+len(tokenKey):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// beforeWrite sees an outgoing message while handles are tracked: a
// resource request tagged with a handle's token adds its wire id; the
// go-sdk's notifications/cancelled for a handle's current wire id is
// marked accepted. It returns the handle whose cancel note the write's
// result completes.
func (t *reqTable) beforeWrite(r *jsonrpc.Request) *ResourceHandle {
	switch r.Method {
	case "resources/read", "resources/list", "resources/templates/list", "prompts/list", "prompts/get",
		"completion/complete", "resources/subscribe", "resources/unsubscribe":
		tok := tokenOf(r.Params)
		if tok == "" || !r.ID.IsValid() {
			return nil
		}
		w := wireText(r.ID)
		t.mu.Lock()
		h := t.byToken[tok]
		if h != nil {
			t.byWire[w] = h
		}
		t.mu.Unlock()
		if h != nil {
			h.mu.Lock()
			h.wires = append(h.wires, w)
			h.mu.Unlock()
		}
	case "notifications/cancelled":
		var p struct {
			RequestID any `json:"requestId"`
		}
		dec := json.NewDecoder(bytes.NewReader(r.Params))
		dec.UseNumber()
		if dec.Decode(&p) != nil {
			return nil
		}
		var w string
		switch v := p.RequestID.(type) {
		case json.Number:
			w = v.String()
		case string:
			w = v
		default:
			return nil
		}
		t.mu.Lock()
		h := t.byWire[w]
		t.mu.Unlock()
		if h == nil {
			return nil
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.wires) == 0 || h.wires[len(h.wires)-1] != w || h.note.seen {
			return nil
		}
		h.note.seen = true
		return h
	}
	return nil
}

// afterCancelWrite completes a cancel note with the stream write's result.
func (h *ResourceHandle) afterCancelWrite(err error) {
	h.mu.Lock()
	h.note.delivered = err == nil
	h.mu.Unlock()
	close(h.note.ch)
}

// onRead sees an incoming message while handles are tracked: a response
// for a handle's wire id (its size; a result marks the wire id answered)
// and progress notifications for a handle's token.
func (t *reqTable) onRead(m jsonrpc.Message) {
	switch x := m.(type) {
	case *jsonrpc.Response:
		w := wireText(x.ID)
		t.mu.Lock()
		h := t.byWire[w]
		t.mu.Unlock()
		if h == nil {
			return
		}
		h.mu.Lock()
		h.resBytes = int64(len(x.Result))
		if x.Error == nil && x.Result != nil {
			h.respWire = w
		}
		h.mu.Unlock()
	case *jsonrpc.Request:
		if x.Method != "notifications/progress" {
			return
		}
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(x.Params, &p) != nil {
			return
		}
		tok, _ := p.ProgressToken.(string)
		t.mu.Lock()
		h := t.byToken[tok]
		t.mu.Unlock()
		if h != nil {
			h.deliverProgress(Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
		}
	}
}

// deliverProgress hands a progress notification to the owner without
// blocking the connection's reader.
func (h *ResourceHandle) deliverProgress(p Progress) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closedProg {
		return
	}
	select {
	case h.progress <- p:
	default:
		h.dropped++
	}
}
