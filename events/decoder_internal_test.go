package events

import (
	"bytes"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// The lane-parallel digest check agrees with the byte-by-byte rule for
// every byte value at every position.
func TestIsHex64BytesMatchesRule(t *testing.T) {
	base := []byte(strings.Repeat("0123456789abcdef", 4))
	if !isHex64Bytes(base) || isHex64Bytes(base[:63]) {
		t.Fatal("length or base case")
	}
	for pos := range 64 {
		for c := range 256 {
			b := bytes.Clone(base)
			b[pos] = byte(c)
			want := '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
			if got := isHex64Bytes(b); got != want {
				t.Fatalf("byte %#x at %d: got %v, want %v", c, pos, got, want)
			}
		}
	}
}

// canonicalULID is ulid.ParseStrict without lowercase, for every byte
// value at every position.
func TestCanonicalULIDMatchesParseStrict(t *testing.T) {
	base := []byte(ulid.Make().String())
	for pos := range len(base) {
		for c := range 256 {
			b := bytes.Clone(base)
			b[pos] = byte(c)
			_, err := ulid.ParseStrict(string(b))
			want := err == nil && string(b) == strings.ToUpper(string(b))
			if got := canonicalULID(b); got != want {
				t.Fatalf("%q: got %v, want %v", b, got, want)
			}
		}
	}
}

// The lane-parallel plain-run scan agrees with the plainByte table for
// every byte value at every position of runs of every length up to three
// words (the word loop, the tail loop and their boundary).
func TestPlainRunMatchesTable(t *testing.T) {
	for n := 0; n <= 24; n++ {
		base := bytes.Repeat([]byte("a"), n)
		if got := plainRun(base); got != n {
			t.Fatalf("plain run of %d: got %d", n, got)
		}
		for pos := range n {
			for c := range 256 {
				b := bytes.Clone(base)
				b[pos] = byte(c)
				want := n
				if plainByte[c] == 0 {
					want = pos
				}
				if got := plainRun(b); got != want {
					t.Fatalf("byte %#x at %d of %d: got %d, want %d", c, pos, n, got, want)
				}
			}
		}
	}
}
