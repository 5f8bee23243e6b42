package runtime

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/textproto"
	"os"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/leaseledger/events"
)

// MaxConfigBytes bounds the mcp.json a FileConfigSource reads; a larger file
// is refused (ErrConfigInvalid) rather than read into memory.
const MaxConfigBytes = 1 << 20

// MaxServerNameBytes bounds a server's name in the config (the key of its
// "mcpServers" entry): longer names, and empty ones, are refused when the
// config is loaded. The bound keeps a name recordable as lease.acquiring's
// config_name (events.MaxTextLen).
const MaxServerNameBytes = 256

// MaxPrefixBytes bounds an entry's "prefix" (ServerConfig.Prefix).
const MaxPrefixBytes = 64

// DefaultPrefixSeparator ends the default prefix of a server's exposed
// names, "<server>__" (ServerConfig.ExposedPrefix).
const DefaultPrefixSeparator = "__"

// serverIDHashBytes is how many bytes of a name's SHA-256 (as hex) end the
// server id derived from a name that is not an identifier.
const serverIDHashBytes = 4

// ServerConfig is one entry of mcp.json's "mcpServers" object (or of VS
// Code's "servers"; see LoadConfig).
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
	// URL, when set, makes the entry a remote MCP server over Streamable
	// HTTP (http.go): no process is started, Command must be empty. Only
	// http and https URLs with a host are accepted.
	URL string `json:"url,omitempty"`
	// Headers are sent with every request to URL's origin, and never to
	// another origin (a cross-origin redirect is refused unless allowed).
	Headers map[string]string `json:"headers,omitempty"`
	// AllowRedirectOrigins lists origins ("https://other.example:8443":
	// scheme, host, optional port, nothing else; at most
	// MaxAllowRedirectOrigins) a 307 hop of this url entry may go to
	// besides URL's own. Headers are never sent to them.
	AllowRedirectOrigins []string `json:"allowRedirectOrigins,omitempty"`
	// CallTimeout, when set, is this server's budget of one tool call in
	// place of Options.CallTimeout (see DefaultCallTimeout); the caller's
	// own deadline still applies when it is earlier. It is not part of the
	// fingerprint: a lease already running keeps the budget it was
	// acquired with.
	CallTimeout Duration `json:"callTimeout,omitempty"`
	// Type is the entry's transport as users write it: empty, "stdio"
	// (command entries), "http" / "streamable-http" (url entries over
	// Streamable HTTP), or "sse" (a url entry over the legacy HTTP+SSE
	// transport of MCP 2024-11-05, see httpchild.go). Only "sse" is part
	// of the fingerprint (the same url over the other transport is another
	// launch); the other fields decide the rest.
	Type string `json:"type,omitempty"`
	// Prefix, when set, is what a gateway puts before the server's tool
	// and prompt names (ExposedPrefix): "" exposes the server's own names
	// (and resource URIs) unchanged; absent (nil), the gateway's default
	// "<server>__". At most MaxPrefixBytes of printable ASCII without
	// spaces (ErrInvalidPrefix). It is exposure, not launch identity: not
	// part of the fingerprint, so changing it never replaces a lease.
	Prefix *string `json:"prefix,omitempty"`
	// Cleanup is how a command entry's child is started and ended:
	// CleanupVerified ("verified", the default when absent) runs it under
	// the guardian helper, which is its real parent and returns a cleanup
	// receipt; CleanupDirect ("direct") has the host start it itself (no
	// helper, no receipt: its close records only what the host observed,
	// and its activation's verdict is never confirmed, see
	// docs/runtime.md). A verified entry on a system without the helper
	// (VerifiedStdioSupported) is refused, never run direct
	// (ErrVerifiedUnsupported). It is part of the fingerprint when
	// "direct" (it changes what is launched); url entries take none.
	Cleanup string `json:"cleanup,omitempty"`

	// name is the config name the entry was looked up under (set by the
	// manager), recorded as lease.acquiring's config_name when it is not
	// the server id itself. It is not part of the fingerprint.
	name string
}

