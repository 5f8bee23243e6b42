package runtime_test

import (
	"errors"
	"fmt"

	"github.com/leaseledger/leaseledger/runtime"
)

// LoadConfig reads the mcp.json of Claude Code (${VAR} and ${VAR:-default}
// in command, args, env, url and headers) and VS Code ("servers", "type");
// the lookup stands in for the process environment. Fields the runtime
// does not honour are warned about, by name; a missing variable is an
// error naming the entry and the variable, never a value.
func ExampleLoadConfig() {
	env := map[string]string{"GITHUB_TOKEN": "ghp_example"}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	cfg, err := runtime.LoadConfig([]byte(`{"servers": {
		"github": {"type": "http", "url": "${GITHUB_MCP_URL:-https://api.githubcopilot.com/mcp/}",
			"headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
		"memory": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "envFile": ".env"}
	}}`), lookup)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Servers["github"].URL, cfg.Servers["github"].Headers["Authorization"])
	fmt.Println(cfg.Warnings)

	_, err = runtime.LoadConfig([]byte(`{"mcpServers": {"db": {"command": "db-mcp", "env": {"DB_PASSWORD": "${DB_PASSWORD}"}}}}`), lookup)
	fmt.Println(errors.Is(err, runtime.ErrConfigInvalid), err)
	// Output:
	// https://api.githubcopilot.com/mcp/ Bearer ghp_example
	// [mcp.json: server "memory": field "envFile" is not honoured (ignored)]
	// true mcp.json: server "db" env "DB_PASSWORD": variable "DB_PASSWORD" is not set and has no default (runtime: server config invalid)
}
