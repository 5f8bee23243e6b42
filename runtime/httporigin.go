package runtime

import (
	"errors"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Origins of HTTP entries: the configured endpoint, the origins a redirect
// may go to (allowRedirectOrigins), and how two URLs are compared.

// errEndpoint is why a configured url is refused (config errors keep it as
// their cause; it is our own text).
var errEndpoint = errors.New("has a url that is not an absolute http(s) URL with a host")

// errAllowOrigin is why an allowRedirectOrigins entry is refused.
var errAllowOrigin = errors.New("has an allowRedirectOrigins entry that is not an http(s) origin (scheme://host[:port], nothing else)")

// MaxAllowRedirectOrigins bounds an entry's allowRedirectOrigins.
const MaxAllowRedirectOrigins = 16

// checkAllowOrigins parses an entry's allowRedirectOrigins: each an
// origin alone — http or https, a host, an optional port in 1–65535, no
// user info, path (but "/"), query or fragment — at most
// MaxAllowRedirectOrigins of them.
func checkAllowOrigins(raw []string) ([]*url.URL, error) {
	if len(raw) > MaxAllowRedirectOrigins {
		return nil, errAllowOrigin
	}
	out := make([]*url.URL, 0, len(raw))
	for _, o := range raw {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.Opaque != "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			return nil, errAllowOrigin
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return nil, errAllowOrigin
			}
		}
		out = append(out, &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host)})
	}
	return out, nil
}

// originList is allowRedirectOrigins as fingerprinted: each origin
// normalised (lowercase, explicit port), sorted, without duplicates; nil
// when there are none or they do not parse (check refuses those).
func originList(raw []string) []string {
	us, err := checkAllowOrigins(raw)
	if err != nil || len(us) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(us))
	out := make([]string, 0, len(us))
	for _, u := range us {
		k := u.Scheme + "://" + hostPort(u)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// checkEndpoint parses a configured url: absolute, http or https, a host,
// no user info (credentials go in headers, where the origin rule guards
// them) and no fragment.
func checkEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil, errEndpoint
	}
	return u, nil
}

// origin is a URL's origin as recorded (scheme://host[:port], lowercase).
func origin(u *url.URL) string {
	return u.Scheme + "://" + strings.ToLower(u.Host)
}

// sameOrigin compares scheme, host and port (an explicit default port is
// the same origin as none).
func sameOrigin(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && strings.EqualFold(hostPort(a), hostPort(b))
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}
