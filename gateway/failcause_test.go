//go:build linux

package gateway

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestFailureCauseLoggedNotAnswered: an HTTP server nothing listens on is
// "server unavailable" to the client, static text only, while serve's log
// line says why: cause=connection_refused and the endpoint's host:port.
func TestFailureCauseLoggedNotAnswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs syncBuffer
	e := newEnv(t, []server{{"down", runtime.ServerConfig{URL: "http://" + target + "/mcp"}}}, []string{"alice"},
		func(o *Options, _ *runtime.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ctx := ctxT(t, time.Minute)
	cs := e.mustConnect(ctx, e.plain["alice"], nil)
	defer cs.Close()
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "down__echo", Arguments: map[string]any{}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != CodeServerUnavailable || we.Message != msgUnavailable {
		t.Fatalf("call on a refused server: %v", err)
	}
	_, port, _ := net.SplitHostPort(target)
	if strings.Contains(err.Error(), target) || strings.Contains(err.Error(), "refused") || strings.Contains(err.Error(), ":"+port) {
		t.Fatalf("the client's answer names the cause: %v", err)
	}
	if log := logs.String(); !strings.Contains(log, "cause=connection_refused target="+target) {
		t.Fatalf("the log does not say the dial to %s was refused:\n%s", target, log)
	}
	t.Log(strings.TrimSpace(logs.String()))
}
