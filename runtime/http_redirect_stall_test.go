//go:build linux

package runtime

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHTTPRedirectBodyStalls: redirects whose bodies never end. A refused
// redirect (302) fails at once with ErrHTTPRedirect (its body is not
// read); a followed 307's body is abandoned after the receive timeout and
// the hop followed, for a POST and for a GET (which has no whole-request
// timeout). Nothing waits for the whole-request timeout or the caller's
// deadline — each case is built so that waiting would change its outcome —
// and every request's evidence settles.
func TestHTTPRedirectBodyStalls(t *testing.T) {
	quit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/end") {
			_, _ = io.WriteString(w, "done")
			return
		}
		code := http.StatusTemporaryRedirect
		if strings.HasPrefix(r.URL.Path, "/302") {
			code = http.StatusFound
		}
		w.Header().Set("Location", "/x/end")
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(code)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	defer srv.Close()
	defer close(quit)
	// A followed 307's stalled body is abandoned after the receive
	// timeout; its request timeout is far longer, so "done" shows the hop
	// was followed without waiting for it. A refused 302's body is never
	// read: its receive timeout is longer than the caller's deadline, so
	// reading it would end the call with the deadline, not ErrHTTPRedirect.
	const receive = 200 * time.Millisecond
	for _, c := range []struct {
		method, path string
		want         error
		receive      time.Duration
	}{
		{"POST", "/302", ErrHTTPRedirect, time.Minute},
		{"POST", "/307", nil, receive},
		{"GET", "/307", nil, receive},
	} {
		b := newHTTPBoundary(httpTimeouts{connect: time.Second, receive: c.receive, request: 2 * time.Minute})
		rec := &recorder{}
		ev := newHTTPEvidence(rec.emit, draftOf)
		u, _ := checkEndpoint(srv.URL + "/")
		client := b.clientFor(newLeaseRoundTripper(b, u, nil, ev))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, c.method, srv.URL+c.path, strings.NewReader("{}"))
		resp, err := client.Do(req)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
		}
		cancel()
		switch {
		case c.want != nil && !errors.Is(err, c.want):
			t.Fatalf("%s %s: %v, want %v", c.method, c.path, err, c.want)
		case c.want == nil && (err != nil || string(body) != "done"):
			t.Fatalf("%s %s: %v (%q)", c.method, c.path, err, body)
		}
		if out, detail, _ := ev.finish(time.Now().Add(time.Second)); out != "ok" {
			t.Fatalf("%s %s: evidence %s %s", c.method, c.path, out, detail)
		}
		checkHTTPEvidence(t, rec.payloads())
		b.close()
	}
}
