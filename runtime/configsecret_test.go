//go:build linux

package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseledger/leaseledger/events"
)

// TestConfigSecretsNeverRecorded: a VS Code-shaped mcp.json whose ${TOKEN}
// is in a stdio entry's env and in an HTTP entry's url and Authorization
// header runs both servers through a real ledger — the child gets the
// expanded env, the remote server the expanded header and query — and the
// token's value (before and after it changes, which replaces the lease:
// the keyed fingerprint covers expanded values) is in no stored event and
// in no error of a config that does not load.
func TestConfigSecretsNeverRecorded(t *testing.T) {
	const token, token2 = "tok-5e3c7a1b9d-secret", "tok-2f4e6a8c0b-rotated"
	var mu sync.Mutex
	var auths, keys []string
	srv := mcp.NewServer(&mcp.Implementation{Name: "secret-http", Version: "0"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths, keys = append(auths, r.Header.Get("Authorization")), append(keys, r.URL.Query().Get("k"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})

	dir := t.TempDir()
	path, starts := filepath.Join(dir, "mcp.json"), filepath.Join(dir, "starts")
	doc := `{"inputs": [], "servers": {
		"local": {"type": "stdio", "command": "${TESTSERVER}", "env": {"TESTSERVER_STARTS": "${STARTS}", "API_TOKEN": "${TOKEN}"}},
		"remote": {"type": "http", "url": "${ENDPOINT}?k=${TOKEN}", "headers": {"Authorization": "Bearer ${TOKEN}"}}
	}}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var envMu sync.Mutex
	vars := map[string]string{"TESTSERVER": testserverBin.Out, "STARTS": starts, "TOKEN": token, "ENDPOINT": hs.URL + "/mcp"}
	lookup := func(k string) (string, bool) {
		envMu.Lock()
		defer envMu.Unlock()
		v, ok := vars[k]
		return v, ok
	}
	e := newEnv(t, func(o *Options) { o.Config = FileConfigSource{Path: path, LookupEnv: lookup} })
	ctx := ctxT(t, 60*time.Second)
	s, err := e.m.OpenSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx)
	call := func(server string) {
		t.Helper()
		tools, err := s.Capability().Tools(ctx, server)
		if err != nil {
			t.Fatalf("%s: tools: %v", server, err)
		}
		if _, err := s.Capability().Call(ctx, CallRequest{Server: server, Tool: "echo", Digest: digestOf(t, tools, "echo"), Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatalf("%s: call: %v", server, err)
		}
	}
	call("local")
	call("remote")
	if _, err := os.Stat(starts); err != nil {
		t.Fatalf("the child did not get its expanded env: %v", err)
	}
	envMu.Lock()
	vars["TOKEN"] = token2
	envMu.Unlock()
	call("remote")
	mu.Lock()
	if len(auths) == 0 || auths[0] != "Bearer "+token || keys[0] != token || auths[len(auths)-1] != "Bearer "+token2 {
		t.Errorf("the remote server saw Authorization %q, k %q", auths, keys)
	}
	mu.Unlock()

	// Config errors name the entry and the variable, never a value.
	for _, bad := range []string{
		strings.Replace(doc, "${STARTS}", "${UNSET}", 1),
		strings.Replace(doc, `"type": "http"`, `"type": "websocket"`, 1),
		strings.Replace(doc, "Bearer ${TOKEN}", "Bearer ${TOKEN} ${input:pat}", 1),
		strings.Replace(doc, "Bearer ${TOKEN}", "${TOKEN}${", 1),
	} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.Capability().Tools(ctx, "remote")
		if !errors.Is(err, ErrConfigInvalid) {
			t.Errorf("%s: %v", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "tok-") {
			t.Errorf("a config error shows the token: %v", err)
		}
	}

	var replaced bool
	for _, env := range e.envelopes() {
		b, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), token) || strings.Contains(string(b), token2) || strings.Contains(string(b), "tok-") {
			t.Errorf("event %d (%s) holds the token: %s", env.Seq, env.Kind, b)
		}
		replaced = replaced || env.Kind == (&events.LeaseStaleReplaced{}).Kind()
	}
	if !replaced {
		t.Error("a rotated token did not replace the lease (expanded values not fingerprinted)")
	}
}
