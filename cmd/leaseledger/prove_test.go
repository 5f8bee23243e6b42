package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProveCommands: checkpoints at two sizes, an inclusion and a
// consistency proof made from the data directory, checked with only the
// verifier key; a flipped byte in the proof file fails naming the seq.
func TestProveCommands(t *testing.T) {
	dir, work := t.TempDir(), t.TempDir()
	ctx := context.Background()
	in, n := examples(t)
	if r := runCLI(t, ctx, in, "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	skey := filepath.Join(work, "signer.key")
	r := runCLI(t, ctx, "", "checkpoint", "keygen", "--name", "test-log", "--out", skey)
	if r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	vkey := strings.TrimSpace(r.stdout)
	small := n / 2
	cp1, cp2 := filepath.Join(work, "cp1"), filepath.Join(work, "cp2")
	r = runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--origin", "o", "--size", strconv.Itoa(small))
	if r.code != 0 || !strings.HasPrefix(r.stdout, "o\n"+strconv.Itoa(small)+"\n") {
		t.Fatalf("checkpoint --size: %+v", r)
	}
	writeProveFile(t, cp1, r.stdout)
	r = runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--origin", "o")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "o\n"+strconv.Itoa(n)+"\n") {
		t.Fatalf("checkpoint: %+v", r)
	}
	writeProveFile(t, cp2, r.stdout)
	if r := runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--size", strconv.Itoa(n+1)); r.code == 0 {
		t.Fatal("checkpoint --size past the head succeeded")
	}

	incl, cons := filepath.Join(work, "incl.json"), filepath.Join(work, "cons.json")
	if r := runCLI(t, ctx, "", "--data-dir", dir, "prove", "inclusion", "--seq", "2", "--checkpoint", cp2, "-o", incl); r.code != 0 {
		t.Fatalf("prove inclusion: %+v", r)
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir, "prove", "consistency", "--old", cp1, "--new", cp2, "-o", cons); r.code != 0 {
		t.Fatalf("prove consistency: %+v", r)
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir, "prove", "inclusion", "--seq", strconv.Itoa(small+1), "--checkpoint", cp1); r.code == 0 {
		t.Fatal("an inclusion proof of a seq past the checkpoint was made")
	}
	vfile := filepath.Join(work, "vkey")
	writeProveFile(t, vfile, vkey+"\n")
	for _, k := range []string{vkey, vfile} {
		r := runCLI(t, ctx, "", "--data-dir", filepath.Join(work, "no-such-dir"), "prove", "check", "--vkey", k, incl, cons)
		if r.code != 0 || strings.Count(r.stdout, ": ok: ") != 2 {
			t.Fatalf("prove check: %+v", r)
		}
	}

	// One byte of the first proof hash changed in the file.
	b, err := os.ReadFile(incl)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte(`"hashes":["`)) + len(`"hashes":["`)
	if b[at] == 'A' {
		b[at] = 'B'
	} else {
		b[at] = 'A'
	}
	bad := filepath.Join(work, "bad.json")
	writeProveFile(t, bad, string(b))
	r = runCLI(t, ctx, "", "prove", "check", "--vkey", vkey, bad)
	if r.code == 0 || !strings.Contains(r.stderr, "seq 2") || !strings.Contains(r.stderr, "FAILED") {
		t.Fatalf("a changed proof verified or did not name the seq: %+v", r)
	}
	if testing.Verbose() {
		t.Log(r.stderr)
	}
	// The other verifier key refuses the checkpoint.
	r = runCLI(t, ctx, "", "checkpoint", "keygen", "--name", "other", "--out", filepath.Join(work, "other.key"))
	if r := runCLI(t, ctx, "", "prove", "check", "--vkey", strings.TrimSpace(r.stdout), incl); r.code == 0 {
		t.Fatal("a proof verified under another key")
	}
}

func writeProveFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestProveFileBitFlips: no single-bit change of a real 'prove inclusion'
// or 'prove consistency' file verifies (the file must be exactly its
// canonical encoding).
func TestProveFileBitFlips(t *testing.T) {
	dir, work := t.TempDir(), t.TempDir()
	ctx := context.Background()
	in, n := examples(t)
	if r := runCLI(t, ctx, in, "--data-dir", dir, "append"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	skey := filepath.Join(work, "signer.key")
	r := runCLI(t, ctx, "", "checkpoint", "keygen", "--name", "test-log", "--out", skey)
	if r.code != 0 {
		t.Fatalf("keygen: %+v", r)
	}
	v, err := verifierKey(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatal(err)
	}
	cp1, cp2 := filepath.Join(work, "cp1"), filepath.Join(work, "cp2")
	r = runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--origin", "o", "--size", strconv.Itoa(n/2))
	writeProveFile(t, cp1, r.stdout)
	r = runCLI(t, ctx, "", "--data-dir", dir, "checkpoint", "--key", skey, "--origin", "o")
	writeProveFile(t, cp2, r.stdout)
	incl, cons := filepath.Join(work, "incl.json"), filepath.Join(work, "cons.json")
	if r := runCLI(t, ctx, "", "--data-dir", dir, "prove", "inclusion", "--seq", "2", "--checkpoint", cp2, "-o", incl); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := runCLI(t, ctx, "", "--data-dir", dir, "prove", "consistency", "--old", cp1, "--new", cp2, "-o", cons); r.code != 0 {
		t.Fatal(r.stderr)
	}
	tmp := filepath.Join(work, "flip.json")
	for _, f := range []string{incl, cons} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checkProofFile(f, v); err != nil {
			t.Fatal(err)
		}
		for i := range b {
			for bit := range 8 {
				b[i] ^= 1 << bit
				writeProveFile(t, tmp, string(b))
				if _, err := checkProofFile(tmp, v); err == nil {
					t.Errorf("%s: flipping bit %d of byte %d still verifies", filepath.Base(f), bit, i)
				}
				b[i] ^= 1 << bit
			}
		}
	}
}
