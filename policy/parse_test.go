package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The embedded schema parses, resolves, and declares exactly one action
// per events.AccessAction.
func TestSchema(t *testing.T) {
	if _, err := newValidator(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"start_server", "call_tool", "read_resource", "subscribe_resource", "get_prompt",
		"complete", "answer_sampling", "answer_elicitation", "answer_roots"} {
		if !strings.Contains(Schema(), a) {
			t.Errorf("schema lacks action %s", a)
		}
	}
	// Every action can be permitted by name: a policy naming each
	// validates, so the schema declares them all.
	var b strings.Builder
	for _, a := range allActions() {
		b.WriteString(`permit(principal, action == Leaseledger::Action::"` + string(a) + `", resource);` + "\n")
	}
	if _, err := Parse("all.cedar", []byte(b.String()), "", nil); err != nil {
		t.Fatal(err)
	}
}

// Each kind of bad input is refused with its sentinel, naming the line
// (and the policy, when there is one).
func TestParseErrors(t *testing.T) {
	const ok = `permit(principal, action, resource);` + "\n"
	for _, tc := range []struct {
		name, text string
		kind       error
		line       int
		policy     string
		says       string
	}{
		{"syntax", ok + "\npermit(principal action, resource);\n", ErrSyntax, 3, "", "syntax error"},
		{"unterminated string", ok + ok + `permit(principal, action, resource) when { "abc };`, ErrSyntax, 3, "", "not terminated"},
		{"hint on start_server", ok + "@id(\"readers-read-only\")\npermit(principal, action == Leaseledger::Action::\"start_server\", resource)\n  when { context.read_only };\n",
			ErrSchema, 2, "readers-read-only", "read_only"},
		{"unknown entity type", ok + "permit(principal is Leaseledger::User, action, resource);\n", ErrSchema, 2, "policy1", "Leaseledger::User"},
		{"unknown action", "permit(principal, action == Leaseledger::Action::\"delete_server\", resource);\n", ErrSchema, 1, "policy0", "delete_server"},
		{"tool attribute on a server", "permit(principal, action == Leaseledger::Action::\"start_server\", resource) when { resource.name == \"x\" };",
			ErrSchema, 1, "policy0", "name"},
		{"optional attribute without has", "permit(principal, action, resource) when { context.client_address.isLoopback() };",
			ErrSchema, 1, "policy0", "client_address"},
		{"wrong type", "permit(principal, action == Leaseledger::Action::\"call_tool\", resource) when { context.read_only == \"yes\" };",
			ErrSchema, 1, "policy0", ""},
		{"duplicate id", "@id(\"a\")\n" + ok + "\n@id(\"a\")\n" + ok, ErrDuplicateID, 4, "a", "duplicate"},
		{"id clashes with a default", ok + "@id(\"policy0\")\n" + ok, ErrDuplicateID, 2, "policy0", "duplicate"},
		{"invalid id", ok + "@id(\"has space\")\n" + ok, ErrInvalidID, 2, "", "IDRule"},
		{"empty id", "@id(\"\")\n" + ok, ErrInvalidID, 1, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.cedar", []byte(tc.text), "", nil)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err %v, want %v", err, tc.kind)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not *Error", err)
			}
			if e.File != "p.cedar" || e.Line != tc.line || e.Policy != tc.policy {
				t.Fatalf("at %s:%d policy %q, want p.cedar:%d policy %q (%v)", e.File, e.Line, e.Policy, tc.line, tc.policy, err)
			}
			if e.Column < 1 {
				t.Errorf("no column: %v", err)
			}
			prefix := "p.cedar:" + itoa(tc.line) + ":"
			if !strings.HasPrefix(err.Error(), prefix) || (tc.policy != "" && !strings.Contains(err.Error(), "policy "+tc.policy+": ")) {
				t.Errorf("message %q does not start with %q and name the policy", err, prefix)
			}
			if tc.says != "" && tc.says != "IDRule" && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("message %q does not say %q", err, tc.says)
			}
		})
	}
}

// The message reads like a compiler's.
func TestErrorMessage(t *testing.T) {
	_, err := Parse("policy.cedar", []byte("\n\n@id(\"readers-read-only\")\npermit(principal, action == Leaseledger::Action::\"start_server\", resource) when { context.read_only };"), "", nil)
	const want = "policy.cedar:3:1: policy readers-read-only: does not validate against the schema: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("%v, want prefix %q", err, want)
	}
}

const groupsJSON = `[
  {"uid": {"type": "Leaseledger::Principal", "id": "alice"}, "attrs": {}, "parents": [{"type": "Leaseledger::Group", "id": "readers"}]},
  {"uid": {"type": "Leaseledger::Group", "id": "readers"}, "attrs": {}, "parents": [{"type": "Leaseledger::Group", "id": "staff"}]},
  {"uid": {"type": "Leaseledger::Principal", "id": "bob"}, "attrs": {}, "parents": [{"type": "Leaseledger::Group", "id": "staff"}]}
]`

