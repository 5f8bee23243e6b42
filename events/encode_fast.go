package events

// Payload encoding without reflection. Every payload type has a generated
// appendJSON method (in X_json.go beside the file X.go declaring the type:
// payloads_json.go, payloads_http_json.go, …, written by
// TestGeneratedEncoders from the types themselves) that appends exactly what encoding/json.Marshal
// writes for it; Prepare uses it and falls back to encoding/json only where
// that would fail (an Instant outside ValidTime), so errors stay the same.
//
// Guarantees and the tests that check them:
//   - appendJSON == encoding/json byte for byte, for every kind and random
//     field values (special characters, invalid UTF-8, bounds, nil and
//     invalid instants): TestFastEncodersMatchEncodingJSON;
//   - Prepare's result and errors equal the encoding/json path's:
//     TestPrepareFastMatchesReflect;
//   - the too-large refusal and the fallback to encoding/json's error
//     where an appender declines give the same errors on both paths:
//     TestEncodePreparedLimitAndFallback;
//   - Prepare takes only each kind's own payload type, so no other type
//     (one embedding it, one with its own MarshalJSON) inherits its
//     appender: TestPrepareRefusesOtherTypes;
//   - every generated file is what the generator writes from the current
//     types, none is missing and no other generated file exists, and the
//     generator refuses field types it cannot encode exactly:
//     TestGeneratedEncoders;
//   - an object whose members are all omitted closes as {}:
//     TestCloseJSONObjectEmpty.

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// jsonAppender is the generated encoder every payload type has.
type jsonAppender interface {
	// appendJSON appends the payload's encoding/json form to b; false
	// means encoding/json would fail, and b is then meaningless.
	appendJSON(b []byte) ([]byte, bool)
}

// appendJSONString appends s as encoding/json quotes it. Strings of
// printable ASCII with nothing to escape (the common case: identifiers,
// codes, digests) are copied; anything else is quoted by encoding/json
// itself, so HTML escapes, U+2028/U+2029 and invalid UTF-8 stay identical.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONInt appends v in decimal.
func appendJSONInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }

// appendJSONBool appends true or false.
func appendJSONBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// appendJSONInts appends a non-empty []int as a JSON array.
func appendJSONInts(b []byte, v []int) []byte {
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return append(b, ']')
}

// appendJSONStrings appends v as a JSON array of strings (the generator
// uses it only for omitempty fields, so never for a nil slice).
func appendJSONStrings(b []byte, v []string) []byte {
	b = append(b, '[')
	for i, s := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONInstant appends v as Instant.MarshalJSON writes it (null for
// nil); false when MarshalJSON would refuse it.
func appendJSONInstant(b []byte, v *Instant) ([]byte, bool) {
	if v == nil {
		return append(b, "null"...), true
	}
	if !ValidTime(v.Time) {
		return b, false
	}
	b = append(b, '"')
	b = appendTime(b, v.Time)
	return append(b, '"'), true
}

// closeJSONObject finishes an object whose members were appended from
// start on, each with a leading comma: the first comma becomes the opening
// brace (or "{}" when no member was written).
func closeJSONObject(b []byte, start int) []byte {
	if len(b) == start {
		return append(b, "{}"...)
	}
	b[start] = '{'
	return append(b, '}')
}
