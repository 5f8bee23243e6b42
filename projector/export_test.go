package projector

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/leaseledger/leaseledger/events"
)

// DecodePayloadForTest exposes the State's payload decoding to the tests.
func DecodePayloadForTest(k events.Kind, data []byte) (events.Payload, error) {
	return New().dec.DecodePayload(k, data)
}

// UnmarshalStrictForTest is Unmarshal with the reference decoder alone
// (encoding/json, one pass): the baseline of BenchmarkUnmarshalSnapshot.
func UnmarshalStrictForTest(b []byte) (*State, error) {
	var w snapshotWire
	if err := decodeSnapshotWith(b, &w, func() snapshotHeader { return snapshotHeader{w.Format, w.Version} }, false); err != nil {
		return nil, err
	}
	return restoreState(&w)
}

// DecodesFastForTest reports whether the fast decoder alone accepts b as
// a state's snapshot document (decodeFast).
func DecodesFastForTest(b []byte) bool {
	var w snapshotWire
	return decodeFast(b, &w)
}

// UnmarshalHeaderFirstForTest is Unmarshal as it read a snapshot before
// decodeSnapshot: the header (format, version) decoded and checked first,
// then the whole document — the reference of TestDecodeSnapshotTwin.
func UnmarshalHeaderFirstForTest(b []byte) (*State, error) {
	var h snapshotHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	if h.Format != SnapshotFormat || h.Version != SnapshotVersion {
		return nil, &FormatError{Format: h.Format, Version: h.Version}
	}
	var w snapshotWire
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	return restoreState(&w)
}
