package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"
)

// ErrInvalidPrefix: an entry's "prefix" is longer than MaxPrefixBytes or
// holds a byte that is not printable ASCII other than space (whitespace,
// a control character, non-ASCII). Such an entry is refused when the
// config is loaded or looked up; the error also matches ErrConfigInvalid
// and names the entry, never the prefix.
var ErrInvalidPrefix = fmt.Errorf("a prefix is at most %d bytes of printable ASCII without spaces", MaxPrefixBytes)

// LoadedConfig is an mcp.json as LoadConfig read it.
type LoadedConfig struct {
	// Servers are the entries by config name, their ${VAR} references
	// expanded.
	Servers map[string]ServerConfig
	// Warnings report, sorted, every field an entry sets that the runtime
	// does not honour ("disabled", "envFile", "autoApprove", …): each
	// names the entry and the field, never a value. Such fields are
	// ignored, not refused.
	Warnings []string
}

// ParseConfig is LoadConfig with the process environment (os.LookupEnv),
// without the warnings.
func ParseConfig(data []byte) (map[string]ServerConfig, error) {
	c, err := loadConfig(data, nil, false)
	return c.Servers, err
}

// LoadConfig decodes an mcp.json document as Claude Code, Claude Desktop
// and VS Code write it: servers under "mcpServers" ({"mcpServers": {name:
// entry}}) and/or under "servers" (VS Code's mcp.json; a name under both
// keys is refused). Other top-level keys (VS Code's "inputs", other tools'
// settings) are ignored; fields of an entry that the runtime does not
// honour are ignored and reported in Warnings.
//
// Expansion. In command, each of args, the values of env, url and the
// values of headers (and nowhere else), ${NAME} becomes the value of NAME
// as lookupEnv reports it (nil: os.LookupEnv) and ${NAME:-default} that
// value or, when NAME is not set, default (a set but empty NAME expands
// to empty, as in Claude Code). NAME matches [A-Za-z_][A-Za-z0-9_]*;
// VS Code's ${env:NAME} is ${NAME}. An expanded value is not expanded
// again, a default cannot hold "${", and there is no escape: "$NAME"
// without braces and a lone "$" are literal text. Refused, with an error
// matching ErrConfigInvalid that names the entry and field but never a
// value: a NAME that is not set and has no default (the error names
// NAME), VS Code's ${input:id} (prompted by the editor, which a daemon
// cannot do; the error names the id), and any other "${" (unterminated,
// an invalid NAME, ${config:…}, …). The expanded values are secrets
// (tokens in headers and env): they reach the server and the keyed
// fingerprint (ServerConfig.Fingerprint) and are never recorded, logged or
// put in an error by the runtime.
//
// It also refuses, naming the entry, an entry with neither command nor url
// (or both, a url that is not http(s), an allowRedirectOrigins entry that
// is not an origin, a "type" that contradicts the form, an invalid
// "prefix" (ErrInvalidPrefix), a "cleanup" other than "verified" or
// "direct" or a verified one (the default) on a system without the
// guardian helper (ErrVerifiedUnsupported: the remedy is "cleanup":
// "direct") — such entry errors match ErrConfigInvalid), a name that is empty or longer than
// MaxServerNameBytes, and two names that map to one server id (see
// ServerID), so every name it returns works end to end.
func LoadConfig(data []byte, lookupEnv func(name string) (value string, ok bool)) (LoadedConfig, error) {
	return loadConfig(data, lookupEnv, true)
}

// loadConfig is LoadConfig; warnings are collected only when warn is set
// (FileConfigSource reads the file on every call and has no use for them).
func loadConfig(data []byte, lookup func(string) (string, bool), warn bool) (LoadedConfig, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var doc struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
		Servers    map[string]json.RawMessage `json:"servers"` // VS Code
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return LoadedConfig{}, fmt.Errorf("mcp.json: %w", err)
	}
	raw := doc.MCPServers
	if len(doc.Servers) > 0 {
		raw = make(map[string]json.RawMessage, len(doc.MCPServers)+len(doc.Servers))
		maps.Copy(raw, doc.MCPServers)
		for name, entry := range doc.Servers {
			if _, dup := raw[name]; dup {
				return LoadedConfig{}, fmt.Errorf("mcp.json: server %q is under both \"servers\" and \"mcpServers\" (%w)", name, ErrConfigInvalid)
			}
			raw[name] = entry
		}
	}
	names := slices.Sorted(maps.Keys(raw)) // errors name the same entry every time
	out := LoadedConfig{Servers: make(map[string]ServerConfig, len(raw))}
	for _, name := range names {
		var c ServerConfig
		if err := json.Unmarshal(raw[name], &c); err != nil {
			return LoadedConfig{}, fmt.Errorf("mcp.json: server %q: %w", name, err)
		}
		if err := c.expand(lookup); err != nil {
			return LoadedConfig{}, fmt.Errorf("mcp.json: server %q %w (%w)", name, err, ErrConfigInvalid)
		}
		if err := c.check(); err != nil {
			return LoadedConfig{}, fmt.Errorf("mcp.json: server %q %w (%w)", name, err, ErrConfigInvalid)
		}
		if warn {
			out.Warnings = append(out.Warnings, unknownFields(name, raw[name])...)
		}
		out.Servers[name] = c
	}
	ids := make(map[string]string, len(names))
	for _, name := range names {
		if err := checkName(ids, name); err != nil {
			return LoadedConfig{}, fmt.Errorf("mcp.json: %w", err)
		}
	}
	return out, nil
}

