package gateway

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/leaseledger/leaseledger/runtime"
)

// Naming: what an MCP client sees of the configured servers.
const (
	// ToolSeparator joins a server name and a tool name: a tool is exposed
	// as <server>__<tool>. Server names never contain it and never end with
	// '_', so the first occurrence always separates the two.
	ToolSeparator = "__"
	// URIScheme prefixes every resource URI and template the gateway
	// lists: leaseledger://<server>/<original uri>, the original appended
	// verbatim so templates still expand.
	URIScheme = "leaseledger://"
	// MaxServerNameLen bounds an exposed server name, so an exposed tool
	// name stays short enough for clients (the server's own tool name
	// follows it).
	MaxServerNameLen = 64
)

// ValidServerName reports whether name may be exposed by the gateway:
// 1 to MaxServerNameLen bytes of [A-Za-z0-9_.-] (URI-safe, so it can be a
// URI authority), without ToolSeparator and not ending with '_', and
// accepted by the runtime as a config name.
func ValidServerName(name string) bool {
	if name == "" || len(name) > MaxServerNameLen || strings.Contains(name, ToolSeparator) || strings.HasSuffix(name, "_") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	_, err := runtime.ServerID(name)
	return err == nil
}

// ToolName is the name the gateway lists server's tool under by default
// (DefaultPrefix).
func ToolName(server, tool string) string { return server + ToolSeparator + tool }

// DefaultPrefix is the prefix of a server's tool and prompt names when its
// config entry sets none: <server>__.
func DefaultPrefix(server string) string { return server + ToolSeparator }

// SplitToolName splits an exposed tool name at the first ToolSeparator.
func SplitToolName(name string) (server, tool string, ok bool) {
	server, tool, ok = strings.Cut(name, ToolSeparator)
	return server, tool, ok && server != "" && tool != ""
}

// ResourceURI is the URI (or template) the gateway lists server's
// resource uri under.
func ResourceURI(server, uri string) string { return URIScheme + server + "/" + uri }

// SplitResourceURI splits a namespaced URI into the server and the
// server's own URI.
func SplitResourceURI(uri string) (server, original string, ok bool) {
	rest, ok := strings.CutPrefix(uri, URIScheme)
	if !ok {
		return "", "", false
	}
	server, original, ok = strings.Cut(rest, "/")
	return server, original, ok && server != "" && original != ""
}

// pageCursor is a gateway list cursor: which server the next page comes
// from, and that server's own cursor. It is opaque to clients.
type pageCursor struct {
	Server int    `json:"s"`
	Cursor string `json:"c,omitempty"`
	Gen    uint64 `json:"g,omitempty"` // the server list's generation (serverList.gen)
}

// maxGatewayCursorBytes bounds a cursor a client sends back: the server's
// cursor (runtime.MaxCursorBytes) after JSON and base64 encoding.
const maxGatewayCursorBytes = 2*runtime.MaxCursorBytes + 64

func encodeCursor(c pageCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor decodes a client's cursor of the server list of generation
// gen (with that many servers); "" is the first page.
func decodeCursor(s string, servers int, gen uint64) (pageCursor, bool) {
	if s == "" {
		return pageCursor{}, true
	}
	if len(s) > maxGatewayCursorBytes {
		return pageCursor{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return pageCursor{}, false
	}
	var c pageCursor
	if json.Unmarshal(b, &c) != nil || c.Server < 0 || c.Server >= servers || c.Gen != gen || len(c.Cursor) > runtime.MaxCursorBytes {
		return pageCursor{}, false
	}
	return c, true
}
