package dashboard_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/dashboard"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/internal/testproc"
	"github.com/leaseledger/leaseledger/projector"
)

func TestMain(m *testing.M) { testproc.Main(m) }

// newHandler is dashboard.New for options the test knows to be valid.
func newHandler(t testing.TB, opts dashboard.Options) *dashboard.Handler {
	t.Helper()
	h, err := dashboard.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// repoRoot is where package.json and node_modules are.
const repoRoot = ".."

func get(t *testing.T, h http.Handler, method, target, host string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if host != "" {
		r.Host = host
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestHandler: the page, the bundle and the configuration are served with
// the CSP (connections only to this origin and the bus's WebSocket), other
// paths are 404 and other methods 405, all with the same headers.
func TestHandler(t *testing.T) {
	h := newHandler(t, dashboard.Options{WebSocketHost: "127.0.0.1", WebSocketPort: 4249, Hosts: []string{"h1"}})
	for _, c := range []struct {
		method, path string
		code         int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/assets/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/assets/app.css", 200, "text/css; charset=utf-8"},
		{"GET", "/config.json", 200, "application/json"},
		{"GET", "/assets/index.html", 404, ""},
		{"GET", "/assets/../dashboard.go", 404, ""},
		{"GET", "/mcp", 404, ""},
		{"POST", "/", 405, ""},
	} {
		w := get(t, h, c.method, c.path, "")
		if w.Code != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, w.Code, c.code)
		}
		if c.ctype != "" && w.Header().Get("Content-Type") != c.ctype {
			t.Errorf("%s %s: Content-Type %q", c.method, c.path, w.Header().Get("Content-Type"))
		}
		csp := w.Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self';") ||
			!strings.Contains(csp, "connect-src 'self' ws://127.0.0.1:4249;") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s %s: CSP %q", c.method, c.path, csp)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: no nosniff", c.method, c.path)
		}
		if c.method == "HEAD" && w.Body.Len() != 0 {
			t.Errorf("HEAD %s has a body", c.path)
		}
	}
}

// TestConfig: the page learns the WebSocket URL (an unspecified bus host
// becomes the host the browser used), whether to ask for credentials and
// the host spaces in order (none: the field is absent, the bare space),
// never a credential.
func TestConfig(t *testing.T) {
	for _, c := range []struct {
		opts dashboard.Options
		host string
		want dashboard.Config
	}{
		{dashboard.Options{WebSocketHost: "127.0.0.1", WebSocketPort: 4249}, "localhost:8848", dashboard.Config{WebSocketURL: "ws://127.0.0.1:4249"}},
		{dashboard.Options{WebSocketHost: "0.0.0.0", WebSocketPort: 4249, CredentialsRequired: true}, "dash.example:8848", dashboard.Config{WebSocketURL: "ws://dash.example:4249", CredentialsRequired: true}},
		{dashboard.Options{WebSocketHost: "::", WebSocketPort: 4249}, "[::1]:8848", dashboard.Config{WebSocketURL: "ws://[::1]:4249"}},
		{dashboard.Options{}, "localhost:8848", dashboard.Config{}},
		{dashboard.Options{WebSocketHost: "127.0.0.1", WebSocketPort: 4249, Hosts: []string{}}, "localhost:8848", dashboard.Config{WebSocketURL: "ws://127.0.0.1:4249"}},
		{dashboard.Options{WebSocketHost: "127.0.0.1", WebSocketPort: 4249, Hosts: []string{"h2", "h1", "host_3-x"}}, "localhost:8848",
			dashboard.Config{WebSocketURL: "ws://127.0.0.1:4249", Hosts: []string{"h2", "h1", "host_3-x"}}},
		{dashboard.Options{Hosts: []string{"h1"}}, "localhost:8848", dashboard.Config{Hosts: []string{"h1"}}},
	} {
		w := get(t, newHandler(t, c.opts), "GET", dashboard.ConfigPath, c.host)
		var got dashboard.Config
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v at %s: %s (%v), want %+v", c.opts, c.host, w.Body, err, c.want)
		}
		var fields map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &fields)
		want := 2
		if len(c.want.Hosts) > 0 {
			want = 3
		}
		if len(fields) != want {
			t.Errorf("config has fields %v, want ws_url, credentials_required and hosts (when there are hosts) only", fields)
		}
	}
	// The handler keeps its own copy of the hosts.
	hosts := []string{"h1", "h2"}
	h := newHandler(t, dashboard.Options{Hosts: hosts})
	hosts[0] = "changed"
	if got := h.Config("localhost").Hosts; !reflect.DeepEqual(got, []string{"h1", "h2"}) {
		t.Errorf("hosts after the caller's slice changed: %v", got)
	}
}

