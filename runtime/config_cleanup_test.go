package runtime

import (
	"errors"
	"strings"
	"testing"
)

// TestConfigCleanup: an entry's "cleanup" is "verified" (the default) or
// "direct"; only "direct" enters the fingerprint (it changes what is
// launched), so entries without it keep their fingerprints; an unknown
// value, or a cleanup on a url entry, is refused naming the entry; and a
// verified entry — explicit or by default — on a system without the
// guardian helper is refused with ErrVerifiedUnsupported and the remedy,
// never run direct.
func TestConfigCleanup(t *testing.T) {
	doc := `{"mcpServers": {
		"plain": {"command": "srv"},
		"guarded": {"command": "srv", "cleanup": "verified"},
		"direct": {"command": "srv", "cleanup": "direct"}
	}}`
	cfg, err := LoadConfig([]byte(doc), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings for an honoured field: %q", cfg.Warnings)
	}
	plain, guarded, direct := cfg.Servers["plain"], cfg.Servers["guarded"], cfg.Servers["direct"]
	if plain.isDirect() || guarded.isDirect() || !direct.isDirect() {
		t.Fatalf("modes: %+v", cfg.Servers)
	}
	if string(plain.canonical()) != `{"command":"srv","args":[],"env":[],"cwd":"","shared":false}` {
		t.Errorf("an entry without cleanup changed its canonical form: %s", plain.canonical())
	}
	if plain.Fingerprint(testFPKey) != guarded.Fingerprint(testFPKey) {
		t.Error(`"verified" and the default launch the same: their fingerprints differ`)
	}
	if plain.Fingerprint(testFPKey) == direct.Fingerprint(testFPKey) {
		t.Error(`"direct" launches differently: same fingerprint`)
	}
	var memo fingerprintMemo
	c := plain
	c.name = "x"
	fp := memo.get(c, testFPKey)
	c.Cleanup = CleanupDirect
	if memo.get(c, testFPKey) == fp {
		t.Error("memo: cleanup did not change the fingerprint")
	}

	for _, bad := range []string{
		`{"mcpServers": {"odd": {"command": "srv", "cleanup": "guardian"}}}`,
		`{"mcpServers": {"odd": {"url": "https://h/mcp", "cleanup": "direct"}}}`,
	} {
		_, err := LoadConfig([]byte(bad), envOf(nil))
		if !errors.Is(err, ErrConfigInvalid) || !strings.Contains(err.Error(), `"odd"`) {
			t.Errorf("%s: %v", bad, err)
		}
	}

	// The supported systems are one list: a verified entry elsewhere is
	// refused, a direct one is not.
	for goos, ok := range map[string]bool{"linux": true, "darwin": true, "windows": false, "freebsd": false} {
		if verifiedSupportedOn(goos) != ok {
			t.Errorf("%s: verified supported %v", goos, !ok)
		}
		for _, e := range []ServerConfig{plain, guarded} {
			err := e.checkCleanup(goos)
			if ok != (err == nil) || !ok && (!errors.Is(err, ErrVerifiedUnsupported) || !strings.Contains(err.Error(), `"cleanup": "direct"`)) {
				t.Errorf("%s, cleanup %q: %v", goos, e.Cleanup, err)
			}
		}
		if err := direct.checkCleanup(goos); err != nil {
			t.Errorf("%s: direct refused: %v", goos, err)
		}
	}
	if !VerifiedStdioSupported() {
		t.Fatal("this system runs the tests with the guardian")
	}
}
