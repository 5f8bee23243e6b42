package events

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"unsafe"
)

// The payload half of the fast decoder: a field table per kind, built once
// from the registry by reflection, and a decode loop that writes fields
// through their offsets in a reused payload, so the per-event path does
// no reflection and allocates only the strings it must keep.

type fieldType uint8

const (
	fString fieldType = iota
	fInt
	fInt64
	fBool
	fInstant
	fInts
	fStrings
)

type fieldInfo struct {
	name   string
	key    string  // `"name":`, as the canonical encoder writes it
	offset uintptr // of the field in its payload struct
	typ    fieldType
	intern bool // a low-cardinality value: interned instead of allocated
	// slot indexes Decoder.last: per codec field for an interned field,
	// per field name for the others (a call's call_id, a request's ref
	// repeat across the kinds of its events).
	slot int
	// omitEmpty: the encoder leaves the field out when it is the zero
	// value; otherwise the field is always written. Canonical bytes
	// therefore never hold a zero omitempty field and never lack another.
	omitEmpty bool
	// head and tail are the key's first sixteen bytes as little-endian
	// words; their masks select the bytes that belong to the key (see
	// keyAt).
	head, headMask, tail, tailMask uint64
}

type codec struct {
	idx    int // index into Decoder.scratch
	kind   Kind
	typ    reflect.Type
	fields []fieldInfo
}

// scratch is a Decoder's reusable payload of one kind: the value, its
// address for the field writes, and the Payload interface over it.
type scratch struct {
	v    reflect.Value
	base unsafe.Pointer
	p    Payload
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
	strSliceType   = reflect.TypeFor[[]string]()
)

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// customDecoding reports whether encoding/json decodes t (a field's type)
// through the type's own method rather than by its reflect kind.
func customDecoding(t reflect.Type) bool {
	for _, x := range []reflect.Type{t, reflect.PointerTo(t)} {
		if x.Implements(jsonUnmarshalerType) || x.Implements(textUnmarshalerType) {
			return true
		}
	}
	return false
}

// fastFieldType returns how the fast path reads a field of type t, and
// false when it cannot: a type of another reflect kind, or one with its own
// UnmarshalJSON or UnmarshalText (a named string that checks or rewrites
// its value) other than *Instant, whose form the fast path reads itself.
// A kind with such a field has no codec: the strict decoder reads it.
func fastFieldType(t reflect.Type) (fieldType, bool) {
	if t == instantPtrType {
		return fInstant, true
	}
	if customDecoding(t) {
		return 0, false
	}
	switch {
	case t.Kind() == reflect.String:
		return fString, true
	case t.Kind() == reflect.Int:
		return fInt, true
	case t.Kind() == reflect.Int64:
		return fInt64, true
	case t.Kind() == reflect.Bool:
		return fBool, true
	case t == intSliceType:
		return fInts, true
	case t == strSliceType:
		return fStrings, true
	}
	return 0, false
}

// codecs maps each kind to its field table, built once from the events
// registry. A kind with a field of a type the fast path does not know has
// no codec and always uses the strict decoder. internSlots counts the
// interned fields of all codecs.
var codecs, lastSlots = func() (map[Kind]*codec, int) {
	m, slots := map[Kind]*codec{}, 0
	byName := map[string]int{}
	for _, k := range Kinds() {
		p, err := New(k)
		if err != nil {
			continue
		}
		t := reflect.TypeOf(p).Elem()
		c := &codec{idx: len(m), kind: k, typ: t}
		ok := true
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := cutComma(f.Tag.Get("json"))
			if name == "" || name == "-" {
				ok = false
				break
			}
			ft, known := fastFieldType(f.Type)
			if !known {
				ok = false
			}
			fi := fieldInfo{name: name, key: `"` + name + `":`, offset: f.Offset, typ: ft,
				intern: ft == fString && internFields[name], omitEmpty: opts == "omitempty", slot: -1}
			fi.head, fi.headMask, fi.tail, fi.tailMask = keyWords(fi.key)
			switch {
			case fi.intern:
				fi.slot = slots
				slots++
			case ft == fString:
				if _, seen := byName[name]; !seen {
					byName[name] = slots
					slots++
				}
				fi.slot = byName[name]
			}
			c.fields = append(c.fields, fi)
		}
		if ok {
			m[k] = c
		}
	}
	return m, slots
}()

