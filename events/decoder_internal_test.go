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
