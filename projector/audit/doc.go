// Package audit owns the audit views of the log: the fold of one
// activation's events into its audit (the projector's report, the resource
// request timelines and the event timeline) and the summary of every
// activation of a projector state. `leaseledger audit` and the projection
// API both return these types, so both give the same JSON.
//
// The package does no I/O and reads no clock: the caller reads the events
// (from a ledger, a replay stream) and feeds them, in seq order, to a
// [Fold]; [Summarize] reads a [projector.State] the caller built.
//
// # Stable output
//
// The JSON of [Activation] and [Summary] is a stable output: fields are
// only ever added. Lists are always present (an empty list is [], never
// null); every list is bounded by a named constant and the number of
// entries left out is always reported next to it. [Activation]:
//
//	{
//	  "report": {…},                // projector.ActivationReport (verdict, reasons, resources, close report, lease)
//	  "requests": [                 // resource request timelines, the first MaxRequests registered
//	    {"handle": "…", "owner": "…", "method": "…", "registered_seq": 7,
//	     "wire_ids": ["…"], "await_timeouts": 0,
//	     "completed": {…}, "cancelled": {…},   // the request.completed / request.cancelled payloads, when recorded
//	     "steps": ["<seq> <what happened>", …], // at most MaxSteps
//	     "steps_omitted": 0}
//	  ],
//	  "requests_omitted": 0,
//	  "timeline": [                 // the last Options.Timeline events, oldest first
//	    {"seq": 1, "time": "…", "kind": "…", "data": {…}}
//	  ],
//	  "timeline_omitted": 0
//	}
//
// [Summary]:
//
//	{
//	  "events": 1234, "activations": 3,
//	  "verdicts": {"confirmed": 1, "unconfirmed": 2, "never_started": 0},
//	  "not_closed": 1,              // unconfirmed activations with no close recorded
//	  "unconfirmed": [{"activation_id": "…", "closed": true, "reasons": ["…"], "reasons_omitted": 0}],
//	  "unconfirmed_omitted": 0,
//	  "anomalies": {…}              // projector.Anomalies
//	}
package audit
