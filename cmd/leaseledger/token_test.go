package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/gateway"
)

// token add prints a fresh token once and stores only its hash, in a file
// of mode 0600 that gateway.LoadTokens accepts; a second token of one name
// is refused; list prints names; remove drops exactly that line, and a
// missing name is an error; a file serve would refuse is never edited.
func TestTokenCommands(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "tokens")
	r := runCLI(t, ctx, "", "token", "add", "alice", "--file", file)
	plain := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(plain, gateway.TokenPrefix) {
		t.Fatalf("add: %+v", r)
	}
	b, _ := os.ReadFile(file)
	if string(b) != gateway.TokenLine("alice", gateway.HashToken(plain))+"\n" || strings.Contains(string(b), plain) {
		t.Fatalf("file after add: %q", b)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st, err)
	}
	if r := runCLI(t, ctx, "", "token", "add", "bob", "--file", file); r.code != 0 || strings.TrimSpace(r.stdout) == plain {
		t.Fatalf("add bob: %+v", r)
	}
	if r := runCLI(t, ctx, "", "token", "add", "alice", "--file", file); r.code == 0 || !strings.Contains(r.stderr, "already") {
		t.Fatalf("second alice: %+v", r)
	}
	if r := runCLI(t, ctx, "", "token", "add", "no good", "--file", file); r.code == 0 {
		t.Fatalf("invalid name accepted: %+v", r)
	}
	if r := runCLI(t, ctx, "", "token", "list", "--file", file); r.code != 0 || r.stdout != "alice\nbob\n" {
		t.Fatalf("list: %+v", r)
	}
	tk, err := gateway.LoadTokens(file)
	if err != nil || tk.Len() != 2 {
		t.Fatalf("LoadTokens: %v", err)
	}
	if r := runCLI(t, ctx, "", "token", "remove", "alice", "--file", file); r.code != 0 {
		t.Fatalf("remove: %+v", r)
	}
	if r := runCLI(t, ctx, "", "token", "list", "--file", file); r.stdout != "bob\n" {
		t.Fatalf("list after remove: %+v", r)
	}
	if r := runCLI(t, ctx, "", "token", "remove", "alice", "--file", file); r.code != 1 {
		t.Fatalf("remove of a missing name: %+v", r)
	}
	// A line separated by a tab (as LoadTokens reads it) is removed too.
	tabbed := "carol\t" + gateway.HashToken("x") + "\n"
	if err := os.WriteFile(file, []byte(tabbed+gateway.TokenLine("bob", gateway.HashToken("y"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ctx, "", "token", "list", "--file", file); r.stdout != "carol\nbob\n" {
		t.Fatalf("list of a tab-separated line: %+v", r)
	}
	if r := runCLI(t, ctx, "", "token", "remove", "carol", "--file", file); r.code != 0 {
		t.Fatalf("remove of a tab-separated line: %+v", r)
	}
	if b, _ := os.ReadFile(file); strings.Contains(string(b), "carol") {
		t.Fatalf("tab-separated line kept: %q", b)
	}
	if err := os.WriteFile(file, []byte("not a token line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ctx, "", "token", "add", "carol", "--file", file); r.code == 0 {
		t.Fatalf("add to a malformed file: %+v", r)
	}
	if b, _ := os.ReadFile(file); string(b) != "not a token line\n" {
		t.Fatalf("malformed file edited: %q", b)
	}
	if r := runCLI(t, ctx, "", "token", "list"); r.code == 0 {
		t.Fatalf("list without --file: %+v", r)
	}
}
