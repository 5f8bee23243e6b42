package events

import (
	"encoding/binary"
	"time"

	"github.com/oklog/ulid/v2"
)

// Decoding is the cost of replay: [Decode] validates and re-encodes every
// envelope and payload with encoding/json, several times slower than
// reading the bytes from Pebble. A [Decoder] therefore reads the canonical
// form directly. It only accepts exactly the shapes the canonical encoder
// writes (fields in declaration order, no whitespace, plain integers);
// anything else — an escaped string, an unknown field, a float — falls back
// to the strict decoder, so both paths always yield the same envelope
// fields and payload. Validate runs on every decoded payload, except on
// the kinds a caller narrowed with [Decoder.Only]: of those only the form
// of every field is checked, so stored bytes whose unkept values break a
// rule are read where [Decode] refuses them (`verify` decodes strictly).
//
// The fast path checks the form of every field (the twin fuzz test holds
// it to this: it never accepts what [Decode] refuses, and it reads what it
// accepts identically) but not the hash chain: it is for bytes read back
// from a ledger, whose chain `verify` checks.

// Decoder decodes canonical envelope bytes read from a ledger, fast path
// first and the strict decoder as fallback. It keeps per-decoder caches
// (one reusable payload per kind, a bounded table of repeated strings, the
// last identities and the last date), so it is not safe for concurrent use;
// its zero value is ready.
//
// A payload returned by the fast path is reused by the next decode of the
// same kind: callers copy what they keep and never retain the payload
// itself. [Decoder.Only] narrows what Decode yields for a kind. What its fields point to (an *Instant, a []int, a string) is
// never reused and may be kept.
type Decoder struct {
	scratch  []scratch  // one per codec, by codec.idx
	only     []onlyMask // what Only narrowed, by codec.idx
	discard  int64      // where the fast path writes a number or bool it does not keep
	last     []string   // the last value of each interned field, by fieldInfo.slot
	names    map[string]string
	lastIDs  [3]string // activation, session and server of the last event
	day      [11]byte  // "YYYY-MM-DDT" of the cached midnight
	midnight time.Time
	dayOK    bool
	second   [19]byte // "YYYY-MM-DDTHH:MM:SS" of the cached second
	secBase  time.Time
	secOK    bool
	lastHash [64]byte // the last hash read, known to be hex: the next prev
	hashOK   bool
}

// Header is an envelope without its data and hashes: what a reducer needs
// besides the payload.
type Header struct {
	Seq        Seq
	Time       time.Time
	Kind       Kind
	Activation string
	Session    string
	Server     string
}

// Decode reads raw into h and returns its payload. Any failure is the
// strict decoder's and wraps [ErrInvalid].
func (d *Decoder) Decode(raw []byte, h *Header) (Payload, error) {
	if p, ok := d.fast(raw, h); ok {
		return p, nil
	}
	env, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	p, err := DecodePayload(env.Kind, env.Data)
	if err != nil {
		return nil, err
	}
	*h = Header{Seq: env.Seq, Time: env.Time, Kind: env.Kind, Activation: env.Activation, Session: env.Session, Server: env.Server}
	return p, nil
}

// DecodePayload is [DecodePayload] through the fast path first. What
// [Decoder.Only] set does not apply: the payload is whole and validated.
func (d *Decoder) DecodePayload(kind Kind, data []byte) (Payload, error) {
	if c := codecs[kind]; c != nil {
		if p, ok := c.decode(d, data, false); ok {
			return p, nil
		}
	}
	return DecodePayload(kind, data)
}

// parseTimeCached is parseTime with the Decoder's cache of the last date:
// events of one day share its midnight, and only the clock is added.
func (d *Decoder) parseTimeCached(b []byte) (time.Time, bool) {
	// Events come many to a second: then only the nanoseconds are new.
	// The second's nineteen bytes compare as three overlapping words, and
	// the first eight digits of the nanoseconds read as one (eightDigits).
	if len(b) == len(TimeLayout) && d.secOK && b[19] == '.' && b[29] == 'Z' &&
		binary.LittleEndian.Uint64(b) == binary.LittleEndian.Uint64(d.second[:]) &&
		binary.LittleEndian.Uint64(b[8:]) == binary.LittleEndian.Uint64(d.second[8:]) &&
		binary.LittleEndian.Uint64(b[11:]) == binary.LittleEndian.Uint64(d.second[11:]) {
		hi, ok := eightDigits(binary.LittleEndian.Uint64(b[20:]))
		if !ok || digitByte[b[28]] == 0 {
			return time.Time{}, false
		}
		return d.secBase.Add(time.Duration(hi*10 + int64(b[28]-'0'))), true
	}
	t, ok := d.parseTimeDay(b)
	if ok {
		copy(d.second[:], b[:19])
		d.secBase, d.secOK = t.Truncate(time.Second), true
	}
	return t, ok
}