// entryFields are the (lowercase) field names of an entry that the runtime
// honours: ServerConfig's JSON names. encoding/json matches them without
// regard to case, and so does unknownFields.
var entryFields = func() map[string]bool {
	m := make(map[string]bool)
	t := reflect.TypeFor[ServerConfig]()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
			m[strings.ToLower(tag)] = true
		}
	}
	return m
}()

// maxWarnedFieldBytes bounds a field name quoted in a warning.
const maxWarnedFieldBytes = 64

// unknownFields returns a warning for every field of the entry raw that is
// not one of entryFields, sorted. raw already decoded as a ServerConfig,
// so it is an object (or null).
func unknownFields(name string, raw json.RawMessage) []string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if entryFields[strings.ToLower(k)] {
			continue
		}
		if len(k) > maxWarnedFieldBytes {
			k = strings.ToValidUTF8(k[:maxWarnedFieldBytes], "") + "…"
		}
		out = append(out, fmt.Sprintf("mcp.json: server %q: field %q is not honoured (ignored)", name, k))
	}
	return out
}

// expand replaces the ${VAR} references of the expanded fields (command,
// args, env values, url, header values) in place; see LoadConfig. Its
// errors name the field (an env or header key only when it is a valid
// name) and the variable or input id, never a value.
func (c *ServerConfig) expand(lookup func(string) (string, bool)) error {
	var err error
	if c.Command, err = expandValue(c.Command, lookup); err != nil {
		return fmt.Errorf("command: %w", err)
	}
	if c.URL, err = expandValue(c.URL, lookup); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if len(c.Args) > 0 {
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			if args[i], err = expandValue(a, lookup); err != nil {
				return fmt.Errorf("args[%d]: %w", i, err)
			}
		}
		c.Args = args
	}
	if c.Env, err = expandMap(c.Env, lookup, validVarName); err != nil {
		return fmt.Errorf("env %w", err)
	}
	if c.Headers, err = expandMap(c.Headers, lookup, validHeaderName); err != nil {
		return fmt.Errorf("headers %w", err)
	}
	return nil
}

// expandMap is m with every value expanded; an error names the key only
// when nameable says it is a name (else it may be a "Name: secret" line).
func expandMap(m map[string]string, lookup func(string) (string, bool), nameable func(string) bool) (map[string]string, error) {
	if len(m) == 0 {
		return m, nil
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, err := expandValue(m[k], lookup)
		if err != nil {
			if !nameable(k) {
				return nil, fmt.Errorf("(a value): %w", err)
			}
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// maxInputIDBytes bounds the ${input:id} id quoted in an error.
const maxInputIDBytes = 64

// expandValue expands the ${NAME}, ${NAME:-default} and ${env:NAME}
// references of s (see LoadConfig).
func expandValue(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		body, rest, ok := strings.Cut(s[i+2:], "}")
		if !ok {
			return "", errMalformedVar
		}
		s = rest
		if id, ok := strings.CutPrefix(body, "input:"); ok {
			if len(id) > maxInputIDBytes {
				id = strings.ToValidUTF8(id[:maxInputIDBytes], "") + "…"
			}
			return "", fmt.Errorf("uses ${input:%s}: VS Code input variables are prompted by the editor, which a daemon cannot do; "+
				"set an environment variable for serve and write ${NAME}", id)
		}
		body, _ = strings.CutPrefix(body, "env:") // VS Code's form of ${NAME}
		name, def, hasDef := strings.Cut(body, ":-")
		if !validVarName(name) || strings.Contains(def, "${") {
			return "", errMalformedVar
		}
		v, set := lookup(name)
		if !set {
			if !hasDef {
				return "", fmt.Errorf("variable %q is not set and has no default", name)
			}
			v = def
		}
		b.WriteString(v)
	}
}

// errMalformedVar is why a "${" that is no supported reference is refused.
var errMalformedVar = errors.New("has a \"${\" that is not ${NAME} or ${NAME:-default} " +
	"(NAME matching [A-Za-z_][A-Za-z0-9_]*, no \"${\" in a default; VS Code's ${env:NAME} is accepted, its other variables are not)")

// validVarName reports whether name matches [A-Za-z_][A-Za-z0-9_]*.
func validVarName(name string) bool {
	if name == "" || '0' <= name[0] && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Duration is a duration in mcp.json: a Go duration string ("90s", "5m")
// or a number of milliseconds (90000), as configs of other MCP hosts
// write timeouts. It encodes as the string form.
type Duration time.Duration

// UnmarshalJSON reads a duration string or a number of milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var ms int64
	if err := json.Unmarshal(b, &ms); err != nil {
		return errors.New("a duration is a string (\"90s\") or a whole number of milliseconds")
	}
	if ms > int64(MaxCallTimeout/time.Millisecond) || ms < 0 {
		return errors.New("a duration in milliseconds is out of range")
	}
	*d = Duration(time.Duration(ms) * time.Millisecond)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
