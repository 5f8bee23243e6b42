package events

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
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

// eightDigits reads every eight-digit string as strconv does and refuses
// any with a non-digit byte, at every position and of every value.
func TestEightDigits(t *testing.T) {
	word := func(s string) uint64 {
		var b [8]byte
		copy(b[:], s)
		return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	}
	rnd := uint64(7)
	for k := range 100_000 {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		s := fmt.Sprintf("%08d", (rnd>>20)%100_000_000)
		if k < 10 {
			s = []string{"00000000", "99999999", "12345678", "00000001", "10000000", "09090909", "90909090", "00999999", "99000000", "50505050"}[k]
		}
		want, _ := strconv.ParseInt(s, 10, 64)
		if got, ok := eightDigits(word(s)); !ok || got != want {
			t.Fatalf("%q: got %d %v, want %d", s, got, ok, want)
		}
		if k < 20 {
			for pos := range 8 {
				for c := range 256 {
					b := []byte(s)
					b[pos] = byte(c)
					_, ok := eightDigits(word(string(b)))
					if want := '0' <= c && c <= '9'; ok != want {
						t.Fatalf("%q: ok %v, want %v", b, ok, want)
					}
				}
			}
		}
	}
}

// A warm decoder's time cache reads every time parseTime reads, alike,
// and refuses the rest: each byte of a time in the cached second, of
// every value, and times of other seconds and days.
func TestParseTimeCachedMatchesParseTime(t *testing.T) {
	var d Decoder
	base := "2026-11-30T10:00:59.123456789Z"
	if _, ok := d.parseTimeCached([]byte(base)); !ok {
		t.Fatal("base refused")
	}
	check := func(b []byte) {
		t.Helper()
		got, gok := d.parseTimeCached(b)
		want, wok := parseTime(b)
		if gok != wok || !got.Equal(want) {
			t.Fatalf("%q: cached %v %v, parseTime %v %v", b, got, gok, want, wok)
		}
	}
	for pos := range len(base) {
		for c := range 256 {
			b := []byte(base)
			b[pos] = byte(c)
			check(b)
			check([]byte(base)) // back in the cached second
		}
	}
	for _, s := range []string{"2026-11-30T10:01:00.000000000Z", "2026-12-01T00:00:00.999999999Z", "2026-11-30T10:00:59.000000000Z", base} {
		check([]byte(s))
	}
}
