package gateway

import (
	"context"
	"sync"

	"github.com/leaseledger/leaseledger/runtime"
)

// progressRelay relays the progress of one client request to the
// client's progress token. MCP requires the values sent for one token to
// increase strictly, but a listing is served by several servers' request
// handles in turn, each counting from its own start; so the relay rebases:
// each server's part (nextPart) is offset by the last value sent before
// it, and a value that would not exceed the last one sent is dropped.
// Total is passed through only for a request served by one server
// (single); a listing's overall total is unknown, so it is omitted.
// A nil relay (no token) relays nothing.
type progressRelay struct {
	s      *session
	ctx    context.Context
	token  any
	single bool

	mu   sync.Mutex
	base float64 // the last value sent before the current part began
	last float64 // the last value sent
	sent bool    // whether any value was sent
}

// newProgressRelay returns the relay of a request with the client's
// token (nil without one); single: one server serves the whole request.
func (s *session) newProgressRelay(ctx context.Context, token any, single bool) *progressRelay {
	if token == nil {
		return nil
	}
	return &progressRelay{s: s, ctx: ctx, token: token, single: single}
}

// nextPart starts the next server's part: its values count from the last
// value sent.
func (r *progressRelay) nextPart() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.base = r.last
	r.mu.Unlock()
}

// relay sends p rebased onto the current part, unless it would not
// increase the value sent for the token.
func (r *progressRelay) relay(p runtime.Progress) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.base + p.Progress
	if r.sent && !(v > r.last) {
		return
	}
	r.sent, r.last = true, v
	p.Progress = v
	if !r.single {
		p.Total = 0
	}
	// Under mu, so the values leave in the order they were checked.
	r.s.notifyProgress(r.ctx, r.token, p)
}

// withCallProgress relays a call's progress notifications to the client
// when it sent a progress token: the runtime delivers them in order from
// a goroutine of the call, and they go out on the call's own stream.
func (s *session) withCallProgress(ctx context.Context, req *runtime.CallRequest, token any) {
	r := s.newProgressRelay(ctx, token, true)
	if r == nil {
		return
	}
	req.Progress = r.relay
}
