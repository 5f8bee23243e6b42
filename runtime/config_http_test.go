//go:build linux

package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/events"
)

// TestFingerprintKeyed: a fingerprint is keyed by the manager's random
// key — secrets in header and env values change it within one manager,
// and the same entry fingerprints differently under another manager and
// differently from the unkeyed SHA-256 of its canonical JSON, so a ledger
// reader cannot confirm a guessed token offline.
func TestFingerprintKeyed(t *testing.T) {
	m1, m2 := newEnv(t, nil).m, newEnv(t, nil).m
	a := ServerConfig{URL: "https://mcp.example/mcp", Headers: map[string]string{"Authorization": "Bearer secret-1"}}
	b := ServerConfig{URL: "https://mcp.example/mcp", Headers: map[string]string{"Authorization": "Bearer secret-2"}}
	if m1.fingerprint(a) == m1.fingerprint(b) {
		t.Error("configs differing only in a header value share a fingerprint")
	}
	if m1.fingerprint(a) != m1.fingerprint(a) {
		t.Error("fingerprint not stable within one manager")
	}
	s1 := ServerConfig{Command: "srv", Env: map[string]string{"TOKEN": "one"}}
	s2 := ServerConfig{Command: "srv", Env: map[string]string{"TOKEN": "two"}}
	if m1.fingerprint(s1) == m1.fingerprint(s2) {
		t.Error("configs differing only in an env value share a fingerprint")
	}
	for _, c := range []ServerConfig{a, s1} {
		fp := m1.fingerprint(c)
		if fp == m2.fingerprint(c) {
			t.Errorf("%q: same fingerprint under two managers (recomputable from the config)", fp)
		}
		sum := sha256.Sum256(c.canonical())
		if fp == hex.EncodeToString(sum[:]) {
			t.Error("fingerprint is the unkeyed SHA-256 of the config")
		}
		if len(fp) != 64 || strings.Trim(fp, "0123456789abcdef") != "" {
			t.Errorf("fingerprint %q is not 64 lowercase hex digits", fp)
		}
	}
}

// TestConfigHeadersRefused: headers that cannot be sent as configured are
// refused when the config is loaded, as ErrConfigInvalid naming the
// header (when its name is valid) and never its value.
func TestConfigHeadersRefused(t *testing.T) {
	const secret = "s3cret-value"
	for _, c := range []struct {
		name    string
		headers string
		ok      bool
		names   string // the error names this header ("" when it must not name one)
	}{
		{"plain", `{"Authorization":"Bearer s3cret-value","X-Api-Key":"k\tv"}`, true, ""},
		{"obs-text value", `{"X-Name":"s3cret-value \u00e6"}`, true, ""},
		{"case duplicate", `{"Authorization":"Bearer s3cret-value","authorization":"Bearer s3cret-value"}`, false, "Authorization"},
		{"session id", `{"Mcp-Session-Id":"s3cret-value"}`, false, "Mcp-Session-Id"},
		{"protocol version", `{"mcp-protocol-version":"s3cret-value"}`, false, "Mcp-Protocol-Version"},
		{"content type", `{"Content-Type":"s3cret-value"}`, false, "Content-Type"},
		{"accept", `{"ACCEPT":"s3cret-value"}`, false, "Accept"},
		{"content length", `{"Content-Length":"1"}`, false, "Content-Length"},
		{"host", `{"Host":"s3cret-value"}`, false, "Host"},
		{"transfer encoding", `{"Transfer-Encoding":"chunked"}`, false, "Transfer-Encoding"},
		{"connection", `{"Connection":"close"}`, false, "Connection"},
		{"last event id", `{"Last-Event-ID":"s3cret-value"}`, false, "Last-Event-Id"},
		{"name with space", `{"Authorization: Bearer s3cret-value":"x"}`, false, ""},
		{"empty name", `{"":"s3cret-value"}`, false, ""},
		{"name with colon", `{"X:Y":"s3cret-value"}`, false, ""},
		{"value CR", `{"X-Key":"s3cret-value\r"}`, false, "X-Key"},
		{"value LF", `{"X-Key":"s3cret-value\nX-Other: 1"}`, false, "X-Key"},
		{"value NUL", `{"X-Key":"s3cret-value\u0000"}`, false, "X-Key"},
		{"value BEL", `{"X-Key":"s3cret-value\u0007"}`, false, "X-Key"},
		{"value ESC", `{"X-Key":"s3cret-value\u001b"}`, false, "X-Key"},
		{"value DEL", `{"X-Key":"s3cret-value\u007f"}`, false, "X-Key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := `{"mcpServers":{"remote":{"url":"https://mcp.example/mcp","headers":` + c.headers + `}}}`
			_, err := ParseConfig([]byte(doc))
			if c.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrConfigInvalid) {
				t.Fatalf("err %v, want ErrConfigInvalid", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error echoes the value: %v", err)
			}
			if c.names != "" && !strings.Contains(err.Error(), `"`+c.names+`"`) {
				t.Fatalf("error %q does not name header %q", err, c.names)
			}
		})
	}
}

// TestHTTPReceiveTimerAfterDial: the first-byte wait starts once the
// request is written, so a dial slower than the receive timeout (but
// within the connect timeout) is not a receive timeout, and a dial that
// never completes is a connect timeout even when the receive timeout is
// shorter.
func TestHTTPReceiveTimerAfterDial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	for _, c := range []struct {
		name   string
		dial   func(ctx context.Context, network, addr string) (net.Conn, error)
		want   error
		detail string
	}{
		{"slow dial", func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case <-time.After(400 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}, nil, ""},
		{"dial never completes", func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, ErrHTTPConnectTimeout, "connect_timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newHTTPBoundary(httpTimeouts{connect: 800 * time.Millisecond, receive: 100 * time.Millisecond, request: 5 * time.Second})
			defer b.close()
			b.dial = c.dial
			rec := &recorder{}
			ev := newHTTPEvidence(rec.emit, draftOf)
			u, _ := checkEndpoint(srv.URL + "/")
			client := b.clientFor(newLeaseRoundTripper(b, u, nil, ev))
			resp, err := client.Post(srv.URL+"/", "text/plain", strings.NewReader("{}"))
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if out, detail, _ := ev.finish(time.Now().Add(5 * time.Second)); out != events.BarrierOK {
				t.Fatalf("finish %s %s", out, detail)
			}
			completed, _ := checkHTTPEvidence(t, rec.payloads())
			if len(completed) != 1 {
				t.Fatalf("%d completions", len(completed))
			}
			for _, p := range completed {
				want := events.HTTPOK
				if c.want != nil {
					want = events.HTTPTimeout
				}
				if p.Outcome != want || p.Detail != c.detail {
					t.Fatalf("completed %+v, want %s %q", p, want, c.detail)
				}
			}
		})
	}
}