// ServerID returns the server id events and lease keys use for a server
// named name in the config. Server ids follow events.IDRule
// ([A-Za-z0-9_-]{1,128}: they become NATS subject tokens), config names do
// not ("my.server", "foo bar", "ÆØÅ" are common). The mapping is
// deterministic: a name that is an identifier is its own id; any other name
// becomes its bytes with every byte outside the rule replaced by '_'
// (truncated to leave room), then '-' and the first 8 hex digits of the
// name's SHA-256. Two names of one config that map to one id are refused
// when the config is loaded (ParseConfig, MapConfigSource.Set), so within
// a config the mapping is injective. Empty names, names longer than
// MaxServerNameBytes and names that are not UTF-8 are refused
// (ErrConfigInvalid).
func ServerID(name string) (string, error) {
	if !validServerName(name) {
		return "", &LeaseError{Op: "config", Err: ErrConfigInvalid}
	}
	return serverID(name), nil
}

func validServerName(name string) bool {
	return name != "" && len(name) <= MaxServerNameBytes && utf8.ValidString(name)
}

// serverID is ServerID's mapping, for names already validated.
func serverID(name string) string {
	if events.ValidID(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:serverIDHashBytes])
	b := []byte(name)
	if limit := events.MaxIDLen - len(suffix); len(b) > limit {
		b = b[:limit]
	}
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b) + suffix
}

// ExposedPrefix returns the prefix a gateway puts before the tool and
// prompt names of the server configured under name: the entry's "prefix"
// when it sets one (possibly "": the server's own names), else name
// followed by DefaultPrefixSeparator.
func (c ServerConfig) ExposedPrefix(name string) string {
	if c.Prefix != nil {
		return *c.Prefix
	}
	return name + DefaultPrefixSeparator
}

