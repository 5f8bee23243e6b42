//go:build linux

package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/leaseledger/leaseledger/gateway"
	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds a bearer token to every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// A whole endpoint: a ledger, a manager reading mcp.json, a token file
// with one token, the gateway behind an HTTP server, and an MCP client
// that lists the namespaced tools, calls one and closes its session
// (which ends the runtime session and its lease). The MCP server is the
// go-sdk test server the suite builds.
func Example() {
	helper, server := gateway.BuiltBinaries()
	dir, err := os.MkdirTemp("", "gateway-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: filepath.Join(dir, "ledger")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	config := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`{"mcpServers": {"tools": {"command": %q}}}`, server)), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	m, err := runtime.NewManager(runtime.Options{Config: runtime.FileConfigSource{Path: config}, Ledger: l, HelperPath: helper})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(ctx)

	// The token file stores only the hash; the plain token goes to the client.
	token, err := gateway.NewToken()
	if err != nil {
		fmt.Println(err)
		return
	}
	tokenFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, []byte(gateway.TokenLine("team-a", gateway.HashToken(token))+"\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	tokens, err := gateway.LoadTokens(tokenFile)
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := gateway.New(gateway.Options{Manager: m, Servers: []string{"tools"}, Tokens: tokens})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close(ctx)
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()

	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearer(token)}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("principal:", g.Sessions()[0].Principal)
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range tools.Tools {
		fmt.Println("tool:", t.Name)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tools__echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("echo:", res.Content[0].(*mcp.TextContent).Text)
	if err := cs.Close(); err != nil { // DELETE: the session ends
		fmt.Println(err)
		return
	}
	fmt.Println("sessions after close:", len(g.Sessions()))
	// Output:
	// principal: team-a
	// tool: tools__crash
	// tool: tools__echo
	// tool: tools__fail
	// tool: tools__progress
	// tool: tools__refuse
	// tool: tools__slow
	// echo: hello
	// sessions after close: 0
}

// The names a client sees: tools as <server>__<tool>, resources and
// templates as leaseledger://<server>/<original>.
func ExampleToolName() {
	fmt.Println(gateway.ToolName("github", "create_issue"))
	fmt.Println(gateway.SplitToolName("github__create_issue"))
	fmt.Println(gateway.ResourceURI("docs", "file:///{path}"))
	fmt.Println(gateway.ValidServerName("my.server"), gateway.ValidServerName("bad__name"), gateway.ValidServerName("bad_"))
	// Output:
	// github__create_issue
	// github create_issue true
	// leaseledger://docs/file:///{path}
	// true false false
}

// The token file holds one `<name> <hash>` line per token.
func ExampleHashToken() {
	fmt.Println(gateway.TokenLine("team-a", gateway.HashToken("llt_example")))
	// Output:
	// team-a sha256:9f72868b981e4445d694c9409631e19e429c2c832386afcb231dd4018fbd192a
}

// TokenLineFields reads a token file line as LoadTokens does: spaces and
// tabs alike separate the name from the hash; comments are nothing.
func ExampleTokenLineFields() {
	fmt.Println(gateway.TokenLineFields("alice\tsha256:ab")[0])
	fmt.Println(gateway.TokenLineFields("  # a comment") == nil)
	// Output:
	// alice
	// true
}
