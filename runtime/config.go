package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
)

// MaxConfigBytes bounds the mcp.json a FileConfigSource reads; a larger file
// is refused (ErrConfigInvalid) rather than read into memory.
const MaxConfigBytes = 1 << 20

// ServerConfig is one entry of mcp.json's "mcpServers" object.
type ServerConfig struct {
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	// Shared servers run one child for every session (keyed under
	// SharedSessionKey). Sharing widens the child, never the grant: every
	// call still validates the exact tool name and digest.
	Shared bool `json:"shared,omitempty"`
	// OneShot: every activation of this server is one-shot — once its
	// child ended it is never replaced, and later calls under it fail
	// with ErrOneShotEnded (see ConnectionOptions.OneShot).
	OneShot bool `json:"oneShot,omitempty"`
}

// Fingerprint is the lowercase hex SHA-256 of the entry's canonical JSON:
// fixed field order, env as sorted "KEY=VALUE" strings, empty fields kept.
// Two entries that start the same process have the same fingerprint.
func (c ServerConfig) Fingerprint() string {
	sum := sha256.Sum256(c.canonical())
	return hex.EncodeToString(sum[:])
}

func (c ServerConfig) canonical() []byte {
	env := make([]string, 0, len(c.Env))
	for k, v := range c.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	args := c.Args
	if args == nil {
		args = []string{}
	}
	// A struct (not a map) fixes the field order; encoding/json escapes
	// deterministically, so this is canonical for our purposes.
	b, _ := json.Marshal(struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Env     []string `json:"env"`
		Cwd     string   `json:"cwd"`
		Shared  bool     `json:"shared"`
		OneShot bool     `json:"one_shot,omitempty"` // only when set: other fingerprints unchanged
	}{c.Command, args, env, c.Cwd, c.Shared, c.OneShot})
	return b
}

// envList returns the target environment for the guardian: nil (inherit
// the host's) when the entry sets none, else the host's environment with
// the entry's variables overriding, in sorted order.
func (c ServerConfig) envList() []string {
	if len(c.Env) == 0 {
		return nil
	}
	base := os.Environ()
	out := make([]string, 0, len(base)+len(c.Env))
	for _, kv := range base {
		k, _, _ := bytes.Cut([]byte(kv), []byte("="))
		if _, over := c.Env[string(k)]; !over {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+c.Env[k])
	}
	return out
}

// ConfigSource looks up the current config entry of a server. The manager
// calls it on every acquisition and every call (so a changed entry is seen
// before the next call runs); it must return an error matching
// ErrConfigMissing when the server is not configured.
type ConfigSource interface {
	Lookup(ctx context.Context, server string) (ServerConfig, error)
}

// FileConfigSource is the production ConfigSource: it reads the mcp.json at
// Path on every lookup, bounded by MaxConfigBytes, so an edit takes effect
// at the next call without any watcher goroutine.
type FileConfigSource struct {
	Path string
}

// Lookup implements ConfigSource.
func (f FileConfigSource) Lookup(ctx context.Context, server string) (ServerConfig, error) {
	if err := ctx.Err(); err != nil {
		return ServerConfig{}, err
	}
	fh, err := os.Open(f.Path)
	if err != nil {
		return ServerConfig{}, &LeaseError{Op: "config", Server: server, Err: ErrConfigMissing, cause: err}
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxConfigBytes+1))
	if err != nil {
		return ServerConfig{}, &LeaseError{Op: "config", Server: server, Err: ErrConfigInvalid, cause: err}
	}
	if len(data) > MaxConfigBytes {
		return ServerConfig{}, &LeaseError{Op: "config", Server: server, Err: ErrConfigInvalid,
			cause: fmt.Errorf("larger than MaxConfigBytes=%d", MaxConfigBytes)}
	}
	all, err := ParseConfig(data)
	if err != nil {
		return ServerConfig{}, &LeaseError{Op: "config", Server: server, Err: ErrConfigInvalid, cause: err}
	}
	c, ok := all[server]
	if !ok {
		return ServerConfig{}, &LeaseError{Op: "config", Server: server, Err: ErrConfigMissing}
	}
	return c, nil
}

// ParseConfig decodes an mcp.json document ({"mcpServers": {name: entry}}).
// Unknown fields are ignored (other tools keep their own keys there); an
// entry without a command is refused.
func ParseConfig(data []byte) (map[string]ServerConfig, error) {
	var doc struct {
		MCPServers map[string]ServerConfig `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("mcp.json: %w", err)
	}
	for name, c := range doc.MCPServers {
		if c.Command == "" {
			return nil, fmt.Errorf("mcp.json: server %q has no command", name)
		}
	}
	return doc.MCPServers, nil
}

// MapConfigSource is an in-memory ConfigSource whose entries can change at
// any time (tests; hosts that hold config elsewhere). The zero value is
// empty and ready to use.
type MapConfigSource struct {
	mu sync.Mutex
	m  map[string]ServerConfig
}

// Set installs or replaces the entry for server.
func (s *MapConfigSource) Set(server string, c ServerConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]ServerConfig)
	}
	c.Args = append([]string(nil), c.Args...)
	env := make(map[string]string, len(c.Env))
	for k, v := range c.Env {
		env[k] = v
	}
	c.Env = env
	s.m[server] = c
}

// Delete removes the entry for server.
func (s *MapConfigSource) Delete(server string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, server)
}

// Lookup implements ConfigSource.
func (s *MapConfigSource) Lookup(ctx context.Context, server string) (ServerConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[server]
	if !ok {
		return ServerConfig{}, &LeaseError{Op: "config", Server: server, Err: ErrConfigMissing}
	}
	return c, nil
}
