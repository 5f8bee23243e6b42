package projector

import "github.com/leaseledger/leaseledger/events"

// DecodePayloadForTest exposes the State's payload decoding to the tests.
func DecodePayloadForTest(k events.Kind, data []byte) (events.Payload, error) {
	return New().dec.DecodePayload(k, data)
}
