//go:build linux

package gateway

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/runtime"
	"github.com/oklog/ulid/v2"
)

func TestValidServerName(t *testing.T) {
	for name, want := range map[string]bool{
		"tools": true, "my.server": true, "a-b_c": true, "x": true, strings.Repeat("a", MaxServerNameLen): true,
		"": false, "a__b": false, "a_": false, "__": false, "my server": false, "a/b": false, "ÆØÅ": false,
		strings.Repeat("a", MaxServerNameLen+1): false,
	} {
		if got := ValidServerName(name); got != want {
			t.Errorf("ValidServerName(%q) = %v", name, got)
		}
	}
}

// The first separator splits: server names never hold it nor end with
// '_', so a tool whose name starts with '_' or holds "__" round-trips.
func TestToolNameRoundTrip(t *testing.T) {
	for _, c := range [][2]string{{"a", "_x"}, {"a.b", "x__y"}, {"s", "__"}, {"s-1", "t"}} {
		s, tool, ok := SplitToolName(ToolName(c[0], c[1]))
		if !ok || s != c[0] || tool != c[1] {
			t.Errorf("%v: %q %q %v", c, s, tool, ok)
		}
	}
	for _, bad := range []string{"echo", "__echo", "a__", ""} {
		if _, _, ok := SplitToolName(bad); ok {
			t.Errorf("%q split", bad)
		}
	}
	s, u, ok := SplitResourceURI(ResourceURI("srv", "file:///a/b?c#d"))
	if !ok || s != "srv" || u != "file:///a/b?c#d" {
		t.Errorf("resource uri: %q %q %v", s, u, ok)
	}
}

func TestCursor(t *testing.T) {
	c := pageCursor{Server: 2, Cursor: "abc"}
	got, ok := decodeCursor(encodeCursor(c), 3, 0)
	if !ok || got != c {
		t.Fatalf("round trip: %+v %v", got, ok)
	}
	for _, bad := range []string{encodeCursor(pageCursor{Server: 3}), encodeCursor(pageCursor{Server: -1}), "!!",
		encodeCursor(pageCursor{Cursor: strings.Repeat("x", runtime.MaxCursorBytes+1)}), encodeCursor(pageCursor{Server: 1, Gen: 1}), strings.Repeat("A", maxGatewayCursorBytes+1)} {
		if _, ok := decodeCursor(bad, 3, 0); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	m, err := runtime.NewManager(runtime.Options{Config: &runtime.MapConfigSource{}, Ledger: nopAppender{}})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		o    Options
		kind error
	}{
		"no manager":   {Options{Servers: []string{"a"}}, ErrInvalidOptions},
		"bad name":     {Options{Manager: m, Servers: []string{"a__b"}}, ErrServerName},
		"trailing _":   {Options{Manager: m, Servers: []string{"a_"}}, ErrServerName},
		"duplicate":    {Options{Manager: m, Servers: []string{"a", "a"}}, ErrServerName},
		"bad origin":   {Options{Manager: m, AllowedOrigins: []string{"example.com"}}, ErrInvalidOptions},
		"origin path":  {Options{Manager: m, AllowedOrigins: []string{"https://example.com/x"}}, ErrInvalidOptions},
		"negative cap": {Options{Manager: m, MaxSessions: -1}, ErrInvalidOptions},
		"budget":       {Options{Manager: m, RequestBudget: runtime.MaxRequestBudget + 1}, ErrInvalidOptions},
		"too many":     {Options{Manager: m, Servers: manyServers(MaxServers + 1)}, ErrInvalidOptions},
	} {
		if _, err := New(c.o); !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", name, err, c.kind)
		}
	}
	if _, err := New(Options{Manager: m, Servers: manyServers(MaxServers)}); err != nil {
		t.Fatal(err)
	}
}

func manyServers(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "s" + strconv.Itoa(i)
	}
	return out
}

// Token files: the exact format, every malformed line refused by number
// (never by content), the size and count bounds.
func TestTokenFile(t *testing.T) {
	h := HashToken("secret")
	if !strings.HasPrefix(h, HashPrefix) || len(h) != len(HashPrefix)+64 || !validHash(h) {
		t.Fatalf("hash %q", h)
	}
	p, err := NewToken()
	if err != nil || !strings.HasPrefix(p, TokenPrefix) || len(p) != len(TokenPrefix)+64 {
		t.Fatalf("NewToken: %q %v", p, err)
	}
	good := "# comment\n\n  " + TokenLine("alice", h) + "  \nbob " + HashToken("b") + "\n"
	set, perr := parseTokens([]byte(good))
	if perr != nil || len(set) != 2 || set[h] != "alice" {
		t.Fatalf("parse: %v %v", set, perr)
	}
	for content, line := range map[string]int{
		"alice " + h + "\nalice " + HashToken("x"): 2, // duplicate name
		"alice " + h + "\nbob " + h:                2, // duplicate hash
		"al ice " + h:                              1,
		"alice sha256:" + strings.Repeat("A", 64):  1,
		"alice " + h + " extra":                    1,
		"alice secret":                             1,
		"\n\nal.ice " + h:                          3,
	} {
		_, perr := parseTokens([]byte(content))
		if perr == nil || perr.Line != line || strings.Contains(perr.Error(), "secret") {
			t.Errorf("%q: %v, want line %d", content, perr, line)
		}
	}
	var b strings.Builder
	for i := range MaxTokens + 1 {
		b.WriteString(TokenLine("t"+strconv.Itoa(i), HashToken(strconv.Itoa(i))) + "\n")
	}
	if _, perr := parseTokens([]byte(b.String())); perr == nil || perr.Line != MaxTokens+1 {
		t.Errorf("more than MaxTokens: %v", perr)
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, MaxTokenFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(big); !errors.Is(err, ErrTokenFile) {
		t.Errorf("oversize file: %v", err)
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing")); !errors.Is(err, ErrTokenFile) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	f := filepath.Join(dir, "tokens")
	if err := os.WriteFile(f, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := LoadTokens(f)
	if err != nil || tok.Len() != 2 {
		t.Fatalf("load: %v", err)
	}
	if name, _, ok := tok.verify("secret"); !ok || name != "alice" {
		t.Fatalf("verify: %q %v", name, ok)
	}
	if _, _, ok := tok.verify(h); ok {
		t.Fatal("the stored hash verifies as a token")
	}
}

// nopAppender accepts every append (New tests start nothing).
type nopAppender struct{}

func (nopAppender) Append(_ context.Context, d ...events.Draft) ([]events.Seq, error) {
	return make([]events.Seq, len(d)), nil
}

// Session ids are unpredictable: ids made in the same millisecond share
// no entropy prefix (a monotonic ULID would only increment it).
func TestSessionIDRandom(t *testing.T) {
	same := 0
	prev := ulid.MustParse(strings.TrimPrefix(newSessionID(), SessionIDPrefix))
	for range 2000 {
		id := newSessionID()
		if !events.ValidID(id) {
			t.Fatalf("session id %q breaks events.IDRule", id)
		}
		u := ulid.MustParse(strings.TrimPrefix(id, SessionIDPrefix))
		if u.Time() == prev.Time() {
			same++
			a, b := prev.Entropy(), u.Entropy()
			if bytes.Equal(a[:6], b[:6]) {
				t.Fatalf("ids %s and %s of the same millisecond share their entropy's first 6 bytes", prev, u)
			}
		}
		prev = u
	}
	if same == 0 {
		t.Fatal("no two ids in the same millisecond: the test proved nothing")
	}
}