// kindTable finds a codec from a kind's bytes without hashing the whole
// name: kinds differ in their length and last bytes, so a small
// open-addressed table on those resolves each in one or two comparisons.
var kindTable = func() (t [256]*codec) {
	for _, c := range codecs {
		h := kindHash([]byte(c.kind))
		for t[h] != nil {
			h = (h + 1) & 255
		}
		t[h] = c
	}
	return t
}()

func kindHash(b []byte) uint8 {
	n := len(b)
	if n < 2 {
		return uint8(n)
	}
	return uint8(n*37 + int(b[n-1])*7 + int(b[n-2])*3 + int(b[n/2]))
}

// codecFor returns the codec of the kind named by b, or nil.
func codecFor(b []byte) *codec {
	h := kindHash(b)
	for range len(kindTable) {
		c := kindTable[h]
		if c == nil {
			return nil
		}
		if string(c.kind) == string(b) {
			return c
		}
		h++
	}
	return nil
}

// keyWords returns a field key's first sixteen bytes as two little-endian
// words, and the masks of the bytes of each that belong to the key (the
// rest of a shorter key's words are zero and not compared).
func keyWords(key string) (head, headMask, tail, tailMask uint64) {
	var b [16]byte
	n := copy(b[:], key)
	for j := range n {
		if j < 8 {
			headMask |= 0xff << (8 * j)
		} else {
			tailMask |= 0xff << (8 * (j - 8))
		}
	}
	return binary.LittleEndian.Uint64(b[:8]), headMask, binary.LittleEndian.Uint64(b[8:]), tailMask
}

// keyAt is hasPrefixAt(data, i, f.key) for i >= 0, without a call to the
// runtime's comparison for a key of up to sixteen bytes (nearly all):
// with sixteen bytes to read at i, it compares two masked words. Near the
// end of data, and for a longer key, it is hasPrefixAt itself.
// TestKeyAtMatchesHasPrefixAt checks it against hasPrefixAt.
func (f *fieldInfo) keyAt(data []byte, i int) bool {
	if len(data)-i < 16 || len(f.key) > 16 {
		return hasPrefixAt(data, i, f.key)
	}
	return binary.LittleEndian.Uint64(data[i:])&f.headMask == f.head &&
		binary.LittleEndian.Uint64(data[i+8:])&f.tailMask == f.tail
}

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

// field returns the string value b of field f, trying first the last
// value of its slot: an interned field mostly repeats its value from the
// last event of the kind, and an identity (a ref, a call_id) mostly
// repeats the one of the event before (the request it completes, the call
// it finishes). A comparison is cheaper than a lookup or an allocation.
func (d *Decoder) field(f *fieldInfo, b []byte) string {
	if d.last == nil {
		d.last = make([]string, lastSlots)
	}
	if v := d.last[f.slot]; v == string(b) {
		return v
	}
	var v string
	if f.intern {
		v = d.intern(b)
	} else {
		v = string(b)
	}
	d.last[f.slot] = v
	return v
}

// payload returns the Decoder's zeroed scratch payload of c's kind.
func (d *Decoder) payload(c *codec) *scratch {
	if d.scratch == nil {
		d.scratch = make([]scratch, len(codecs))
	}
	sc := &d.scratch[c.idx]
	if sc.p == nil {
		sc.v = reflect.New(c.typ)
		sc.base = sc.v.UnsafePointer()
		sc.p = sc.v.Interface().(Payload)
	} else {
		sc.v.Elem().SetZero()
	}
	return sc
}

