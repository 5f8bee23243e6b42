//go:build linux

package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
)

// oddNames are server names real mcp.json files use: dotted, dashed,
// spaced, non-ASCII, and one longer than an identifier may be.
var oddNames = []string{"my.server", "github-mcp", "foo bar", "ÆØÅ", strings.Repeat("long.name-", 20)}

// mcpJSON is a realistic mcp.json naming command for every odd name, plus
// keys other tools keep there.
func mcpJSON(command string, names []string) []byte {
	var b strings.Builder
	b.WriteString(`{"$schema":"x","mcpServers":{`)
	for i, n := range names {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(string(mustJSON(n)) + `:{"command":` + string(mustJSON(command)) + `,"args":[],"env":{},"disabled":false}`)
	}
	b.WriteString(`},"globalShortcut":""}`)
	return []byte(b.String())
}

// Every odd name loads and maps to a distinct, valid server id; a name
// that is already an id is its own.
func TestServerIDs(t *testing.T) {
	all, err := ParseConfig(mcpJSON("x", oddNames))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, n := range oddNames {
		if _, ok := all[n]; !ok {
			t.Fatalf("%q not loaded", n)
		}
		id, err := ServerID(n)
		if err != nil || !events.ValidID(id) {
			t.Fatalf("ServerID(%q) = %q, %v", n, id, err)
		}
		if again, _ := ServerID(n); again != id {
			t.Fatal("ServerID is not deterministic")
		}
		if other, dup := seen[id]; dup {
			t.Fatalf("%q and %q share id %q", n, other, id)
		}
		seen[id] = n
	}
	if id, _ := ServerID("github-mcp"); id != "github-mcp" {
		t.Fatalf("a valid id was rewritten: %q", id)
	}
	if id, _ := ServerID("my.server"); !strings.HasPrefix(id, "my_server-") || len(id) != len("my_server-")+8 {
		t.Fatalf("my.server → %q", id)
	}
	for _, bad := range []string{"", strings.Repeat("a", MaxServerNameBytes+1), "\xff"} {
		if _, err := ServerID(bad); !errors.Is(err, ErrConfigInvalid) {
			t.Fatalf("ServerID(%q): %v", bad, err)
		}
	}
}

// Two names mapping to one id, and unusable names, are refused at load
// time with an error naming the entries — by ParseConfig, by a
// FileConfigSource lookup of any entry, and by MapConfigSource.Set.
func TestConfigNameCollisionRefusedAtLoad(t *testing.T) {
	a := "my.server"
	b, _ := ServerID(a) // "my_server-<hash>", itself a valid id
	_, err := ParseConfig(mcpJSON("x", []string{a, b, "other"}))
	if err == nil || !strings.Contains(err.Error(), `"my.server"`) || !strings.Contains(err.Error(), `"`+b+`"`) {
		t.Fatalf("collision: %v", err)
	}
	long := strings.Repeat("n", MaxServerNameBytes+1)
	if _, err := ParseConfig(mcpJSON("x", []string{long})); err == nil || !strings.Contains(err.Error(), long[:20]) {
		t.Fatalf("long name: %v", err)
	}
	if _, err := ParseConfig(mcpJSON("x", []string{""})); err == nil {
		t.Fatal("empty name loaded")
	}
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, mcpJSON("x", []string{a, b}), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (FileConfigSource{Path: path}).Lookup(context.Background(), "other"); !errors.Is(err, ErrConfigInvalid) {
		t.Fatalf("lookup in a colliding file: %v", err)
	}
	var m MapConfigSource
	if err := m.Set(a, ServerConfig{Command: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(a, ServerConfig{Command: "y"}); err != nil {
		t.Fatalf("replacing an entry: %v", err)
	}
	if err := m.Set(b, ServerConfig{Command: "x"}); !errors.Is(err, ErrConfigInvalid) {
		t.Fatalf("colliding Set: %v", err)
	}
	if _, err := m.Lookup(context.Background(), b); !errors.Is(err, ErrConfigMissing) {
		t.Fatal("a refused Set installed its entry")
	}
}

// Odd names work end to end against fake children: listing, call, every
// event under the derived id, lease.acquiring naming the config name.
func TestPolicyOddConfigNames(t *testing.T) {
	p := newPolicyEnv(t, nil)
	for _, n := range oddNames {
		if err := p.cfg.Set(n, ServerConfig{Command: "fake"}); err != nil {
			t.Fatal(err)
		}
	}
	s := p.open("s1")
	for _, n := range oddNames {
		echo := p.digest(s, n, "echo")
		if _, err := s.Capability().Call(context.Background(), echoReq(n, echo)); err != nil {
			t.Fatalf("%q: %v", n, err)
		}
	}
	checkOddNameEvents(t, p.l.envelopes())
	// A host closes a connection by the name it configured, not by the id.
	for _, n := range oddNames {
		rep, err := p.m.CloseConnection(context.Background(), ConnectionRef{Session: "s1", Server: n}, 0)
		if err != nil || rep.Result != ResultConfirmed {
			t.Fatalf("close %q: %v %+v", n, err, rep)
		}
	}
}

// checkOddNameEvents checks that each odd name has one lease.acquiring,
// under its server id, with config_name set exactly when the name is not
// the id, and a finished call on that activation.
func checkOddNameEvents(t *testing.T, envs []events.Envelope) {
	t.Helper()
	for _, n := range oddNames {
		id, _ := ServerID(n)
		var acts []string
		finished := 0
		for _, x := range envs {
			if x.Server != id {
				continue
			}
			pl, err := x.Payload()
			if err != nil {
				t.Fatal(err)
			}
			switch pl := pl.(type) {
			case *events.LeaseAcquiring:
				acts = append(acts, x.Activation)
				want := n
				if n == id {
					want = ""
				}
				if pl.ConfigName != want {
					t.Errorf("%q: config_name %q, want %q", n, pl.ConfigName, want)
				}
			case *events.CallFinished:
				if pl.Outcome == events.CallOK {
					finished++
				}
			}
		}
		if len(acts) != 1 || finished != 1 {
			t.Errorf("%q (id %s): %d acquisitions, %d calls finished ok", n, id, len(acts), finished)
		}
	}
}