// ValidPrefix reports whether p may be an entry's prefix: at most
// MaxPrefixBytes bytes of printable ASCII other than space (no
// whitespace, no control character, nothing a client could render
// ambiguously).
func ValidPrefix(p string) bool {
	if len(p) > MaxPrefixBytes {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// configName is the name to record as lease.acquiring's config_name: empty
// when it equals the server id.
func (c ServerConfig) configName(id string) string {
	if c.name == id {
		return ""
	}
	return c.name
}

// FingerprintKeyBytes is the size of the random key each Manager draws for
// its fingerprints (NewManager).
const FingerprintKeyBytes = 32

// Fingerprint is the lowercase hex HMAC-SHA256, under key, of the entry's
// canonical JSON: fixed field order, env as sorted "KEY=VALUE" strings,
// headers as sorted "Key: value" strings, empty fields kept. Under one key,
// two entries that start the same process have the same fingerprint.
//
// The canonical JSON holds secrets (env values, an Authorization header,
// a token in args), and the fingerprint is recorded in the ledger
// (lease.acquiring): an unkeyed hash would let a ledger reader confirm a
// guessed secret offline. A Manager keys its fingerprints with a random
// key drawn when it is created and never recorded, so a fingerprint is
// comparable only with fingerprints of the same manager (which is all the
// lease pinning and the projector compare) and cannot be recomputed from
// the config alone.
func (c ServerConfig) Fingerprint(key []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(c.canonical())
	return hex.EncodeToString(mac.Sum(nil))
}

// fingerprint is cfg's fingerprint under the manager's key. Every call
// looks its entry up and fingerprints it (a changed entry must retire the
// lease pinned to the old one), so the last fingerprint of each config
// name is memoised with a private copy of its entry: equal entries have
// equal canonical JSON, so a hit returns exactly what Fingerprint would
// (TestFingerprintMemoEqualsFingerprint, and under concurrent calls
// TestFingerprintMemoConcurrent), without the encoding and HMAC.
func (m *Manager) fingerprint(cfg ServerConfig) string { return m.fpMemo.get(cfg, m.fpKey) }

// FingerprintMemoResets returns how many times the manager's memo of
// config fingerprints was emptied because it held maxFingerprintMemo
// (1024) config names; each reset costs one full fingerprint per name on
// its next call, so a growing count means more names than the bound.
func (m *Manager) FingerprintMemoResets() int { return m.fpMemo.resetCount() }

// maxFingerprintMemo bounds the memoised fingerprints (one per config
// name); when it is full the memo is emptied (and the reset counted, see
// Manager.FingerprintMemoResets) and refills on use.
const maxFingerprintMemo = 1024

// fingerprintMemo is the last fingerprint of each config name, with the
// entry it was computed from, under one key.
type fingerprintMemo struct {
	mu     sync.Mutex
	key    []byte // the key byName's fingerprints were computed under
	byName map[string]memoFP
	resets int // times byName was emptied at maxFingerprintMemo
}

type memoFP struct {
	cfg ServerConfig // a deep copy: the source may reuse its maps and slices
	fp  string
}

// get returns cfg.Fingerprint(key). A memo holds fingerprints under one
// key: a different key empties it first (a manager's key never changes, so
// this only keeps a hit exact whatever the caller passes).
func (f *fingerprintMemo) get(cfg ServerConfig, key []byte) string {
	f.mu.Lock()
	if e, ok := f.byName[cfg.name]; ok && bytes.Equal(f.key, key) && e.cfg.equal(cfg) {
		f.mu.Unlock()
		return e.fp
	}
	f.mu.Unlock()
	fp := cfg.Fingerprint(key)
	f.mu.Lock()
	switch {
	case !bytes.Equal(f.key, key):
		f.key = bytes.Clone(key)
		f.byName = make(map[string]memoFP)
	case f.byName == nil:
		f.byName = make(map[string]memoFP)
	case len(f.byName) >= maxFingerprintMemo:
		if _, ok := f.byName[cfg.name]; !ok { // a changed entry replaces its own
			f.byName = make(map[string]memoFP)
			f.resets++
		}
	}
	f.byName[cfg.name] = memoFP{cfg: cfg.clone(), fp: fp}
	f.mu.Unlock()
	return fp
}

func (f *fingerprintMemo) resetCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resets
}

// clone is c with its own copies of every map and slice.
func (c ServerConfig) clone() ServerConfig {
	c.Args = slices.Clone(c.Args)
	c.Env = maps.Clone(c.Env)
	c.Headers = maps.Clone(c.Headers)
	c.AllowRedirectOrigins = slices.Clone(c.AllowRedirectOrigins)
	if c.Prefix != nil {
		p := *c.Prefix
		c.Prefix = &p
	}
	return c
}

// equal reports whether c and o are the same entry, field by field (nil
// and empty alike, as canonical encodes them). TestServerConfigEqualCoversFields
// fails when a field is added that equal and clone do not handle.
func (c ServerConfig) equal(o ServerConfig) bool {
	return c.name == o.name && c.Command == o.Command && c.Cwd == o.Cwd && c.Shared == o.Shared &&
		c.OneShot == o.OneShot && c.URL == o.URL && c.Type == o.Type && c.CallTimeout == o.CallTimeout &&
		slices.Equal(c.Args, o.Args) && maps.Equal(c.Env, o.Env) && maps.Equal(c.Headers, o.Headers) &&
		slices.Equal(c.AllowRedirectOrigins, o.AllowRedirectOrigins) && equalPrefix(c.Prefix, o.Prefix) &&
		c.Cleanup == o.Cleanup
}

// equalPrefix reports whether two prefixes are the same: both absent, or
// both set to the same string.
func equalPrefix(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
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
		URL     string   `json:"url,omitempty"`      // HTTP entries only: stdio fingerprints unchanged
		Headers []string `json:"headers,omitempty"`
		Allow   []string `json:"allow_redirect_origins,omitempty"` // normalised, sorted
		SSE     bool     `json:"sse,omitempty"`                    // only when set: other fingerprints unchanged
		Direct  bool     `json:"direct,omitempty"`                 // only when set: verified fingerprints unchanged
	}{c.Command, args, env, c.Cwd, c.Shared, c.OneShot, c.URL, c.headerList(), originList(c.AllowRedirectOrigins), c.isSSE(), c.isDirect()})
	return b
}

