package runtime

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"syscall"
	"time"
)

// A remote session's loss as the HTTP boundary observes it: a dial
// refused, a 404 for the session id, or a 400 for it that a probe in the
// same session confirms (lostSignal, checkLost).

// Headers go-sdk sets that tell what a 404 means.
const (
	sessionIDHeader   = "Mcp-Session-Id"
	lastEventIDHeader = "Last-Event-ID"
	protocolHeader    = "Mcp-Protocol-Version"
)

// Reasons a remote session is lost (lostSignal, the session's Read).
const (
	lostConnectionRefused = "connection_refused"
	lostSessionNotFound   = "session_not_found"
	lostSessionRejected   = "session_rejected"
	lostSessionFailed     = "session_failed"
	// lostUnanswered is a candidate only (lostSignal): never a reason.
	lostUnanswered = "unanswered"
)

// lostProbeTimeout bounds the probe that confirms a 400 means the session
// is gone (probeLost); a probe that does not answer in time proves
// nothing and the session is kept.
const lostProbeTimeout = 5 * time.Second

// lostProbeBody is the probe: a JSON-RPC ping, which every MCP server
// answers in a live session and has no effect on it.
var lostProbeBody = []byte(`{"jsonrpc":"2.0","id":"leaseledger-loss-probe","method":"ping"}`)

// probeKey marks a probe's context: its own outcome is not checked for
// loss again (checkLost reads it instead).
type probeKey struct{}

// lostSignal returns why a request's outcome may prove the remote session
// gone, or "": a dial refused (nothing listens at the origin: whatever
// session it held is gone), a POST in the session left without any answer
// (a candidate, confirmed by a probe: TestHTTPUnansweredPost), or a 404 —
// the spec's answer for a terminated session — or a 400 — what common
// servers (server-everything, the TypeScript SDK's examples) answer for a
// session id they do not know — to a POST, or a resuming GET, carrying the
// session id. A 400 is only a candidate: a proxy, a gateway or the
// server's own validation may refuse one request with it while the session
// lives, so checkLost confirms it with a probe. A 404 to a first
// standalone GET only means the server offers no stream.
func lostSignal(out *http.Request, resp *http.Response, err error) string {
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return lostConnectionRefused
		case out.Method == http.MethodPost && out.Header.Get(sessionIDHeader) != "" &&
			!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
			// A POST in the session that got no answer at all (the
			// connection reset or closed under it): the server may have
			// died, or dropped that one request. Only a candidate, like a
			// 400; go-sdk keeps the connection for it.
			return lostUnanswered
		}
		return ""
	}
	if out.Header.Get(sessionIDHeader) == "" ||
		(out.Method != http.MethodPost && (out.Method != http.MethodGet || out.Header.Get(lastEventIDHeader) == "")) {
		return ""
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return lostSessionNotFound
	case http.StatusBadRequest:
		return lostSessionRejected
	}
	return ""
}

// checkLost tells the lease (rt.lost) when one hop's outcome proves its
// remote session gone. Only requests to the configured origin speak for
// the session (a hop to an allowed other origin does not), the session
// DELETE never does (the session is ending anyway), and a probe's outcome
// is read by its prober. A 400 is confirmed first (probeLost).
func (rt *leaseRoundTripper) checkLost(ctx context.Context, cur *url.URL, out *http.Request, resp *http.Response, err error) {
	if rt.lost == nil || out.Method == http.MethodDelete || !sameOrigin(cur, rt.endpoint) || ctx.Value(probeKey{}) != nil {
		return
	}
	reason := lostSignal(out, resp, err)
	if reason == lostSessionRejected || reason == lostUnanswered {
		reason = rt.probeLost(ctx, out.Header)
	}
	if reason != "" {
		rt.lost(reason)
	}
}

// lossProbe is one probe in flight; concurrent 400s wait for it instead
// of sending their own.
type lossProbe struct {
	done   chan struct{}
	reason string
}

// probeLost sends a ping in the session the 400 was answered in (its
// session id and protocol version, through RoundTrip: registered,
// recorded, under the lease's timeouts, bounded by lostProbeTimeout) and
// returns why the session is lost when the ping is refused too (400, 404,
// a refused dial), else "": the 400 refused that one request only.
func (rt *leaseRoundTripper) probeLost(ctx context.Context, h http.Header) string {
	rt.mu.Lock()
	p := rt.probe
	owner := p == nil
	if owner {
		p = &lossProbe{done: make(chan struct{})}
		rt.probe = p
	}
	rt.mu.Unlock()
	if !owner {
		select {
		case <-p.done:
			return p.reason
		case <-ctx.Done():
			return ""
		}
	}
	p.reason = rt.ping(ctx, h)
	rt.mu.Lock()
	rt.probe = nil
	rt.mu.Unlock()
	close(p.done)
	return p.reason
}

func (rt *leaseRoundTripper) ping(ctx context.Context, h http.Header) string {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, probeKey{}, true), lostProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rt.endpoint.String(), bytes.NewReader(lostProbeBody))
	if err != nil {
		return ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for _, k := range []string{sessionIDHeader, protocolHeader} {
		if v := h.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return lostConnectionRefused
		}
		return ""
	}
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return lostSessionNotFound
	case http.StatusBadRequest:
		return lostSessionRejected
	}
	return ""
}