// eightDigits reads eight ASCII digits packed little-endian in x (the
// first digit in the low byte) as a number, lane-parallel: it reports
// false unless every byte is a digit. A byte is a digit when its high
// nibble is 3 and adding 6 leaves it 3 (a carry out of a byte of at least
// 0xfa can reach the next, but that byte's own high nibble already fails).
// Then digits pair into two-digit, four-digit and the eight-digit value.
// TestEightDigits checks it against strconv on every digit position.
func eightDigits(x uint64) (int64, bool) {
	const (
		nibble = 0xf0f0f0f0f0f0f0f0
		zeros  = 0x3030303030303030
	)
	if x&nibble|((x+0x0606060606060606)&nibble)>>4 != 0x3333333333333333 {
		return 0, false
	}
	x -= zeros
	x = (x*10 + x>>8) & 0x00ff00ff00ff00ff
	x = (x*100 + x>>16) & 0x0000ffff0000ffff
	x = (x*10000 + x>>32) & 0xffffffff
	return int64(x), true
}

// parseTimeDay is parseTime with the Decoder's cache of the last date.
func (d *Decoder) parseTimeDay(b []byte) (time.Time, bool) {
	if len(b) == len(TimeLayout) && d.dayOK && string(b[:11]) == string(d.day[:]) && b[29] == 'Z' &&
		b[13] == ':' && b[16] == ':' && b[19] == '.' {
		// The clock's fifteen digits, unrolled: a digit check per byte
		// folded into one flag, and each field's value from its digits.
		ok := byte(1)
		for _, c := range b[11:13] {
			ok &= digitByte[c]
		}
		for _, c := range b[14:16] {
			ok &= digitByte[c]
		}
		for _, c := range b[17:19] {
			ok &= digitByte[c]
		}
		for _, c := range b[20:29] {
			ok &= digitByte[c]
		}
		if ok != 1 {
			return time.Time{}, false // parseTime refuses a non-digit too
		}
		hh := int64(b[11]-'0')*10 + int64(b[12]-'0')
		mm := int64(b[14]-'0')*10 + int64(b[15]-'0')
		ss := int64(b[17]-'0')*10 + int64(b[18]-'0')
		ns := int64(0)
		for _, c := range b[20:29] {
			ns = ns*10 + int64(c-'0')
		}
		if hh > 23 || mm > 59 || ss > 59 {
			return time.Time{}, false
		}
		clock := hh*3600 + mm*60 + ss
		return d.midnight.Add(time.Duration(clock)*time.Second + time.Duration(ns)), true
	}
	t, ok := parseTime(b)
	if ok {
		copy(d.day[:], b[:11])
		d.midnight, d.dayOK = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC), true
	}
	return t, ok
}

