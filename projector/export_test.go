package projector

import "github.com/leaseledger/leaseledger/events"

// DecodePayloadForTest exposes the fast payload decoder to the tests.
func DecodePayloadForTest(k events.Kind, data []byte) (events.Payload, error) {
	return New().decodePayload(k, data)
}

// ParseEnvelopeForTest reports whether the fast envelope parser accepts raw.
func ParseEnvelopeForTest(raw []byte) bool {
	var e event
	return New().parseEnvelope(raw, &e)
}
