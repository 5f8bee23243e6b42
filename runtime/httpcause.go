package runtime

import (
	"context"
	"errors"
	"sync"
)

// httpCallCause carries the typed cause of an HTTP call's failed request
// (a timeout, an oversize body, a refused redirect) from the boundary to
// the call that made it. go-sdk replaces a failed response stream's error
// with its own ("request terminated without response") or fails the
// connection, so the call's error would otherwise not say why. The call
// puts one in the context it calls with (withHTTPCause); the go-sdk makes
// the call's POST (and its stream's resumption) with that context, so the
// round tripper finds it (noteHTTPCause). Only the first cause is kept.
//
// The slot also keeps the operator's account of the first failed request
// (info: see noteFailure), for the call's or the acquisition's LeaseError
// and lease.acquire_failed; it never changes how a call is classified.
type httpCallCause struct {
	mu   sync.Mutex
	err  error
	info failureInfo
}

type httpCauseKey struct{}

// withHTTPCause returns ctx carrying a fresh cause slot, for a call on an
// HTTP lease; other leases get ctx and nil.
func (l *lease) withHTTPCause(ctx context.Context) (context.Context, *httpCallCause) {
	if _, ok := l.child.(*httpChild); !ok {
		return ctx, nil
	}
	c := &httpCallCause{}
	return context.WithValue(ctx, httpCauseKey{}, c), c
}

// noteHTTPCause records err as the cause of the call whose context ctx
// derives from, when err is one of the boundary's per-request errors
// (not ErrHTTPDetached: the lease is ending anyway) and ctx is not a loss
// probe's.
func noteHTTPCause(ctx context.Context, err error) {
	c, ok := ctx.Value(httpCauseKey{}).(*httpCallCause)
	if !ok || ctx.Value(probeKey{}) != nil || errors.Is(err, ErrHTTPDetached) {
		return
	}
	for _, e := range boundaryErrs {
		if errors.Is(err, e) {
			c.mu.Lock()
			if c.err == nil {
				c.err = e
			}
			c.mu.Unlock()
			return
		}
	}
}

// get returns the recorded cause, or nil (also for a nil slot).
func (c *httpCallCause) get() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
