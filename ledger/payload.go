package ledger

// The payload hand-off: BeforeAck gets each Append/AppendAcks draft's
// payload in Record.Payload, so that the live projection need not decode
// again the bytes the writer just encoded. A payload is the caller's value,
// which the caller may modify again once its call has returned, so the
// hand-off holds while the call waits and never after:
//
//   - the syncer hands a call's payloads to BeforeAck only after claiming
//     them (waiting → claimed); a call whose appender gave up first
//     (waiting → abandoned: its context ended, Append returned
//     ErrUnacknowledged) has them withheld, and BeforeAck decodes those
//     events' stored bytes (TestAbandonedPayloadWithheld);
//   - an appender whose context ends after the claim waits for BeforeAck to
//     finish, then returns the call's acknowledgement: the claim is made
//     after the fsync, so the events are durable and the wait is
//     BeforeAck's (TestClaimedPayloadWaitsForBeforeAck);
//   - after BeforeAck the syncer clears every Payload, so Watch observers
//     never see one (TestBeforeAckPayload).

// States of a call's payloads (appendReq.payloadState).
const (
	payloadWaiting   = iota // the appender waits: BeforeAck may be handed them
	payloadClaimed          // the syncer is handing them to BeforeAck
	payloadAbandoned        // the appender returned: they are its own again
)

// claimPayloads is the syncer's claim of r's payloads for BeforeAck.
func (r *appendReq) claimPayloads() bool {
	return r.payloadState.CompareAndSwap(payloadWaiting, payloadClaimed)
}

// abandonPayloads is the appender taking its payloads back as it gives up
// waiting; false means the syncer has claimed them, and the call is
// acknowledged once BeforeAck returns.
func (r *appendReq) abandonPayloads() bool {
	return r.payloads == nil || r.payloadState.CompareAndSwap(payloadWaiting, payloadAbandoned)
}

// handPayloads withholds from records, before BeforeAck, the payloads of
// calls whose appenders have given up, and claims the others'.
func handPayloads(records []Record) {
	var owner *appendReq
	claimed := false
	for i := range records {
		rec := &records[i]
		if rec.owner == nil {
			continue
		}
		if rec.owner != owner {
			owner, claimed = rec.owner, rec.owner.claimPayloads()
		}
		if !claimed {
			rec.Payload = nil
		}
	}
}

// takePayloads clears records' payloads after BeforeAck: they are their
// appenders' again.
func takePayloads(records []Record) {
	for i := range records {
		records[i].Payload, records[i].owner = nil, nil
	}
}