// headerList is Headers as sorted "Key: value" strings (keys in canonical
// form), nil when there are none.
func (c ServerConfig) headerList() []string {
	if len(c.Headers) == 0 {
		return nil
	}
	out := make([]string, 0, len(c.Headers))
	for k, v := range c.Headers {
		out = append(out, textproto.CanonicalMIMEHeaderKey(k)+": "+v)
	}
	sort.Strings(out)
	return out
}

// isHTTP reports whether the entry is a remote server (over Streamable
// HTTP, or the legacy HTTP+SSE transport when isSSE).
func (c ServerConfig) isHTTP() bool { return c.URL != "" }

// isSSE reports whether the entry is a remote server over the legacy
// HTTP+SSE transport ("type": "sse").
func (c ServerConfig) isSSE() bool { return c.URL != "" && c.Type == "sse" }

// isDirect reports whether the entry is a command the host starts itself
// ("cleanup": "direct"), not under the guardian.
func (c ServerConfig) isDirect() bool { return c.URL == "" && c.Cleanup == CleanupDirect }

// An entry's "cleanup" values (ServerConfig.Cleanup).
const (
	// CleanupVerified: the child runs under the guardian helper, which
	// returns the cleanup receipt that can confirm its release. The
	// default when "cleanup" is absent.
	CleanupVerified = "verified"
	// CleanupDirect: the host starts the child itself, without helper or
	// receipt; its cleanup is recorded as the host observed it and is
	// never confirmed (the activation's verdict is "unverified").
	CleanupDirect = "direct"
)

// VerifiedStdioSupported reports whether this system has the guardian
// helper, so verified entries can run (see verifiedSupportedOn, the one
// place the supported systems are listed).
func VerifiedStdioSupported() bool { return verifiedSupportedOn(goruntime.GOOS) }

// verifiedSupportedOn reports whether the guardian helper exists for goos
// (a GOOS value): Linux and macOS. Everywhere else only "direct" entries
// run.
func verifiedSupportedOn(goos string) bool { return goos == "linux" || goos == "darwin" }

// ErrVerifiedUnsupported: a command entry asks for verified cleanup (or
// leaves "cleanup" absent, whose default is verified) on a system without
// the guardian helper (VerifiedStdioSupported). It is refused when the
// config is loaded or looked up, never run direct instead: the remedy is
// "cleanup": "direct" on the entry. The error also matches
// ErrConfigInvalid and names the entry.
var ErrVerifiedUnsupported = errors.New(`verified stdio (the guardian helper) is not available on this system; ` +
	`set "cleanup": "direct" on the entry to run it unverified`)

// checkCleanup refuses an entry's "cleanup" that is not one of the values,
// one on a url entry, and a verified command entry on goos when it has no
// guardian helper.
func (c ServerConfig) checkCleanup(goos string) error {
	switch c.Cleanup {
	case "", CleanupVerified, CleanupDirect:
	default:
		return errors.New(`has a cleanup other than "verified" or "direct"`)
	}
	if c.URL != "" {
		if c.Cleanup != "" {
			return errors.New("has a url and a cleanup (cleanup applies to command entries)")
		}
		return nil
	}
	if c.Cleanup != CleanupDirect && !verifiedSupportedOn(goos) {
		return fmt.Errorf("has cleanup \"verified\"%s on %s: %w", map[bool]string{true: " (the default)"}[c.Cleanup == ""], goos, ErrVerifiedUnsupported)
	}
	return nil
}

