package runtime

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
)

// ConfigSource looks up the current config entry of a server. The manager
// calls it on every acquisition and every call (so a changed entry is seen
// before the next call runs); it must return an error matching
// ErrConfigMissing when the server is not configured.
type ConfigSource interface {
	Lookup(ctx context.Context, server string) (ServerConfig, error)
}

// FileConfigSource is the production ConfigSource: it reads the mcp.json at
// Path on every lookup, bounded by MaxConfigBytes, so an edit takes effect
// at the next call without any watcher goroutine. Each read expands the
// entries' ${VAR} references (see LoadConfig) from LookupEnv, or from the
// process environment (os.LookupEnv) when LookupEnv is nil.
type FileConfigSource struct {
	Path      string
	LookupEnv func(name string) (value string, ok bool)
}

// Lookup implements ConfigSource.
func (f FileConfigSource) Lookup(ctx context.Context, server string) (ServerConfig, error) {
	if err := ctx.Err(); err != nil {
		return ServerConfig{}, err
	}
	id := configErrID(server)
	fh, err := os.Open(f.Path)
	if err != nil {
		return ServerConfig{}, &LeaseError{Op: "config", Server: id, Err: ErrConfigMissing, cause: err}
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxConfigBytes+1))
	if err != nil {
		return ServerConfig{}, &LeaseError{Op: "config", Server: id, Err: ErrConfigInvalid, cause: err}
	}
	if len(data) > MaxConfigBytes {
		return ServerConfig{}, &LeaseError{Op: "config", Server: id, Err: ErrConfigInvalid,
			cause: fmt.Errorf("larger than MaxConfigBytes=%d", MaxConfigBytes)}
	}
	all, err := loadConfig(data, f.LookupEnv, false)
	if err != nil {
		return ServerConfig{}, &LeaseError{Op: "config", Server: id, Err: ErrConfigInvalid, cause: err}
	}
	c, ok := all.Servers[server]
	if !ok {
		return ServerConfig{}, &LeaseError{Op: "config", Server: id, Err: ErrConfigMissing}
	}
	return c, nil
}

// configErrID is the server id a config error names: the id of a valid
// name, else nothing (the name itself is never put in an error's fields).
func configErrID(name string) string {
	if !validServerName(name) {
		return ""
	}
	return serverID(name)
}

// MapConfigSource is an in-memory ConfigSource whose entries can change at
// any time (tests; hosts that hold config elsewhere). The zero value is
// empty and ready to use.
type MapConfigSource struct {
	mu sync.Mutex
	m  map[string]ServerConfig
}

// Set installs or replaces the entry for server. Like ParseConfig it
// refuses (ErrConfigInvalid, nothing installed) a name that is empty, not
// UTF-8 or longer than MaxServerNameBytes, and a name whose server id
// another entry's name already maps to.
func (s *MapConfigSource) Set(server string, c ServerConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]ServerConfig)
	}
	ids := make(map[string]string, len(s.m)+1)
	for name := range s.m {
		if name != server {
			ids[serverID(name)] = name
		}
	}
	if err := checkName(ids, server); err != nil {
		return &LeaseError{Op: "config", Server: configErrID(server), Err: ErrConfigInvalid, cause: err}
	}
	c.Args = append([]string(nil), c.Args...)
	c.AllowRedirectOrigins = append([]string(nil), c.AllowRedirectOrigins...)
	env := make(map[string]string, len(c.Env))
	for k, v := range c.Env {
		env[k] = v
	}
	c.Env = env
	if c.Prefix != nil {
		p := *c.Prefix
		c.Prefix = &p
	}
	s.m[server] = c
	return nil
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
		return ServerConfig{}, &LeaseError{Op: "config", Server: configErrID(server), Err: ErrConfigMissing}
	}
	return c, nil
}

// Replace installs exactly the entries of all, atomically: a lookup sees
// either the entries before or all of these, never a mix. It refuses
// (ErrConfigInvalid, nothing changed) what ParseConfig and Set refuse: an
// entry that cannot start, a name that is empty, not UTF-8 or longer than
// MaxServerNameBytes, and two names that map to one server id. A host that
// reloads a configuration file puts what it parsed in force with it, so
// the configuration in force is exactly the one it loaded (and recorded:
// Manager.RecordConfig), and a file that fails to load changes nothing.
func (s *MapConfigSource) Replace(all map[string]ServerConfig) error {
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names) // the error names the same entry every time
	ids := make(map[string]string, len(all))
	m := make(map[string]ServerConfig, len(all))
	for _, name := range names {
		c := all[name]
		if err := checkName(ids, name); err != nil {
			return &LeaseError{Op: "config", Server: configErrID(name), Err: ErrConfigInvalid, cause: err}
		}
		if err := c.check(); err != nil {
			return &LeaseError{Op: "config", Server: configErrID(name), Err: ErrConfigInvalid, cause: err}
		}
		m[name] = c.clone()
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	return nil
}
