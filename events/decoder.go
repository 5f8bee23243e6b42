package events

import (
	"reflect"
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
// fields and payload. Validate runs on every decoded payload.
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
// itself. What its fields point to (an *Instant, a []int, a string) is
// never reused and may be kept.
type Decoder struct {
	scratch  []reflect.Value
	names    map[string]string
	lastIDs  [3]string // activation, session and server of the last event
	day      [11]byte  // "YYYY-MM-DDT" of the cached midnight
	midnight time.Time
	dayOK    bool
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

// DecodePayload is [DecodePayload] through the fast path first.
func (d *Decoder) DecodePayload(kind Kind, data []byte) (Payload, error) {
	if c := codecs[kind]; c != nil {
		if p, ok := c.decode(d, data); ok {
			return p, nil
		}
	}
	return DecodePayload(kind, data)
}

type fieldType uint8

const (
	fString fieldType = iota
	fInt
	fInt64
	fBool
	fInstant
	fInts
)

type fieldInfo struct {
	name   string
	index  int
	typ    fieldType
	intern bool // a low-cardinality value: interned instead of allocated
	// omitEmpty: the encoder leaves the field out when it is the zero
	// value; otherwise the field is always written. Canonical bytes
	// therefore never hold a zero omitempty field and never lack another.
	omitEmpty bool
}

type codec struct {
	idx    int // index into Decoder.scratch
	typ    reflect.Type
	fields []fieldInfo
}

// internFields are payload fields whose values repeat (codes, origins,
// digests of configurations): they are interned per Decoder.
var internFields = map[string]bool{"outcome": true, "reason": true, "scope": true, "method": true,
	"obligation": true, "phase": true, "transport": true, "cleanup": true, "signal": true, "remote": true,
	"transport_accepted": true, "notification_delivered": true, "helper_version": true, "origin": true,
	"tool": true, "fingerprint": true, "listing_digest": true, "digest": true, "key_session": true,
	"owner": true, "worker": true, "detail": true}

// maxInterned bounds a Decoder's intern table; when it is full, further
// distinct values are simply allocated.
const maxInterned = 4096

var (
	instantPtrType = reflect.TypeFor[*Instant]()
	intSliceType   = reflect.TypeFor[[]int]()
)

// codecs maps each kind to its field table, built once from the events
// registry. A kind with a field of a type the fast path does not know has
// no codec and always uses the strict decoder.
var codecs = func() map[Kind]*codec {
	m := map[Kind]*codec{}
	for _, k := range Kinds() {
		p, err := New(k)
		if err != nil {
			continue
		}
		t := reflect.TypeOf(p).Elem()
		c := &codec{idx: len(m), typ: t}
		ok := true
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := cutComma(f.Tag.Get("json"))
			if name == "" || name == "-" {
				ok = false
				break
			}
			var ft fieldType
			switch {
			case f.Type.Kind() == reflect.String:
				ft = fString
			case f.Type.Kind() == reflect.Int:
				ft = fInt
			case f.Type.Kind() == reflect.Int64:
				ft = fInt64
			case f.Type.Kind() == reflect.Bool:
				ft = fBool
			case f.Type == instantPtrType:
				ft = fInstant
			case f.Type == intSliceType:
				ft = fInts
			default:
				ok = false
			}
			c.fields = append(c.fields, fieldInfo{name: name, index: i, typ: ft, intern: internFields[name], omitEmpty: opts == "omitempty"})
		}
		if ok {
			m[k] = c
		}
	}
	return m
}()

func cutComma(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// intern returns b as a string, from the Decoder's bounded table when seen.
func (d *Decoder) intern(b []byte) string {
	if v, ok := d.names[string(b)]; ok {
		return v
	}
	v := string(b)
	if d.names == nil {
		d.names = make(map[string]string)
	}
	if len(d.names) < maxInterned {
		d.names[v] = v
	}
	return v
}

// decode parses a canonical flat JSON object into the Decoder's scratch
// payload of c's kind. It reports false for anything it does not handle
// exactly.
func (c *codec) decode(d *Decoder, data []byte) (Payload, bool) {
	if d.scratch == nil {
		d.scratch = make([]reflect.Value, len(codecs))
	}
	v := d.scratch[c.idx]
	if !v.IsValid() {
		v = reflect.New(c.typ)
		d.scratch[c.idx] = v
	}
	s := v.Elem()
	s.SetZero()
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return nil, false
	}
	i, fi := 1, 0 // "{}" ends the loop at once; "{}" followed by more fails below
	for i < len(data)-1 {
		if i > 1 {
			if data[i] != ',' {
				return nil, false
			}
			i++
		}
		key, n, ok := plainString(data, i)
		if !ok || n >= len(data) || data[n] != ':' {
			return nil, false
		}
		i = n + 1
		for fi < len(c.fields) && c.fields[fi].name != key {
			if !c.fields[fi].omitEmpty {
				return nil, false // a field the encoder always writes is missing
			}
			fi++
		}
		if fi == len(c.fields) {
			return nil, false // unknown, repeated or out-of-order key
		}
		f := c.fields[fi]
		fi++
		fv := s.Field(f.index)
		switch f.typ {
		case fString:
			raw, n, ok := plainBytes(data, i)
			if !ok {
				return nil, false
			}
			if f.intern {
				fv.SetString(d.intern(raw))
			} else {
				fv.SetString(string(raw))
			}
			i = n
		case fInt, fInt64:
			x, n, ok := plainInt(data, i)
			if !ok {
				return nil, false
			}
			fv.SetInt(x)
			i = n
		case fBool:
			switch {
			case hasPrefixAt(data, i, "true"):
				fv.SetBool(true)
				i += 4
			case hasPrefixAt(data, i, "false"):
				i += 5
			default:
				return nil, false
			}
		case fInstant:
			if i+32 > len(data) || data[i] != '"' || data[i+31] != '"' {
				return nil, false
			}
			t, ok := parseTime(data[i+1 : i+31])
			if !ok {
				return nil, false
			}
			fv.Set(reflect.ValueOf(&Instant{Time: t}))
			i += 32
		case fInts:
			if i >= len(data) || data[i] != '[' {
				return nil, false
			}
			i++
			var xs []int
			for {
				x, n, ok := plainInt(data, i)
				if !ok {
					return nil, false
				}
				xs = append(xs, int(x))
				i = n
				if i < len(data) && data[i] == ',' {
					i++
					continue
				}
				if i < len(data) && data[i] == ']' {
					i++
					break
				}
				return nil, false
			}
			fv.Set(reflect.ValueOf(xs))
		}
		if f.omitEmpty && zeroField(f.typ, fv) {
			return nil, false // the encoder would have left it out
		}
	}
	for ; fi < len(c.fields); fi++ {
		if !c.fields[fi].omitEmpty {
			return nil, false
		}
	}
	p := v.Interface().(Payload)
	if p.Validate() != nil {
		return nil, false // let the strict decoder produce the error
	}
	return p, true
}

// parseTimeCached is parseTime with the Decoder's cache of the last date:
// events of one day share its midnight, and only the clock is added.
func (d *Decoder) parseTimeCached(b []byte) (time.Time, bool) {
	if len(b) == len(TimeLayout) && d.dayOK && string(b[:11]) == string(d.day[:]) && b[29] == 'Z' &&
		b[13] == ':' && b[16] == ':' && b[19] == '.' {
		var hms [3]int64
		for k, r := range [...][2]int{{11, 13}, {14, 16}, {17, 19}} {
			for _, c := range b[r[0]:r[1]] {
				if c < '0' || c > '9' {
					return parseTime(b)
				}
				hms[k] = hms[k]*10 + int64(c-'0')
			}
		}
		ns := int64(0)
		for _, c := range b[20:29] {
			if c < '0' || c > '9' {
				return parseTime(b)
			}
			ns = ns*10 + int64(c-'0')
		}
		if hms[0] > 23 || hms[1] > 59 || hms[2] > 59 {
			return time.Time{}, false
		}
		clock := hms[0]*3600 + hms[1]*60 + hms[2]
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
	if !hasPrefixAt(raw, i, `","time":"`) {
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
	if !hasPrefixAt(raw, i, `","kind":`) {
		return nil, false
	}
	kindB, n, ok := plainBytes(raw, i+len(`","kind":`))
	if !ok || !hasPrefixAt(raw, n, `,"v":1,"`) {
		return nil, false
	}
	i = n + len(`,"v":1`)
	var ids [3]string
	for j, name := range [3]string{`,"activation":`, `,"session":`, `,"server":`} {
		if hasPrefixAt(raw, i, name) {
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
	if !hasPrefixAt(raw, i, `,"data":`) || !hasPrefixAt(raw, end, `,"prev":"`) || !hasPrefixAt(raw, hashAt-len(`","hash":"`), `","hash":"`) ||
		!isHex64Bytes(raw[end+len(`,"prev":"`):end+len(`,"prev":"`)+64]) || !isHex64Bytes(raw[hashAt:hashAt+64]) ||
		!hasPrefixAt(raw, len(raw)-2, `"}`) {
		return nil, false
	}
	data := raw[i+len(`,"data":`) : end]
	c := codecs[Kind(kindB)]
	if c == nil {
		return nil, false
	}
	p, ok := c.decode(d, data)
	if !ok {
		return nil, false
	}
	*h = Header{Seq: Seq(seq), Time: t, Kind: p.Kind(), Activation: ids[0], Session: ids[1], Server: ids[2]}
	return p, true
}