// Entities are validated against the schema, one by one, naming the line
// of the bad one.
func TestEntitiesErrors(t *testing.T) {
	const ok = `{"uid": {"type": "Leaseledger::Principal", "id": "alice"}, "attrs": {}, "parents": []}`
	for _, tc := range []struct {
		name, text string
		kind       error
		line       int
	}{
		{"not an array", `{"a": 1}`, ErrSyntax, 1},
		{"bad json", "[\n" + ok + ",\n{\"uid\": }\n]", ErrSyntax, 3},
		{"trailing data", "[" + ok + "] []", ErrSyntax, 1},
		{"missing parents", "[\n" + ok + ",\n" + `{"uid": {"type": "Leaseledger::Group", "id": "g"}, "attrs": {}}` + "\n]", ErrEntities, 3},
		{"server entity", "[\n" + ok + ",\n\n" + `{"uid": {"type": "Leaseledger::Server", "id": "s"}, "attrs": {}, "parents": []}` + "\n]", ErrEntities, 4},
		{"unknown type", `[{"uid": {"type": "Leaseledger::User", "id": "u"}, "attrs": {}, "parents": []}]`, ErrEntities, 1},
		{"bad parent type", "[\n  " + `{"uid": {"type": "Leaseledger::Principal", "id": "a"}, "attrs": {}, "parents": [{"type": "Leaseledger::Principal", "id": "b"}]}` + "]", ErrEntities, 2},
		{"attribute not in schema", `[{"uid": {"type": "Leaseledger::Group", "id": "g"}, "attrs": {"level": 3}, "parents": []}]`, ErrEntities, 1},
		{"duplicate", "[" + ok + ",\n" + ok + "]", ErrEntities, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.cedar", nil, "e.json", []byte(tc.text))
			var e *Error
			if !errors.Is(err, tc.kind) || !errors.As(err, &e) {
				t.Fatalf("err %v, want %v", err, tc.kind)
			}
			if e.File != "e.json" || e.Line != tc.line {
				t.Fatalf("at %s:%d, want e.json:%d (%v)", e.File, e.Line, tc.line, err)
			}
		})
	}
	if _, err := Parse("p.cedar", nil, "e.json", []byte(groupsJSON)); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("p.cedar", nil, "e.json", []byte(" \n")); err != nil {
		t.Fatalf("a blank entities file: %v", err)
	}
}

// Ids: @id or policy<N>; Len and IDs in file order; the digest is the
// documented one and changes with either file.
func TestIDsAndDigest(t *testing.T) {
	text := []byte("permit(principal, action, resource);\n@id(\"named\")\nforbid(principal, action, resource);\npermit(principal, action, resource);\n")
	s, err := Parse("p.cedar", text, "e.json", []byte(groupsJSON))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.IDs(), ","); got != "policy0,named,policy2" || s.Len() != 3 {
		t.Fatalf("ids %s len %d", got, s.Len())
	}
	// Recomputed here from the definition, not through Digest.
	want := sha256hex(DigestDomain + "\n" + itoa(len(text)) + "\n" + string(text) + itoa(len(groupsJSON)) + "\n" + groupsJSON)
	if s.Digest() != want || len(want) != 64 {
		t.Fatalf("digest %s, want %s", s.Digest(), want)
	}
	s2, err := Parse("p.cedar", text, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Digest() == s.Digest() || s2.Digest() != sha256hex(DigestDomain+"\n"+itoa(len(text))+"\n"+string(text)+"0\n") {
		t.Fatal("the entities file is not part of the digest as defined")
	}
	// Moving bytes from one file to the other changes the digest.
	a := Digest([]byte("ab"), []byte("c"))
	if a == Digest([]byte("a"), []byte("bc")) {
		t.Fatal("the digest is ambiguous")
	}
}

// Load reads both files, bounded.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	pol, ent := filepath.Join(dir, "p.cedar"), filepath.Join(dir, "e.json")
	write(t, pol, "permit(principal in Leaseledger::Group::\"staff\", action, resource);\n")
	write(t, ent, groupsJSON)
	s, err := Load(pol, ent)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Decide(Request{Principal: "alice", Action: "start_server", Server: "github"}).Allowed {
		t.Fatal("alice, in readers in staff, is not allowed")
	}
	if _, err := Load(filepath.Join(dir, "missing"), ""); !errors.Is(err, ErrRead) {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.cedar")
	write(t, big, strings.Repeat("// x\n", MaxPolicyFileBytes/5+1))
	if _, err := Load(big, ""); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large file: %v", err)
	}
	if _, err := Load(pol, big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large entities file: %v", err)
	}
	if _, err := Parse("p", make([]byte, MaxPolicyFileBytes+1), "", nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large text: %v", err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
