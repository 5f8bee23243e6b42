package runtime

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// envOf is a lookup over m, for LoadConfig and FileConfigSource: the tests
// never touch the process environment.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// TestExpandConfig: ${NAME}, ${NAME:-default} and ${env:NAME} expand in
// command, args, env values, url and header values, and nowhere else;
// an expanded value is not expanded again; "$NAME" and "$$" are literal.
func TestExpandConfig(t *testing.T) {
	lookup := envOf(map[string]string{"TOKEN": "tok-${NESTED}", "BIN": "/opt/bin", "EMPTY": "", "HOST": "mcp.example"})
	doc := `{"mcpServers": {
		"local": {"command": "${BIN}/srv", "args": ["--token=${TOKEN}", "${MISSING:-dflt}", "$TOKEN", "$$", "${EMPTY:-x}", "${env:BIN}"],
			"env": {"API_KEY": "${TOKEN}", "PLAIN": "p", "${TOKEN}": "key"}, "cwd": "${BIN}"},
		"remote": {"type": "http", "url": "https://${HOST}/mcp?k=${TOKEN}",
			"headers": {"Authorization": "Bearer ${TOKEN}", "X-Default": "${NOPE:-}"}}
	}}`
	cfg, err := LoadConfig([]byte(doc), lookup)
	if err != nil {
		t.Fatal(err)
	}
	l, r := cfg.Servers["local"], cfg.Servers["remote"]
	if l.Command != "/opt/bin/srv" {
		t.Errorf("command %q", l.Command)
	}
	if want := []string{"--token=tok-${NESTED}", "dflt", "$TOKEN", "$$", "", "/opt/bin"}; !slices.Equal(l.Args, want) {
		t.Errorf("args %q, want %q", l.Args, want)
	}
	if l.Env["API_KEY"] != "tok-${NESTED}" || l.Env["PLAIN"] != "p" || l.Env["${TOKEN}"] != "key" {
		t.Errorf("env %q (keys are not expanded)", l.Env)
	}
	if l.Cwd != "${BIN}" {
		t.Errorf("cwd %q expanded", l.Cwd)
	}
	if r.URL != "https://mcp.example/mcp?k=tok-${NESTED}" || r.Headers["Authorization"] != "Bearer tok-${NESTED}" || r.Headers["X-Default"] != "" {
		t.Errorf("remote %+v", r)
	}
	// ParseConfig expands too (from the process environment) and refuses
	// a malformed reference.
	all, err := ParseConfig([]byte(`{"mcpServers":{"x":{"command":"a$b","args":["${}x"]}}}`))
	if err == nil {
		t.Fatalf("a malformed reference loaded: %+v", all)
	}
}

// TestExpandConfigErrors: an unset variable without default, VS Code's
// ${input:…} and a malformed "${" are load errors matching ErrConfigInvalid
// that name the entry and the variable, input id or field, and never a
// value — neither the expanded values of other references nor the text of
// the malformed one.
func TestExpandConfigErrors(t *testing.T) {
	const secret = "s3cr3t-value"
	lookup := envOf(map[string]string{"TOKEN": secret, "NL": "a\r\nb: " + secret})
	for _, c := range []struct {
		doc  string
		want []string
	}{
		{`{"mcpServers":{"gh":{"command":"srv","args":["${TOKEN}","${UNSET}"]}}}`, []string{`"gh"`, `args[1]`, `"UNSET"`, "not set"}},
		{`{"mcpServers":{"gh":{"command":"srv","env":{"K":"${TOKEN}${UNSET}"}}}}`, []string{`"gh"`, `env "K"`, `"UNSET"`}},
		{`{"mcpServers":{"gh":{"url":"https://h/${UNSET}"}}}`, []string{`"gh"`, "url", `"UNSET"`}},
		{`{"mcpServers":{"gh":{"command":"${UNSET}"}}}`, []string{`"gh"`, "command", `"UNSET"`}},
		{`{"servers":{"gh":{"type":"http","url":"https://h/mcp","headers":{"Authorization":"Bearer ${input:gh-token}"}}}}`,
			[]string{`"gh"`, `headers "Authorization"`, "${input:gh-token}", "daemon"}},
		{`{"mcpServers":{"gh":{"command":"srv","env":{"Bad Key=` + secret + `":"${UNSET}"}}}}`, []string{`"gh"`, "env (a value)", `"UNSET"`}},
		{`{"mcpServers":{"gh":{"command":"srv","args":["${` + secret + `"]}}}`, []string{`"gh"`, "args[0]", "not ${NAME}"}},
		{`{"mcpServers":{"gh":{"command":"srv","args":["${` + secret + `-x}"]}}}`, []string{`"gh"`, "args[0]", "not ${NAME}"}},
		{`{"mcpServers":{"gh":{"command":"srv","args":["${}"]}}}`, []string{`"gh"`, "args[0]"}},
		{`{"mcpServers":{"gh":{"command":"srv","args":["${1A}"]}}}`, []string{`"gh"`, "args[0]"}},
		{`{"mcpServers":{"gh":{"command":"srv","args":["${A:-${TOKEN}}"]}}}`, []string{`"gh"`, "args[0]"}},
		{`{"mcpServers":{"gh":{"command":"srv","args":["${config:x}"]}}}`, []string{`"gh"`, "args[0]"}},
		{`{"mcpServers":{"gh":{"url":"https://h/mcp","headers":{"X":"${NL}"}}}}`, []string{`"gh"`, `header "X"`}},
	} {
		_, err := LoadConfig([]byte(c.doc), lookup)
		if !errors.Is(err, ErrConfigInvalid) {
			t.Errorf("%s: %v, want ErrConfigInvalid", c.doc, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error shows a value: %v", c.doc, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %s", c.doc, err, w)
			}
		}
	}
}