// TestNewInvalidHosts: New refuses, with ErrHost, a host that could not
// be one NATS subject token (the rule of events.ValidID, which the check
// agrees with), a duplicate, and more than MaxHosts hosts.
func TestNewInvalidHosts(t *testing.T) {
	long := strings.Repeat("h", dashboard.MaxHostLen)
	for _, hosts := range [][]string{
		{""}, {"h.1"}, {"*"}, {">"}, {"h 1"}, {"h1", "h1"}, {"h1", "h/2"}, {"é"}, {long + "h"}, {"h1\x00"}, {"h1."},
	} {
		_, err := dashboard.New(dashboard.Options{Hosts: hosts})
		if !errors.Is(err, dashboard.ErrHost) {
			t.Errorf("hosts %q: %v, want ErrHost", hosts, err)
		}
	}
	many := make([]string, dashboard.MaxHosts+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d", i)
	}
	if _, err := dashboard.New(dashboard.Options{Hosts: many}); !errors.Is(err, dashboard.ErrHost) {
		t.Errorf("%d hosts: %v, want ErrHost", len(many), err)
	}
	if _, err := dashboard.New(dashboard.Options{Hosts: many[:dashboard.MaxHosts]}); err != nil {
		t.Errorf("%d hosts: %v", dashboard.MaxHosts, err)
	}
	// The local rule is events.ValidID's.
	for _, h := range []string{"a", "A-z_9", long, long + "h", "", "a.b", "a*", "a>", "ü", "a b", "a\tb", "-", "_"} {
		_, err := dashboard.New(dashboard.Options{Hosts: []string{h}})
		if (err == nil) != events.ValidID(h) {
			t.Errorf("host %q: New says %v, events.ValidID %v", h, err, events.ValidID(h))
		}
	}
}