// check refuses an entry that cannot start: neither command nor url, both,
// a type that contradicts the form, an invalid prefix or cleanup (or a
// verified one on a system without the helper, ErrVerifiedUnsupported), or
// a url that is not an absolute http(s) URL with a host (checkEndpoint).
func (c ServerConfig) check() error {
	if err := c.checkCleanup(goruntime.GOOS); err != nil {
		return err
	}
	switch {
	case c.Prefix != nil && !ValidPrefix(*c.Prefix):
		return fmt.Errorf("has an invalid prefix: %w", ErrInvalidPrefix)
	case c.CallTimeout < 0 || time.Duration(c.CallTimeout) > MaxCallTimeout:
		return errors.New("has a callTimeout that is negative or over MaxCallTimeout")
	case c.Command == "" && c.URL == "":
		return errors.New("has neither command nor url")
	case c.Command != "" && c.URL != "":
		return errors.New("has both command and url")
	case c.URL == "":
		if c.Type != "" && c.Type != "stdio" {
			return errors.New("has a command but a type other than stdio")
		}
		if len(c.AllowRedirectOrigins) > 0 {
			return errors.New("has allowRedirectOrigins but no url")
		}
		return nil
	}
	switch c.Type {
	case "", "http", "streamable-http", "streamableHttp", "sse":
	default:
		return errors.New("has a url but a type other than http or sse")
	}
	if _, err := checkEndpoint(c.URL); err != nil {
		return err
	}
	if _, err := checkAllowOrigins(c.AllowRedirectOrigins); err != nil {
		return err
	}
	return checkHeaders(c.Headers)
}

// reservedHeaders are the header names (canonical form) a url entry's
// headers may not set: the transport's own (the MCP session and protocol
// version, the body's framing and type, the stream's resumption point)
// and the connection's (hop-by-hop). Setting one would break the protocol
// or the connection, not configure the server.
var reservedHeaders = map[string]bool{
	"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Last-Event-Id": true,
	"Content-Type": true, "Content-Length": true, "Accept": true, "Host": true,
	"Transfer-Encoding": true, "Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Upgrade": true,
}

// checkHeaders refuses headers that cannot be sent as configured: an
// invalid name (RFC 9110 token), two names equal but for case (which one
// is sent would depend on map order), a reserved name, or a value with a
// control character other than tab (the request would fail at send time,
// every time). Errors name a valid header name, never a value, and never
// an invalid name (it may be a whole "Name: secret" line).
func checkHeaders(h map[string]string) error {
	seen := make(map[string]bool, len(h))
	for k, v := range h {
		if !validHeaderName(k) {
			return errors.New("has an invalid header name")
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if seen[ck] {
			return fmt.Errorf("has header %q twice (names differing only in case)", ck)
		}
		seen[ck] = true
		if reservedHeaders[ck] {
			return fmt.Errorf("sets header %q, which the transport owns", ck)
		}
		if !validHeaderValue(v) {
			return fmt.Errorf("has an invalid value for header %q", ck)
		}
	}
	return nil
}

// validHeaderValue reports whether v can be sent as a header field value:
// no control character but horizontal tab (what net/http checks at send
// time; bytes 0x80 and above are obs-text and allowed).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
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

// checkName refuses a name that is not usable or whose server id is taken
// by another name in ids (id → name), and records it.
func checkName(ids map[string]string, name string) error {
	if !validServerName(name) {
		return fmt.Errorf("server name %q is empty, not UTF-8 or longer than MaxServerNameBytes=%d", name, MaxServerNameBytes)
	}
	id := serverID(name)
	if other, taken := ids[id]; taken && other != name {
		return fmt.Errorf("servers %q and %q map to one server id %q", other, name, id)
	}
	ids[id] = name
	return nil
}

// validHeaderName reports whether k is an HTTP token (RFC 9110 §5.1).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