// TestVSCodeShape: VS Code's mcp.json ("servers", "type", "inputs") loads
// like "mcpServers"; both keys merge, a name under both is refused; the
// legacy "sse" type is a url entry over HTTP+SSE.
func TestVSCodeShape(t *testing.T) {
	doc := `{"inputs": [{"type": "promptString", "id": "unused", "password": true}],
		"servers": {
			"memory": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"K": "${env:HOME_DIR}"}},
			"github": {"type": "http", "url": "https://api.example/mcp/", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}}
		},
		"mcpServers": {"other": {"command": "srv"}}}`
	cfg, err := LoadConfig([]byte(doc), envOf(map[string]string{"HOME_DIR": "/home/u", "GH_TOKEN": "t"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(cfg.Servers)); !slices.Equal(got, []string{"github", "memory", "other"}) {
		t.Fatalf("servers %v", got)
	}
	if m := cfg.Servers["memory"]; m.isHTTP() || m.Env["K"] != "/home/u" || m.Type != "stdio" {
		t.Errorf("memory %+v", m)
	}
	if g := cfg.Servers["github"]; !g.isHTTP() || g.Headers["Authorization"] != "Bearer t" {
		t.Errorf("github %+v", g)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings %q", cfg.Warnings)
	}

	_, err = ParseConfig([]byte(`{"servers":{"a":{"command":"x"}},"mcpServers":{"a":{"command":"y"}}}`))
	if !errors.Is(err, ErrConfigInvalid) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("a name under both keys: %v", err)
	}
	// The legacy "sse" type is a url entry over HTTP+SSE; with a command
	// it contradicts the form.
	all, err := ParseConfig([]byte(`{"servers":{"legacy":{"type":"sse","url":"https://h/sse","headers":{"A":"b"}}}}`))
	if err != nil || !all["legacy"].isSSE() || !all["legacy"].isHTTP() {
		t.Errorf("sse entry: %+v %v", all, err)
	}
	_, err = ParseConfig([]byte(`{"servers":{"legacy":{"type":"sse","command":"x"}}}`))
	if !errors.Is(err, ErrConfigInvalid) || !strings.Contains(err.Error(), `"legacy"`) {
		t.Errorf("sse with a command: %v", err)
	}
}

// TestConfigWarnings: fields an entry sets that the runtime does not
// honour are reported by LoadConfig, entry and field names only, sorted;
// honoured fields (in any case, as encoding/json matches them) are not.
func TestConfigWarnings(t *testing.T) {
	doc := `{"$schema": "x", "globalShortcut": "", "mcpServers": {
		"b": {"command": "srv", "disabled": true, "autoApprove": ["x"], "envFile": "${workspaceFolder}/.env"},
		"a": {"Command": "srv", "Args": [], "env": {}, "cwd": "/", "shared": true, "oneShot": true, "callTimeout": "1s", "type": "stdio"},
		"c": {"url": "https://h/mcp", "headers": {}, "allowRedirectOrigins": ["https://o.example"], "oauth": {"secret": "no"}}
	}}`
	cfg, err := LoadConfig([]byte(doc), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`mcp.json: server "b": field "autoApprove" is not honoured (ignored)`,
		`mcp.json: server "b": field "disabled" is not honoured (ignored)`,
		`mcp.json: server "b": field "envFile" is not honoured (ignored)`,
		`mcp.json: server "c": field "oauth" is not honoured (ignored)`,
	}
	if !slices.Equal(cfg.Warnings, want) {
		t.Errorf("warnings\n%q\nwant\n%q", cfg.Warnings, want)
	}
	for _, w := range cfg.Warnings {
		if strings.Contains(w, "no") && strings.Contains(w, "secret") {
			t.Errorf("a warning shows a value: %q", w)
		}
	}
	long := strings.Repeat("f", 200)
	cfg, err = LoadConfig([]byte(`{"mcpServers":{"x":{"command":"c",`+strconv.Quote(long)+`:1}}}`), nil)
	if err != nil || len(cfg.Warnings) != 1 || len(cfg.Warnings[0]) > 150 {
		t.Errorf("long field name: %q %v", cfg.Warnings, err)
	}
}
