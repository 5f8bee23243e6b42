package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bundleSetup writes the audit log (act-ok, act-bad, act-open) into a
// data directory and makes a signing key; it returns the directory, the
// signer key file and the verifier key.
func bundleSetup(t *testing.T) (dir, skey, vkey string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	auditLog(t, dir)
	skey = filepath.Join(t.TempDir(), "signer.key")
	r := runCLI(t, context.Background(), "", "checkpoint", "keygen", "--out", skey)
	if r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	return dir, skey, strings.TrimSpace(r.stdout)
}

// The bundle command's file is checked by 'verify --bundle' and audited by
// 'audit --bundle' with no data directory, and the audit is the one
// 'audit' prints from the data directory: same output, same exit status.
func TestBundleCLI(t *testing.T) {
	dir, skey, vkey := bundleSetup(t)
	ctx := context.Background()
	out := t.TempDir()
	nodir := filepath.Join(t.TempDir(), "no-such-dir") // proves no data directory is read

	bad := filepath.Join(out, "act-bad.bundle")
	r := runCLI(t, ctx, "", "--data-dir", dir, "bundle", "--key", skey, "--origin", "leaseledger.test/prod", "--activation", "act-bad", "-o", bad)
	if r.code != 0 || !strings.Contains(r.stdout, "activation act-bad") {
		t.Fatalf("bundle --activation: %+v", r)
	}
	if r = runCLI(t, ctx, "", "--data-dir", dir, "bundle", "--key", skey, "--activation", "act-bad", "-o", bad); r.code != 1 {
		t.Fatalf("bundle over an existing file: %+v", r)
	}
	r = runCLI(t, ctx, "", "--data-dir", nodir, "verify", "--bundle", bad, "--vkey", vkey)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ok: bundle of ") || !strings.Contains(r.stdout, "leaseledger.test/prod") {
		t.Fatalf("verify --bundle: %+v", r)
	}
	if _, err := os.Stat(nodir); !os.IsNotExist(err) {
		t.Fatalf("verify --bundle touched --data-dir: %v", err)
	}
	for _, args := range [][]string{{"--json"}, {}, {"--json", "--timeline", "3"}} {
		fromDir := runCLI(t, ctx, "", append([]string{"--data-dir", dir, "audit", "act-bad"}, args...)...)
		fromBundle := runCLI(t, ctx, "", append([]string{"--data-dir", nodir, "audit", "--bundle", bad, "--vkey", vkey}, args...)...)
		if fromDir.code != exitUnconfirmed || fromBundle.code != fromDir.code || fromBundle.stdout != fromDir.stdout || fromDir.stdout == "" {
			t.Fatalf("audit %v: from the bundle (%d)\n%s\nfrom the data dir (%d)\n%s\n%s", args, fromBundle.code, fromBundle.stdout, fromDir.code, fromDir.stdout, fromBundle.stderr)
		}
		if !strings.Contains(fromBundle.stderr, "bundle "+bad+" verified") {
			t.Fatalf("audit --bundle stderr: %s", fromBundle.stderr)
		}
	}
	if r = runCLI(t, ctx, "", "audit", "act-ok", "--bundle", bad, "--vkey", vkey); r.code != 1 || !strings.Contains(r.stderr, "holds activation act-bad only") {
		t.Fatalf("audit another activation of an activation bundle: %+v", r)
	}

	// A range bundle of the whole log: audit summarises it as --all does,
	// and audits any one activation in it as from the data directory.
	whole := filepath.Join(out, "whole.bundle")
	head := strings.Fields(runCLI(t, ctx, "", "--data-dir", dir, "head").stdout)[0]
	if r = runCLI(t, ctx, "", "--data-dir", dir, "bundle", "--key", skey, "--range", "1-"+head, "-o", whole); r.code != 0 {
		t.Fatalf("bundle --range: %+v", r)
	}
	all := runCLI(t, ctx, "", "--data-dir", dir, "audit", "--all", "--json")
	r = runCLI(t, ctx, "", "audit", "--bundle", whole, "--vkey", vkey, "--json")
	if r.code != all.code || r.stdout != all.stdout {
		t.Fatalf("audit --bundle of the whole range: %d\n%s\nwant %d\n%s", r.code, r.stdout, all.code, all.stdout)
	}
	one := runCLI(t, ctx, "", "--data-dir", dir, "audit", "act-ok", "--json")
	r = runCLI(t, ctx, "", "audit", "act-ok", "--bundle", whole, "--vkey", vkey, "--json")
	if one.code != 0 || r.code != 0 || r.stdout != one.stdout {
		t.Fatalf("audit act-ok --bundle: %+v, want %+v", r, one)
	}

	// One byte changed in an event line: both fail, naming the seq.
	b, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	ls := bytes.Split(b, []byte("\n"))
	seq := string(bytes.TrimPrefix(bytes.SplitN(ls[3], []byte(","), 2)[0], []byte(`{"seq":`)))
	i := bytes.Index(ls[3], []byte(`"outcome":"ok"`))
	if i < 0 {
		i = bytes.Index(ls[3], []byte(`"kind":"`))
	}
	ls[3][i+3] ^= 0x20
	tampered := filepath.Join(out, "tampered.bundle")
	if err := os.WriteFile(tampered, bytes.Join(ls, []byte("\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify"}, {"audit", "--json"}} {
		r = runCLI(t, ctx, "", append(args, "--bundle", tampered, "--vkey", vkey)...)
		if r.code != 1 || !strings.Contains(r.stderr, "verify bundle: failed at seq "+seq+":") || r.stdout != "" {
			t.Fatalf("%v on a tampered bundle (seq %s): %+v", args, seq, r)
		}
	}
	// Usage errors.
	for _, args := range [][]string{
		{"verify", "--bundle", bad},
		{"verify", "--bundle", bad, "--vkey", vkey, "--checkpoint", bad},
		{"verify", "--bundle", bad, "--vkey", vkey, "--expect-head", "1 " + strings.Repeat("0", 64)},
		{"--data-dir", dir, "bundle", "--key", skey, "-o", filepath.Join(out, "x")},
		{"--data-dir", dir, "bundle", "--key", skey, "--range", "5-2", "-o", filepath.Join(out, "x")},
		{"--data-dir", dir, "bundle", "--key", skey, "--activation", "act-none", "-o", filepath.Join(out, "x")},
	} {
		if r = runCLI(t, ctx, "", args...); r.code != 1 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "x")); !os.IsNotExist(err) {
		t.Fatalf("a failed bundle left its file: %v", err)
	}
}