// parseTime parses TimeLayout ("2006-01-02T15:04:05.000000000Z").
func parseTime(b []byte) (time.Time, bool) {
	if len(b) != len(TimeLayout) || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' ||
		b[16] != ':' || b[19] != '.' || b[29] != 'Z' {
		return time.Time{}, false
	}
	num := func(from, to int) (int, bool) {
		n := 0
		for _, c := range b[from:to] {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	y, ok1 := num(0, 4)
	mo, ok2 := num(5, 7)
	d, ok3 := num(8, 10)
	h, ok4 := num(11, 13)
	mi, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	ns, ok7 := num(20, 29)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59 {
		return time.Time{}, false
	}
	t := time.Date(y, time.Month(mo), d, h, mi, sec, ns, time.UTC)
	if t.Day() != d { // normalised (e.g. February 30): not a valid time
		return time.Time{}, false
	}
	return t, true
}

// idKeys are the keys of the envelope's identities, in their order, and
// the separators after them the envelope's other keys of more than eight
// bytes: each is matched like a payload's field key (fieldInfo.keyAt), as
// two masked words.
var (
	idKeys  = [3]fieldInfo{wordKey(`,"activation":`), wordKey(`,"session":`), wordKey(`,"server":`)}
	timeSep = wordKey(`","time":"`)
	kindSep = wordKey(`","kind":`)
	prevSep = wordKey(`,"prev":"`)
	hashSep = wordKey(`","hash":"`)
)

// wordKey returns key (at most sixteen bytes) ready for keyAt.
func wordKey(key string) fieldInfo {
	f := fieldInfo{key: key}
	f.head, f.headMask, f.tail, f.tailMask = keyWords(key)
	return f
}

// fast reads the canonical envelope form
//
//	{"seq":N,"id":"<26>","time":"<30>","kind":"…","v":1[,"activation":"…"][,"session":"…"][,"server":"…"],"data":{…},"prev":"<64>","hash":"<64>"}
//
// into h and returns the payload. It reports false for anything else (the
// caller then uses the strict decoder).
func (d *Decoder) fast(raw []byte, h *Header) (Payload, bool) {
	const suffix = len(`,"prev":"`) + 64 + len(`","hash":"`) + 64 + len(`"}`)
	if !hasPrefixAt(raw, 0, seqPrefix) || len(raw) < 100+suffix || len(raw) > MaxEventBytes {
		return nil, false
	}
	seq, i, ok := plainInt(raw, len(seqPrefix))
	if !ok || seq <= 0 || !hasPrefixAt(raw, i, `,"id":"`) {
		return nil, false
	}
	i += len(`,"id":"`)
	if i+ulid.EncodedSize > len(raw) {
		return nil, false
	}
	if !canonicalULID(raw[i : i+ulid.EncodedSize]) {
		return nil, false
	}
	i += ulid.EncodedSize
	if !timeSep.keyAt(raw, i) {
		return nil, false
	}
	i += len(`","time":"`)
	if i+30 > len(raw) {
		return nil, false
	}
	t, ok := d.parseTimeCached(raw[i : i+30])
	if !ok {
		return nil, false
	}
	i += 30
	if !kindSep.keyAt(raw, i) {
		return nil, false
	}
	kindB, n, ok := plainBytes(raw, i+len(`","kind":`))
	if !ok || !hasPrefixAt(raw, n, `,"v":1,"`) {
		return nil, false
	}
	i = n + len(`,"v":1`)
	var ids [3]string
	for j := range idKeys {
		if k := &idKeys[j]; k.keyAt(raw, i) {
			name := k.key
			// Mostly the same identity as the last event's: already
			// checked, so matching it is reading it.
			if last := d.lastIDs[j]; last != "" && hasPrefixAt(raw, i+len(name), `"`) &&
				hasPrefixAt(raw, i+len(name)+1, last) && hasPrefixAt(raw, i+len(name)+1+len(last), `"`) {
				ids[j] = last
				i += len(name) + len(last) + 2
				continue
			}
			var b []byte
			if b, i, ok = plainBytes(raw, i+len(name)); !ok || !validIDBytes(b) {
				return nil, false
			}
			switch {
			case string(b) == d.lastIDs[j]:
				ids[j] = d.lastIDs[j]
			case j == 0: // activations are many and short-lived: not interned
				ids[j] = string(b)
				d.lastIDs[j] = ids[j]
			default:
				ids[j] = d.intern(b)
				d.lastIDs[j] = ids[j]
			}
		}
	}
	if ids[0] == NoActivation {
		return nil, false
	}
	end := len(raw) - suffix
	hashAt := len(raw) - len(`"}`) - 64
	prev, hash := raw[end+len(`,"prev":"`):end+len(`,"prev":"`)+64], raw[hashAt:hashAt+64]
	if !hasPrefixAt(raw, i, `,"data":`) || !prevSep.keyAt(raw, end) || !hashSep.keyAt(raw, hashAt-len(hashSep.key)) ||
		!hasPrefixAt(raw, len(raw)-2, `"}`) || !isHex64Bytes(hash) {
		return nil, false
	}
	// In a replay each prev is the hash read just before: equal to
	// checked hex digits, it is hex digits.
	if !(d.hashOK && string(prev) == string(d.lastHash[:])) && !isHex64Bytes(prev) {
		return nil, false
	}
	copy(d.lastHash[:], hash)
	d.hashOK = true
	data := raw[i+len(`,"data":`) : end]
	c := codecFor(kindB)
	if c == nil {
		return nil, false
	}
	p, ok := c.decode(d, data, true)
	if !ok {
		return nil, false
	}
	*h = Header{Seq: Seq(seq), Time: t, Kind: c.kind, Activation: ids[0], Session: ids[1], Server: ids[2]}
	return p, true
}
