package events

import (
	"encoding/binary"
	"math/bits"

	"github.com/oklog/ulid/v2"
)

// The byte-level checks of the fast decoder: each holds the canonical form
// to exactly what Decode accepts, and each runs per event on the replay
// path, so they are written without a branch per byte where it matters.

func hasPrefixAt(b []byte, i int, p string) bool {
	// The conversion does not allocate: the compiler compares in place.
	return i >= 0 && len(b)-i >= len(p) && string(b[i:i+len(p)]) == p
}

// plainByte marks the bytes encoding/json writes as themselves inside a
// string: printable ASCII except the quote, the backslash and the three
// bytes it escapes for HTML safety (<, >, &). Everything else — control
// bytes, escapes, and all non-ASCII (which may be invalid UTF-8 or U+2028
// and U+2029, both escaped) — sends the string to the strict decoder.
var plainByte = func() (t [256]byte) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = 1
	}
	for _, c := range `"\<>&` {
		t[c] = 0
	}
	return t
}()

// digitByte marks the ASCII digits.
var digitByte = func() (t [256]byte) {
	for c := '0'; c <= '9'; c++ {
		t[c] = 1
	}
	return t
}()

// plainBytes reads a JSON string starting at b[i] made of plainByte bytes
// only; it returns the string's bytes (aliasing b) and the index after it.
// The string ends at its first byte that is not plain, which must be the
// closing quote: that is the same as finding the first quote and checking
// every byte before it.
func plainBytes(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	j := i + 1 + plainRun(b[i+1:])
	if j >= len(b) || b[j] != '"' {
		return nil, 0, false
	}
	return b[i+1 : j], j + 1, true
}

// plainRun returns the length of the longest prefix of b made of plainByte
// bytes. Strings are mostly digests and identities, so it checks eight
// bytes at a time, like isHex64Bytes. With each lane's top bit cleared
// first (y), every lane is below 0x80, and each term below sets the top
// bit of the first lane that is not plain for its reason: adding never
// carries out of a lane, and subtracting one from each lane borrows only
// out of a lane that was 0, so a term may also mark lanes after its first
// (those a borrow reached) but never one before it. Only the first marked
// lane of their union is read, and it is the first lane that is not plain.
// The refused bytes pair up to save terms: 0x7f and every byte from 0x80
// are "at least 0x7f"; '"' (0x22) and '&' (0x26) differ only in bit 2,
// '<' (0x3c) and '>' (0x3e) only in bit 1, so setting that bit makes each
// pair one value (and no other byte becomes it). TestPlainRunMatchesTable
// checks every byte value at every position against the table, and
// TestPlainRunManyRefused runs with several refused bytes.
func plainRun(b []byte) int {
	const (
		ones = 0x0101010101010101
		top  = 0x8080808080808080
		low  = 0x7f7f7f7f7f7f7f7f
	)
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		y := x & low
		bad := (x | (y + ones) | // at least 0x7f
			^(y + (0x80-0x20)*ones) | // a control byte
			((y | 0x04*ones) ^ ('&' * ones) - ones) | // '"' or '&'
			((y | 0x02*ones) ^ ('>' * ones) - ones) | // '<' or '>'
			(y ^ ('\\' * ones) - ones)) & top
		if bad != 0 {
			return i + bits.TrailingZeros64(bad)/8
		}
	}
	for ; i < len(b); i++ {
		if plainByte[b[i]] == 0 {
			break
		}
	}
	return i
}

// plainString is plainBytes as a new string.
func plainString(b []byte, i int) (string, int, bool) {
	s, n, ok := plainBytes(b, i)
	return string(s), n, ok
}

// plainInt reads a canonical JSON integer (no leading zeros, no fraction or
// exponent) starting at b[i].
func plainInt(b []byte, i int) (int64, int, bool) {
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var x int64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i-start >= 18 {
			return 0, 0, false
		}
		x = x*10 + int64(b[i]-'0')
		i++
	}
	if i == start || (b[start] == '0' && i-start > 1) || (neg && x == 0) {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	if neg {
		x = -x
	}
	return x, i, true
}

// isHex64Bytes is the digest rule for bytes: 64 lowercase hex digits. It
// runs twice per event (prev, hash) on the replay path, so it checks eight
// bytes at a time without a branch per byte (a comparison chain
// mispredicts on random hex digits): in each byte lane, adding a constant
// sets the lane's top bit exactly when the byte is at least some bound,
// and no lane carries into the next because every byte is below 0x80.
func isHex64Bytes(b []byte) bool {
	if len(b) != 64 {
		return false
	}
	const (
		ones = 0x0101010101010101
		top  = 0x8080808080808080
	)
	for i := 0; i < 64; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if x&top != 0 {
			return false
		}
		ge := func(bound uint64) uint64 { return (x + (0x80-bound)*ones) & top }
		digit := ge('0') &^ ge('9'+1)
		letter := ge('a') &^ ge('f'+1)
		if digit|letter != top {
			return false
		}
	}
	return true
}

// canonicalULID reports whether id is a ULID as the canonical encoder
// writes it: 26 characters of uppercase Crockford base32 (no I, L, O, U),
// the first at most '7' (a larger one would overflow 128 bits). That is
// exactly what ulid.ParseStrict accepts, minus lowercase.
func canonicalULID(id []byte) bool {
	if len(id) != ulid.EncodedSize || id[0] > '7' {
		return false
	}
	ok := byte(1)
	for _, c := range id {
		ok &= crockford[c]
	}
	return ok == 1
}

// crockford is 1 for the uppercase Crockford base32 alphabet.
var crockford = func() (t [256]byte) {
	for _, c := range "0123456789ABCDEFGHJKMNPQRSTVWXYZ" {
		t[c] = 1
	}
	return t
}()

// validIDBytes is [ValidID] for bytes.
func validIDBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxIDLen {
		return false
	}
	for _, c := range b {
		if !isIDByte(c) {
			return false
		}
	}
	return true
}