// A bundle made with --consistent-with an earlier signed checkpoint passes
// 'verify --bundle --checkpoint' and 'audit --bundle --checkpoint'; one
// made without it fails them as a fork (exit status 1), and a checkpoint
// the log does not extend cannot be used to make one.
func TestBundleCLIConsistentWith(t *testing.T) {
	dir, skey, vkey := bundleSetup(t)
	ctx := context.Background()
	out := t.TempDir()
	old := filepath.Join(out, "old.checkpoint")
	r := runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--size", "3")
	if r.code != 0 {
		t.Fatalf("checkpoint: %+v", r)
	}
	if err := os.WriteFile(old, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	tied := filepath.Join(out, "tied.bundle")
	if r = runCLI(t, ctx, "", "--data-dir", dir, "bundle", "--key", skey, "--activation", "act-ok", "--consistent-with", old, "-o", tied); r.code != 0 {
		t.Fatalf("bundle --consistent-with: %+v", r)
	}
	plain := filepath.Join(out, "plain.bundle")
	if r = runCLI(t, ctx, "", "--data-dir", dir, "bundle", "--key", skey, "--activation", "act-ok", "-o", plain); r.code != 0 {
		t.Fatalf("bundle: %+v", r)
	}
	for _, cmd := range [][]string{{"verify"}, {"audit", "--json"}} {
		r = runCLI(t, ctx, "", append(cmd, "--bundle", tied, "--vkey", vkey, "--checkpoint", old)...)
		if r.code != 0 {
			t.Fatalf("%v --bundle tied --checkpoint old: %+v", cmd, r)
		}
		r = runCLI(t, ctx, "", append(cmd, "--bundle", plain, "--vkey", vkey, "--checkpoint", old)...)
		if r.code != 1 || !strings.Contains(r.stderr, "not an extension of the checkpoint of size 3: fork") || r.stdout != "" {
			t.Fatalf("%v --bundle plain --checkpoint old: %+v", cmd, r)
		}
	}
	// A checkpoint of another origin is not one this log extends.
	other := filepath.Join(out, "other.checkpoint")
	r = runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--size", "3", "--origin", "elsewhere")
	if err := os.WriteFile(other, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = runCLI(t, ctx, "", "--data-dir", dir, "bundle", "--key", skey, "--activation", "act-ok", "--consistent-with", other, "-o", filepath.Join(out, "x")); r.code != 1 || !strings.Contains(r.stderr, "fork") {
		t.Fatalf("bundle --consistent-with another origin: %+v", r)
	}
}
