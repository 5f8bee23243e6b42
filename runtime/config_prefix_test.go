package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestConfigPrefix: an entry's "prefix" is read as set (absent, "", or a
// string), ExposedPrefix returns the effective one, a prefix is exposure
// and not launch identity (the fingerprint ignores it, so changing it
// never replaces a lease), "prefix" is an honoured field (no warning), and
// an invalid prefix is refused naming the entry, never the prefix.
func TestConfigPrefix(t *testing.T) {
	doc := `{"mcpServers": {
		"plain": {"command": "srv"},
		"bare": {"command": "srv", "prefix": ""},
		"mine": {"url": "https://h/mcp", "prefix": "m."}
	}}`
	cfg, err := LoadConfig([]byte(doc), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings for an honoured field: %q", cfg.Warnings)
	}
	for name, want := range map[string]string{"plain": "plain__", "bare": "", "mine": "m."} {
		if got := cfg.Servers[name].ExposedPrefix(name); got != want {
			t.Errorf("%s: ExposedPrefix %q, want %q", name, got, want)
		}
	}
	if cfg.Servers["plain"].Prefix != nil || cfg.Servers["bare"].Prefix == nil {
		t.Errorf("absent and empty prefixes not told apart: %+v", cfg.Servers)
	}

	// Not fingerprinted: absent, "", and any string give one fingerprint.
	for _, name := range []string{"plain", "mine"} {
		base := cfg.Servers[name]
		fp := base.Fingerprint(testFPKey)
		for _, p := range []string{"", "x__", "other."} {
			c := base.clone()
			c.Prefix = &p
			if got := c.Fingerprint(testFPKey); got != fp {
				t.Errorf("%s: prefix %q changed the fingerprint", name, p)
			}
			if strings.Contains(string(c.canonical()), "prefix") {
				t.Errorf("%s: prefix in the canonical form: %s", name, c.canonical())
			}
		}
	}
	// The manager's memo (exact for the fingerprint) agrees.
	var memo fingerprintMemo
	c := cfg.Servers["mine"]
	c.name = "mine"
	fp := memo.get(c, testFPKey)
	p := "changed."
	c.Prefix = &p
	if got := memo.get(c, testFPKey); got != fp {
		t.Errorf("memo: prefix changed the fingerprint")
	}

	ok := strings.Repeat("p", MaxPrefixBytes)
	if _, err := ParseConfig([]byte(`{"mcpServers":{"x":{"command":"c","prefix":"` + ok + `"}}}`)); err != nil {
		t.Errorf("prefix of MaxPrefixBytes refused: %v", err)
	}
	const secret = "s3cr3t"
	for _, bad := range []string{
		ok + "p",                // too long
		"a b",                   // space
		"a\\tb",                 // whitespace
		secret + "\\u0007",      // control character
		"\\u007f",               // DEL
		"\\u00e9" + secret,      // non-ASCII
		"\\u00a0",               // non-breaking space
		"x\\n",                  // newline
		"\\u200b" + secret + "", // zero-width space
	} {
		_, err := ParseConfig([]byte(`{"mcpServers":{"the-entry":{"command":"c","prefix":"` + bad + `"}}}`))
		if !errors.Is(err, ErrConfigInvalid) || !errors.Is(err, ErrInvalidPrefix) {
			t.Errorf("prefix %q: %v", bad, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `"the-entry"`) || strings.Contains(msg, secret) {
			t.Errorf("prefix %q: error does not name the entry or shows the prefix: %s", bad, msg)
		}
	}
	// Installed another way, an invalid prefix is refused too.
	bad := "a b"
	var src MapConfigSource
	if err := src.Replace(map[string]ServerConfig{"x": {Command: "c", Prefix: &bad}}); !errors.Is(err, ErrInvalidPrefix) {
		t.Errorf("Replace: %v", err)
	}
}

// TestConfigPrefixSetCopies: MapConfigSource.Set keeps its own copy of
// the prefix, like every other field.
func TestConfigPrefixSetCopies(t *testing.T) {
	var src MapConfigSource
	p := "a."
	if err := src.Set("x", ServerConfig{Command: "c", Prefix: &p}); err != nil {
		t.Fatal(err)
	}
	p = "changed."
	c, err := src.Lookup(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if c.ExposedPrefix("x") != "a." {
		t.Fatalf("the source's entry changed with the caller's string: %q", c.ExposedPrefix("x"))
	}
}
