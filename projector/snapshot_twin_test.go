package projector_test

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseledger/leaseledger/projector"
	"pgregory.net/rapid"
)

// outcome classifies Unmarshal's result: the state's snapshot when it
// decoded, else the kind of error (a *FormatError's format and version,
// ErrSnapshotCorrupt, or anything else).
func outcome(t *rapid.T, s *projector.State, err error) string {
	var fe *projector.FormatError
	switch {
	case err == nil:
		return "ok " + string(mustMarshal(t, s))
	case errors.As(err, &fe):
		return fmt.Sprintf("format %q %d", fe.Format, fe.Version)
	case errors.Is(err, projector.ErrSnapshotCorrupt):
		return "corrupt"
	}
	return "other: " + err.Error()
}

// TestDecodeSnapshotTwin: the one-pass decoding of a snapshot
// (decodeSnapshot: the fast decoder, the reference when it refuses) has
// the outcome of the reference reading its header first: the same state
// from a valid snapshot, the same *FormatError for another format or
// version, ErrSnapshotCorrupt for the rest — over snapshots of generated
// logs and their damaged, truncated, extended and re-versioned forms,
// numbers and keys rewritten, members repeated, bytes that are not UTF-8.
// An intact snapshot is decoded by the fast decoder itself.
func TestDecodeSnapshotTwin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := projector.New()
		for _, e := range genLog(t) {
			if err := s.ApplyRaw(e.raw); err != nil {
				t.Fatal(err)
			}
		}
		b := mustMarshal(t, s)
		version := []byte(`"version":` + strconv.Itoa(projector.SnapshotVersion))
		damage := rapid.IntRange(0, 11).Draw(t, "damage")
		switch damage {
		case 0: // intact
			if !projector.DecodesFastForTest(b) {
				t.Fatalf("the fast decoder refused an intact snapshot: %s", b)
			}
		case 1: // another version
			v := rapid.IntRange(-2, projector.SnapshotVersion+2).Draw(t, "version")
			b = bytes.Replace(b, version, []byte(`"version":`+strconv.Itoa(v)), 1)
		case 2: // another format
			b = bytes.Replace(b, []byte(`"format":"`+projector.SnapshotFormat+`"`), []byte(`"format":"other"`), 1)
		case 3: // truncated
			b = b[:rapid.IntRange(0, len(b)-1).Draw(t, "cut")]
		case 4: // an unknown field, in the document or one of its entries
			at := rapid.IntRange(0, len(b)-1).Draw(t, "at")
			if i := bytes.IndexByte(b[at:], '{'); i >= 0 {
				at += i + 1
				b = append(b[:at:at], append([]byte(`"extra":1,`), b[at:]...)...)
			}
		case 5: // something after the document
			b = append(b, rapid.SampledFrom([]string{" ", "\n", "x", "{}", "0", ` {"format":"other"}`}).Draw(t, "tail")...)
		case 6: // one byte replaced
			at := rapid.IntRange(0, len(b)-1).Draw(t, "at")
			b = bytes.Clone(b)
			b[at] = rapid.SampledFrom([]byte(`{}[]":,0a-. `)).Draw(t, "byte")
		case 7: // another version whose fields this one does not know
			b = bytes.Replace(b, version, []byte(`"version":`+strconv.Itoa(projector.SnapshotVersion+1)+`,"later":{"x":1}`), 1)
		case 8: // a number written another way, valid JSON or not
			if from, to := numberAt(b, rapid.IntRange(0, len(b)-1).Draw(t, "at")); from >= 0 {
				form := rapid.SampledFrom([]string{"1e2", "-0", "0", "01", "1.0", "-1", "1.5", "18446744073709551616", "1e400", "+1", ".5", "1.", `"1"`, "null", "true"}).Draw(t, "number")
				b = append(b[:from:from], append([]byte(form), b[to:]...)...)
			}
		case 9: // a key in another case, or with an escaped letter
			key := rapid.SampledFrom([]string{"seq", "applied", "format", "leases", "activations"}).Draw(t, "key")
			as := rapid.SampledFrom([]string{strings.ToUpper(key), strings.ToUpper(key[:1]) + key[1:], `\u00` + strconv.FormatInt(int64(key[0]), 16) + key[1:]}).Draw(t, "as")
			b = bytes.Replace(b, []byte(`"`+key+`":`), []byte(`"`+as+`":`), 1)
		case 10: // a member repeated, with its value or another
			key := rapid.SampledFrom([]string{"seq", "applied", "format", "version", "host"}).Draw(t, "key")
			value := rapid.SampledFrom([]string{"0", "1", `"x"`, "null", "{}"}).Draw(t, "value")
			b = bytes.Replace(b, []byte(`{"`), []byte(`{"`+key+`":`+value+`,"`), 1)
		case 11: // bytes that are not UTF-8, or a control character, after a quote
			at := rapid.IntRange(0, len(b)-1).Draw(t, "at")
			if i := bytes.IndexByte(b[at:], '"'); i >= 0 {
				at += i + 1
				bad := rapid.SampledFrom([]string{"\xff", "\xc3\x28", "\x01", "\t", `\ud800`}).Draw(t, "bad")
				b = append(b[:at:at], append([]byte(bad), b[at:]...)...)
			}
		}
		fast, ferr := projector.Unmarshal(b)
		ref, rerr := projector.UnmarshalHeaderFirstForTest(b)
		if got, want := outcome(t, fast, ferr), outcome(t, ref, rerr); got != want {
			t.Fatalf("one pass: %s (%v)\nheader first: %s (%v)\ninput: %s", got, ferr, want, rerr, b)
		}
	})
}

// numberAt returns the bounds of the first number value (after a member's
// colon) at or after from in b, or -1, -1.
func numberAt(b []byte, from int) (int, int) {
	for i := from; i+2 < len(b); i++ {
		if b[i] == '"' && b[i+1] == ':' && (b[i+2] == '-' || b[i+2] >= '0' && b[i+2] <= '9') {
			end := i + 3
			for end < len(b) && strings.IndexByte("0123456789.eE+-", b[end]) >= 0 {
				end++
			}
			return i + 2, end
		}
	}
	return -1, -1
}
