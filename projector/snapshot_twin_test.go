package projector_test

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
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
// (decodeSnapshot) has the outcome of reading its header first: the same
// state from a valid snapshot, the same *FormatError for another format or
// version, ErrSnapshotCorrupt for the rest — over snapshots of generated
// logs and their damaged, truncated, extended and re-versioned forms.
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
		switch rapid.IntRange(0, 7).Draw(t, "damage") {
		case 0: // intact
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
		}
		fast, ferr := projector.Unmarshal(b)
		ref, rerr := projector.UnmarshalHeaderFirstForTest(b)
		if got, want := outcome(t, fast, ferr), outcome(t, ref, rerr); got != want {
			t.Fatalf("one pass: %s (%v)\nheader first: %s (%v)\ninput: %s", got, ferr, want, rerr, b)
		}
	})
}
