package events

import (
	"bytes"
	"reflect"
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

// upperName is a named string that rewrites its value when decoded: the
// fast path, which reads a string by its reflect kind, would not.
type upperName string

func (u *upperName) UnmarshalJSON(b []byte) error {
	*u = upperName(strings.ToUpper(string(b)))
	return nil
}

// textName decodes through encoding.TextUnmarshaler.
type textName string

func (n *textName) UnmarshalText(b []byte) error { *n = textName("t:" + string(b)); return nil }

// A field whose type decodes through its own method is not read by the
// fast path (its kind falls back to the strict decoder); *Instant, whose
// form the fast path reads itself, and plain kinds are.
func TestFastFieldTypeRefusesCustomDecoding(t *testing.T) {
	for _, x := range []any{upperName(""), textName(""), Hash{}} {
		if ft, ok := fastFieldType(reflect.TypeOf(x)); ok {
			t.Fatalf("%T read by the fast path as %d", x, ft)
		}
	}
	for x, want := range map[reflect.Type]fieldType{
		reflect.TypeFor[string](): fString, reflect.TypeFor[CallOutcome](): fString, reflect.TypeFor[int64](): fInt64,
		reflect.TypeFor[bool](): fBool, reflect.TypeFor[*Instant](): fInstant, reflect.TypeFor[[]int](): fInts,
	} {
		if ft, ok := fastFieldType(x); !ok || ft != want {
			t.Fatalf("%v: %d %v, want %d", x, ft, ok, want)
		}
	}
	// No kind of the registry has such a field: each keeps its codec.
	for _, k := range Kinds() {
		if codecs[k] == nil {
			t.Errorf("kind %s lost its fast codec", k)
		}
	}
}

// keyAt agrees with hasPrefixAt for the key of every field of every codec
// and of the envelope's identities and separators, on the key itself, on every one-byte
// change of it, on every truncation and at every offset of a buffer
// holding it, each both at the end of the buffer and followed by more.
func TestKeyAtMatchesHasPrefixAt(t *testing.T) {
	check := func(f *fieldInfo, data []byte, i int) {
		t.Helper()
		for _, b := range [][]byte{data, append(bytes.Clone(data), strings.Repeat("z", 20)...)} {
			if got, want := f.keyAt(b, i), hasPrefixAt(b, i, f.key); got != want {
				t.Fatalf("key %q in %q at %d: keyAt %v, hasPrefixAt %v", f.key, b, i, got, want)
			}
		}
	}
	mutate := func(f *fieldInfo) {
		buf := []byte(`,` + f.key + `"x",`)
		for i := range len(buf) + 1 {
			check(f, buf, i)
		}
		for n := range len(f.key) + 1 {
			check(f, []byte(f.key[:n]), 0)
		}
		for pos := range len(f.key) {
			for _, c := range []byte{0, '"', ':', 'a', 'z', '_', 0xff, f.key[pos] ^ 1, f.key[pos] ^ 0x20} {
				b := []byte(f.key)
				b[pos] = c
				check(f, b, 0)
			}
		}
	}
	seen := 0
	all := [][]fieldInfo{idKeys[:], {timeSep, kindSep, prevSep, hashSep}}
	for _, c := range codecs {
		all = append(all, c.fields)
	}
	for _, fields := range all {
		for fi := range fields {
			mutate(&fields[fi])
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("no codec fields")
	}
	// Keys of every length from the shortest: the word split's boundaries.
	for n := 1; n <= 30; n++ {
		f := wordKey(`"` + strings.Repeat("k", n) + `":`)
		mutate(&f)
	}
}

// plainRun finds the first refused byte when a word holds several: a
// refused byte's borrow may mark the lanes after it, never one before.
func TestPlainRunManyRefused(t *testing.T) {
	refused := []byte{0, 1, 0x1f, '"', '&', '<', '>', '\\', 0x7f, 0x80, 0xff}
	plain := []byte{' ', '!', '#', '\'', '=', '?', 'A', '[', ']', '~', 0x21, 0x25, 0x27, 0x3d, 0x3f}
	ref := func(b []byte) int {
		for i, c := range b {
			if plainByte[c] == 0 {
				return i
			}
		}
		return len(b)
	}
	rnd := uint64(1)
	next := func(n int) int { rnd = rnd*6364136223846793005 + 1442695040888963407; return int(rnd>>33) % n }
	for range 200_000 {
		b := make([]byte, 1+next(24))
		for i := range b {
			if next(4) == 0 {
				b[i] = refused[next(len(refused))]
			} else {
				b[i] = plain[next(len(plain))]
			}
		}
		if got, want := plainRun(b), ref(b); got != want {
			t.Fatalf("%q: got %d, want %d", b, got, want)
		}
	}
}
