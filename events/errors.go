package events

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Errors callers branch on. Every validation failure wraps ErrInvalid;
// the more specific sentinels wrap it too, so errors.Is(err, ErrInvalid)
// holds for all of them.
var (
	// ErrInvalid marks an event (or input line) that violates the vocabulary.
	ErrInvalid = errors.New("invalid event")
	// ErrUnknownKind marks a kind that is not in the registry.
	ErrUnknownKind = fmt.Errorf("%w: unknown kind", ErrInvalid)
	// ErrTooLarge marks an event or payload over its named size bound.
	ErrTooLarge = fmt.Errorf("%w: too large", ErrInvalid)
)

// FieldError says which field of an event is invalid and why. It wraps
// ErrInvalid. The reason is static text; the offending value is never
// echoed, because it may be provider-controlled.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid event: field %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, reason string) error { return &FieldError{Field: field, Reason: reason} }

// IDRule is the identifier rule as error messages and docs state it.
const IDRule = "[A-Za-z0-9_-]{1,128}"

// ValidID reports whether s is a valid activation, session or server
// identifier: [IDRule]. Such identifiers become NATS subject tokens, so
// nothing else is accepted.
func ValidID(s string) bool { return matchClass(s, 1, MaxIDLen, isIDByte) }

// ValidToolName reports whether s is a valid MCP tool name as the host names
// it in events: [A-Za-z0-9_./-]{1,128}.
func ValidToolName(s string) bool { return matchClass(s, 1, MaxToolNameLen, isToolByte) }

// ValidDigest reports whether s is a SHA-256 digest in lowercase hex, the
// form of every digest in an event (schemas, listings, fingerprints).
func ValidDigest(s string) bool { return isHex64(s) }

// ValidCode reports whether s is a machine-readable reason or label:
// [a-z0-9_]{1,64}.
func ValidCode(s string) bool { return matchClass(s, 1, MaxCodeLen, isCodeByte) }

// Bounds of tool names and codes.
const (
	// MaxToolNameLen bounds a tool name in an event.
	MaxToolNameLen = 128
	// MaxCodeLen bounds a reason or label code.
	MaxCodeLen = 64
)

// matchClass reports whether s has between lo and hi bytes, all in class.
// The checks below are hand-written loops instead of regexps because every
// appended event runs several of them on the hot path.
func matchClass(s string, lo, hi int, class func(byte) bool) bool {
	if len(s) < lo || len(s) > hi {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !class(s[i]) {
			return false
		}
	}
	return true
}

func isIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func isCodeByte(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' }

func isToolByte(c byte) bool { return isIDByte(c) || c == '.' || c == '/' }

func validateIDs(activation, session, server string) error {
	for _, f := range [...]struct{ name, v string }{{"activation", activation}, {"session", session}, {"server", server}} {
		if f.v != "" && !ValidID(f.v) {
			return invalid(f.name, "want "+IDRule)
		}
	}
	if activation == NoActivation {
		return invalid("activation", `"_" is reserved for events without activation`)
	}
	return nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checks runs field validations in order and returns the first failure.
type checks []error

func (c checks) first() error {
	for _, err := range c {
		if err != nil {
			return err
		}
	}
	return nil
}

// Field validators. Each returns nil or a *FieldError naming the field.

func digest(field, v string) error {
	if !isHex64(v) {
		return invalid(field, "want 64 lowercase hex digits (SHA-256)")
	}
	return nil
}

func optDigest(field, v string) error {
	if v == "" {
		return nil
	}
	return digest(field, v)
}

// code is a machine-readable reason or label: [a-z0-9_]{1,64}.
func code(field, v string) error {
	if !ValidCode(v) {
		return invalid(field, "want [a-z0-9_]{1,64}")
	}
	return nil
}

func optCode(field, v string) error {
	if v == "" {
		return nil
	}
	return code(field, v)
}

func id(field, v string) error {
	if !ValidID(v) {
		return invalid(field, "want "+IDRule)
	}
	return nil
}

// toolName validates an MCP tool name as the host names it.
func toolName(field, v string) error {
	if !ValidToolName(v) {
		return invalid(field, "want [A-Za-z0-9_./-]{1,128}")
	}
	return nil
}

// MaxTextLen bounds free-text payload fields (origins, methods, URIs'
// digests are used instead of URIs).
const MaxTextLen = 512

func text(field, v string, required bool) error {
	if required && v == "" {
		return invalid(field, "required")
	}
	if len(v) > MaxTextLen {
		return invalid(field, fmt.Sprintf("longer than MaxTextLen=%d", MaxTextLen))
	}
	// Invalid UTF-8 would not survive the JSON round trip (encoding/json
	// writes it as \ufffd, which decodes to a different string), and the
	// stored event could then never be decoded canonically again.
	if !utf8.ValidString(v) {
		return invalid(field, "not valid UTF-8")
	}
	return nil
}

func positive(field string, v int64) error {
	if v <= 0 {
		return invalid(field, "must be positive")
	}
	return nil
}

func nonNegative(field string, v int64) error {
	if v < 0 {
		return invalid(field, "must not be negative")
	}
	return nil
}

func between(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return invalid(field, fmt.Sprintf("must be in [%d, %d]", lo, hi))
	}
	return nil
}

// MaxPIDList bounds lists of process IDs in guardian facts.
const MaxPIDList = 256

func pids(field string, v []int) error {
	if len(v) > MaxPIDList {
		return invalid(field, fmt.Sprintf("more than MaxPIDList=%d entries", MaxPIDList))
	}
	for _, p := range v {
		if p <= 0 {
			return invalid(field, "pids must be positive")
		}
	}
	return nil
}

// Time range the canonical layout can represent: four-digit years. Every
// time written into an event (envelope time or fact) must lie within it.
var (
	minTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC) // ULID timestamps start at the Unix epoch
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// ValidTime reports whether t can be written canonically: between the Unix
// epoch and the end of year 9999.
func ValidTime(t time.Time) bool { return !t.Before(minTime) && !t.After(maxTime) }

func instant(field string, v *Instant, required bool) error {
	if v == nil {
		if required {
			return invalid(field, "required")
		}
		return nil
	}
	if !ValidTime(v.Time) {
		return invalid(field, "outside 1970-01-01 … 9999-12-31")
	}
	return nil
}