// TestNoSecretOrRemoteFetch: the embedded page and bundle load nothing
// from another origin and carry no credential-looking text.
func TestNoSecretOrRemoteFetch(t *testing.T) {
	h := newHandler(t, dashboard.Options{WebSocketPort: 1})
	page := get(t, h, "GET", "/", "").Body.String()
	for _, bad := range []string{"http://", "https://", "<script>", "style="} {
		if strings.Contains(page, bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	for _, p := range []string{"/assets/app.js", "/assets/app.css"} {
		body := get(t, h, "GET", p, "").Body.String()
		for _, bad := range []string{"llt_", "password=", "@import url(http", "fetch(\"http"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
	}
}

// TestBundleFresh rebuilds the bundle with the pinned esbuild (`npm run
// build:dashboard` into a temporary directory) and fails when the
// committed one differs: edit web/dashboard, then run the script.
func TestBundleFresh(t *testing.T) {
	esbuild := filepath.Join(repoRoot, "node_modules", ".bin", "esbuild")
	if _, err := os.Stat(esbuild); err != nil {
		if os.Getenv("LEASELEDGER_REQUIRE_CHROMIUM") != "" {
			t.Fatalf("esbuild not installed (npm ci): %v", err)
		}
		t.Skipf("esbuild not installed (npm ci): %v", err)
	}
	out := t.TempDir()
	cmd := exec.Command("npm", "run", "--silent", "build:dashboard")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "DASHBOARD_OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm run build:dashboard: %v\n%s", err, b)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, _ := os.ReadDir("assets")
	if len(entries) != len(committed) {
		t.Errorf("the build made %d files, dashboard/assets holds %d", len(entries), len(committed))
	}
	for _, e := range entries {
		want, _ := os.ReadFile(filepath.Join(out, e.Name()))
		got, err := os.ReadFile(filepath.Join("assets", e.Name()))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("dashboard/assets/%s is stale (%d bytes, a fresh build has %d): run `npm run build:dashboard`", e.Name(), len(got), len(want))
		}
	}
}

// TestBundleReadsActivity: the page reads what the projection API answers
// of the MCP traffic beside calls under the names the Go types give them — an
// activation report's relays, subscriptions (their end reasons, open,
// unmatched), list changes and request handles by method, a lease row's
// log level, each verdict's counter — so a renamed field fails here rather
// than vanish from the page. (control's TestRepliesValidate checks the replies carry them.)
func TestBundleReadsActivity(t *testing.T) {
	rec := httptest.NewRecorder()
	newHandler(t, dashboard.Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/assets/app.js", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /assets/app.js: %d", rec.Code)
	}
	bundle := rec.Body.String()
	name := func(v any, field string) string {
		f, ok := reflect.TypeOf(v).FieldByName(field)
		if !ok {
			t.Fatalf("%T has no field %s", v, field)
		}
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return n
	}
	var want []string
	for _, f := range []string{"Relays", "Subscriptions", "ListChanges", "RequestMethods"} {
		want = append(want, name(projector.ActivationReport{}, f))
	}
	for _, f := range []string{"Started", "Unsubscribed", "SessionEnded", "LeaseEnded", "Open", "Unmatched"} {
		want = append(want, name(projector.SubscriptionCounts{}, f))
	}
	for _, f := range []string{"Registered", "OK", "Error", "Timeout", "Cancelled"} {
		want = append(want, name(projector.RequestCounts{}, f))
	}
	want = append(want, name(projector.Lease{}, "LogLevel"))
	// Every verdict the audit summary counts has its counter on the page
	// (an unverified direct child is counted apart, not as a failure).
	for _, v := range []string{projector.ResultConfirmed, projector.ResultUnverified, projector.ResultUnconfirmed, projector.ResultNeverStarted} {
		want = append(want, `"`+v+`"`)
	}
	for _, n := range want {
		if !strings.Contains(bundle, n) {
			t.Errorf("the bundle never reads %q", n)
		}
	}
}

// ExampleNew serves the dashboard beside another handler, as serve does
// beside its MCP endpoint.
func ExampleNew() {
	h, err := dashboard.New(dashboard.Options{WebSocketHost: "127.0.0.1", WebSocketPort: 4249})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	res, err := http.Get(srv.URL + dashboard.ConfigPath)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	fmt.Print(string(b))
	fmt.Println(res.Header.Get("Content-Security-Policy"))
	// Output:
	// {"ws_url":"ws://127.0.0.1:4249","credentials_required":false}
	// default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' ws://127.0.0.1:4249; base-uri 'none'; form-action 'none'; frame-ancestors 'none'
}

// ExampleNew_hosts is the dashboard of a collector's fleet bus: the page
// offers a selector of the host spaces, the first selected.
func ExampleNew_hosts() {
	h, err := dashboard.New(dashboard.Options{WebSocketHost: "127.0.0.1", WebSocketPort: 4250, Hosts: []string{"h1", "h2"}})
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(h.Config("localhost:8849"))
	fmt.Println(string(b))
	_, err = dashboard.New(dashboard.Options{Hosts: []string{"h1", "leaseledger.>"}})
	fmt.Println(errors.Is(err, dashboard.ErrHost))
	// Output:
	// {"ws_url":"ws://127.0.0.1:4250","credentials_required":false,"hosts":["h1","h2"]}
	// true
}
