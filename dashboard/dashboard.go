// Package dashboard owns the browser dashboard that serve offers on its
// HTTP listener: the page, its script and style sheet (built from
// web/dashboard by `npm run build:dashboard` and embedded here), the
// security headers they are served with, and the small configuration the
// page reads at start (where the bus's NATS WebSocket is, whether it needs
// credentials). The page talks to the bus only, with read-only rights: it
// follows the events (package bus/busclient's replay protocol) and asks
// the projection API (package control) for state. Nothing is fetched from
// elsewhere at run time and no secret is ever in what this package serves:
// credentials, when the bus needs them, are typed into the page and kept
// in its memory only.
//
// With Options.Hosts the page follows host spaces (leaseledger.hosts.<h>.…)
// rather than the bare space, one host at a time, chosen in a selector
// (serve --host-id gives its one host; the collector every mirrored host).
// Guarantees and the tests that check them:
//   - the configuration names the hosts, in order, and nothing secret: TestConfig;
//   - an invalid, duplicate or excess host is refused by New with ErrHost: TestNewInvalidHosts;
//   - the headers (CSP of this origin and the bus WebSocket only) on every response: TestHandler;
//   - the embedded bundle is the build of web/dashboard: TestBundleFresh;
//   - the page follows the host space it is given and shows its live events:
//     TestDashboardHostSpace (cmd/leaseledger, headless Chromium);
//   - the page switches hosts without leaking subscriptions or showing one host's
//     events under another, and shows the fleet strip of a collector:
//     TestDashboardHostSpace, TestDashboardFleet.
package dashboard

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strconv"
)

//go:embed assets
var assets embed.FS

// Asset paths under the handler's root.
const (
	// ConfigPath answers the page's configuration as JSON (Config).
	ConfigPath = "/config.json"
	// assetDir is where the embedded bundle lives, in assets and in URLs.
	assetDir = "/assets/"
)

// Bounds of Options.Hosts.
const (
	// MaxHosts is the most host spaces one page may select among.
	MaxHosts = 1024
	// MaxHostLen is the longest host id (that of events.ValidID).
	MaxHostLen = 128
)

// ErrHost reports an Options.Hosts entry that is not a valid host id
// ([A-Za-z0-9_-]{1,MaxHostLen}, the rule of events.ValidID: it becomes a
// NATS subject token), a duplicate, or more than MaxHosts of them.
var ErrHost = errors.New("dashboard: invalid hosts")

// Options say where the page finds the bus.
type Options struct {
	// WebSocketHost and WebSocketPort are the bus's NATS WebSocket
	// listener (bus.Options.Host and the port it bound); port 0: the bus
	// has no WebSocket and the page says so. An unspecified host (0.0.0.0,
	// ::, "") is replaced by the host the browser used to reach the page.
	WebSocketHost string
	WebSocketPort int
	// CredentialsRequired: the bus refuses anonymous clients, so the page
	// asks for a user and password (kept in the page's memory only).
	CredentialsRequired bool
	// Hosts are the host spaces the bus serves, in the order the page
	// offers them (the first is selected unless the page's URL names
	// another); nil or empty: the bare space of a single host. Each must
	// be a valid host id, with no duplicate.
	Hosts []string
}

// Config is what ConfigPath answers: the page's whole configuration. It
// never holds a credential.
type Config struct {
	// WebSocketURL is the bus's ws:// URL as this browser reaches it, ""
	// when the bus has no WebSocket.
	WebSocketURL string `json:"ws_url"`
	// CredentialsRequired: the page must ask for a user and password.
	CredentialsRequired bool `json:"credentials_required"`
	// Hosts are Options.Hosts; absent: the bare space.
	Hosts []string `json:"hosts,omitempty"`
}

// Handler serves the dashboard: GET or HEAD of "/" (the page), of the
// bundle under /assets/, and of ConfigPath; 404 for any other path, 405
// for other methods. Every response carries the Content-Security-Policy
// (scripts and styles of this origin only, connections to this origin and
// the bus's WebSocket, no frames, no form posts), nosniff, no referrer.
type Handler struct {
	opts Options
	root fs.FS
}

// New returns the dashboard's handler for a bus described by opts; an
// invalid host list is refused with an error wrapping ErrHost.
func New(opts Options) (*Handler, error) {
	if len(opts.Hosts) > MaxHosts {
		return nil, fmt.Errorf("%w: %d hosts, at most %d", ErrHost, len(opts.Hosts), MaxHosts)
	}
	seen := make(map[string]bool, len(opts.Hosts))
	for _, h := range opts.Hosts {
		if !validHost(h) {
			return nil, fmt.Errorf("%w: host %q: want [A-Za-z0-9_-]{1,%d}", ErrHost, h, MaxHostLen)
		}
		if seen[h] {
			return nil, fmt.Errorf("%w: host %q twice", ErrHost, h)
		}
		seen[h] = true
	}
	opts.Hosts = append([]string(nil), opts.Hosts...)
	sub, _ := fs.Sub(assets, "assets") // the directory is embedded: cannot fail
	return &Handler{opts: opts, root: sub}, nil
}

// validHost is the rule of events.ValidID, kept here because this package
// imports none of the ledger's (the page needs host ids as strings only).
func validHost(h string) bool {
	if len(h) == 0 || len(h) > MaxHostLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Config returns the configuration the page gets when it was reached at
// host (the request's Host header, port included or not).
func (h *Handler) Config(host string) Config {
	if h.opts.WebSocketPort == 0 {
		return Config{CredentialsRequired: h.opts.CredentialsRequired, Hosts: h.opts.Hosts}
	}
	wsHost := h.opts.WebSocketHost
	if ip := net.ParseIP(wsHost); wsHost == "" || (ip != nil && ip.IsUnspecified()) {
		wsHost = host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			wsHost = hh
		}
		if wsHost == "" {
			wsHost = "127.0.0.1"
		}
	}
	return Config{
		WebSocketURL:        "ws://" + net.JoinHostPort(trimBrackets(wsHost), strconv.Itoa(h.opts.WebSocketPort)),
		CredentialsRequired: h.opts.CredentialsRequired,
		Hosts:               h.opts.Hosts,
	}
}

func trimBrackets(h string) string {
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}

// ContentSecurityPolicy is the policy sent for a page whose bus WebSocket
// is wsURL ("" when there is none).
func ContentSecurityPolicy(wsURL string) string {
	connect := "'self'"
	if wsURL != "" {
		connect += " " + wsURL
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " + connect +
		"; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := h.Config(r.Host)
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy(cfg.WebSocketURL))
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var name, ctype string
	switch p := r.URL.Path; {
	case p == "/" || p == "/index.html":
		name, ctype = "index.html", "text/html; charset=utf-8"
	case p == ConfigPath:
		hdr.Set("Content-Type", "application/json")
		hdr.Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(cfg)
		return
	case path.Dir(p)+"/" == assetDir && (path.Ext(p) == ".js" || path.Ext(p) == ".css"):
		name = path.Base(p)
		ctype = "text/javascript; charset=utf-8"
		if path.Ext(p) == ".css" {
			ctype = "text/css; charset=utf-8"
		}
	default:
		http.NotFound(w, r)
		return
	}
	data, err := fs.ReadFile(h.root, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	hdr.Set("Content-Type", ctype)
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Length", strconv.Itoa(len(data)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(data)
}