// decode parses a canonical flat JSON object into the Decoder's scratch
// payload of c's kind. It reports false for anything it does not handle
// exactly. stored is true for the data of a stored envelope ([Decoder.Decode]),
// to which what [Decoder.Only] set applies.
func (c *codec) decode(d *Decoder, data []byte, stored bool) (Payload, bool) {
	sc := d.payload(c)
	var skip uint64
	narrowed := false
	if stored {
		skip, narrowed = d.narrowed(c)
	}
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return nil, false
	}
	// checked: a kept field with value rules is present (see Decoder.Only).
	checked := false
	i, fi := 1, 0 // "{}" ends the loop at once; "{}" followed by more fails below
	for i < len(data)-1 {
		if i > 1 {
			if data[i] != ',' {
				return nil, false
			}
			i++
		}
		// The key must be the next field in declaration order, skipping
		// only fields the encoder may leave out; field names are plain, so
		// matching `"name":` is reading a plain string equal to the name.
		for fi < len(c.fields) && !c.fields[fi].keyAt(data, i) {
			if !c.fields[fi].omitEmpty {
				return nil, false // a field the encoder always writes is missing
			}
			fi++
		}
		if fi == len(c.fields) {
			return nil, false // unknown, repeated or out-of-order key
		}
		f := &c.fields[fi]
		keep := skip&(1<<fi) == 0
		fi++
		i += len(f.key)
		at := unsafe.Add(sc.base, f.offset) // the field f in the scratch payload
		if !keep {
			at = unsafe.Pointer(&d.discard) // read for its form, not kept
		}
		zero := false
		switch f.typ {
		case fString:
			// plainBytes, without its call: strings are most fields. The
			// key's colon is data[i-1], so data[i] is in range.
			if data[i] != '"' {
				return nil, false
			}
			j := i + 1 + plainRun(data[i+1:])
			if j >= len(data) || data[j] != '"' {
				return nil, false
			}
			switch {
			case j == i+1:
				zero = true
			case keep:
				*(*string)(at) = d.field(f, data[i+1:j])
			}
			i = j + 1
		case fInt, fInt64:
			x, n, ok := plainInt(data, i)
			if !ok {
				return nil, false
			}
			if f.typ == fInt {
				*(*int)(at) = int(x)
			} else {
				*(*int64)(at) = x
			}
			zero = x == 0
			i = n
		case fBool:
			switch {
			case hasPrefixAt(data, i, "true"):
				*(*bool)(at) = true
				i += 4
			case hasPrefixAt(data, i, "false"):
				zero = true
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
			if keep {
				*(**Instant)(at) = &Instant{Time: t}
			}
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
			if keep {
				*(*[]int)(at) = xs
			}
		case fStrings:
			// Plain strings only (policy ids): anything escaped goes to the
			// strict decoder.
			if i >= len(data) || data[i] != '[' {
				return nil, false
			}
			i++
			var xs []string
			for {
				if i >= len(data) || data[i] != '"' {
					return nil, false
				}
				j := i + 1 + plainRun(data[i+1:])
				if j >= len(data) || data[j] != '"' {
					return nil, false
				}
				xs = append(xs, string(data[i+1:j]))
				i = j + 1
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
			if keep {
				*(*[]string)(at) = xs
			}
		}
		// Instants and lists are never zero once read (a pointer; at
		// least one element).
		if f.omitEmpty && zero {
			return nil, false // the encoder would have left it out
		}
		if narrowed && keep && f.typ != fBool && !zero {
			checked = true
		}
	}
	for ; fi < len(c.fields); fi++ {
		if !c.fields[fi].omitEmpty {
			return nil, false
		}
	}
	if narrowed && checked {
		// A kept field with value rules holds a value: decoded whole and
		// validated, as if not narrowed.
		return c.decode(d, data, false)
	}
	if narrowed {
		return sc.p, true // what Only asked for: the values are not checked
	}
	if sc.p.Validate() != nil {
		return nil, false // let the strict decoder produce the error
	}
	return sc.p, true
}
