// Package audit owns the audit views of the log: the fold of one
// activation's events into its audit (the projector's report, the resource
// request timelines, the HTTP request timelines with their redirect hops
// and barriers, and the event timeline) and the summary of every
// activation of a projector state. `leaseledger audit` prints these types
// and every other view of the audit (such as a bus API) returns them, so
// all give the same JSON.
//
// The package does no I/O and reads no clock: the caller reads the events
// (from a ledger, a replay stream) and feeds them, in seq order, to a
// [Fold]; [Summarize] reads a [projector.State] the caller built.
//
// # Stable output
//
// The JSON of [Activation] and [Summary] is a stable output: fields are
// only ever added. Lists are present (an empty list is [], never null)
// except where marked optional; every list is bounded by a named constant
// and the number of entries left out is reported next to it. [Activation]:
//
//	{
//	  "report": {…},                // projector.ActivationReport (verdict, reasons, resources, close report, lease)
//	  "requests": [                 // resource request timelines, the first MaxRequests registered
//	    {"handle": "…", "owner": "…", "method": "…", "registered_seq": 7,
//	     "wire_ids": ["…"], "wire_ids_omitted": 0, // optional; at most projector.MaxWireIDs
//	     "await_timeouts": 0,
//	     "completed": {…}, "cancelled": {…},   // the request.completed / request.cancelled payloads, when recorded
//	     "steps": ["<seq> <what happened>", …], // at most MaxSteps
//	     "steps_omitted": 0}
//	  ],
//	  "requests_omitted": 0,
//	  "http_requests": [            // HTTP request timelines, the first MaxHTTPRequests registered
//	    {"ref": "h-1", "scope": "request", "method": "POST", "origin": "https://…", "registered_seq": 3,
//	     "status": "confirmed", "reason": "…",  // the request's evidence status (projector)
//	     "hops": [                  // redirect hops in recorded order, at most MaxHops
//	       {"hop": 1, "hop_ref": "h-1-1", "seq": 4, "redirect_status": 307,
//	        "from_origin": "https://…", "to_origin": "https://…", "same_origin": true,
//	        "status": "confirmed", "reason": "…",
//	        "barriers": [{"seq": 5, "outcome": "ok", "late": false}], "barriers_omitted": 0,
//	        "worker_down": {…}, "lost": {…}}      // recorded for the hop's own reference
//	     ],
//	     "hops_omitted": 0,
//	     "completed": {…},          // the http.completed payload (outcome ok/error/timeout/aborted, detail)
//	     "barriers": [{"seq": 7, "outcome": "ok"}], "barriers_omitted": 0, // at most MaxBarriers
//	     "worker_down": {…}, "lost": {…},      // the http.worker_down / http.lost payloads
//	     "steps": ["<seq> <what happened>", …], "steps_omitted": 0}
//	  ],
//	  "http_requests_omitted": 0,
//	  "timeline": [                 // the last Options.Timeline events, oldest first
//	    {"seq": 1, "time": "…", "kind": "…", "data": {…}}
//	  ],
//	  "timeline_omitted": 0,
//	  "calls_outcome_unknown": [    // admitted calls with no call.finished, at most MaxUnknownCalls
//	    {"call_id": "…", "tool": "…", "session": "…", "admitted_seq": 9,
//	     "state": "running"}       // or "lost": its lease ended with it unpaired
//	  ],
//	  "calls_outcome_unknown_omitted": 0,
//	  "acquire_failed": {           // optional: the first lease.acquire_failed, with its cause
//	    "seq": 2, "reason": "initialize_failed", "duration_ns": 1000,
//	    "cause": "connection_refused", "target": "127.0.0.1:3011", // optional
//	    "http_status": 503,         // optional, cause http_status
//	    "exit_code": 3, "signal": "KILL"}, // optional, cause process_exited: guardian.reaped's wait status
//	  "access_denied": [            // what the access policy denied it, in seq order, at most MaxDenials
//	    {"seq": 11, "action": "call_tool", "session": "…",
//	     "call_id": "…", "tool": "…",          // call_tool (call.refused reason policy) only
//	     "target_sha256": "…",                 // optional: the prompt name's or resource URI's SHA-256
//	     "policies": ["no-delete"],            // the forbids that denied it; []: no permit applied
//	     "policies_omitted": 0,                // optional: those its record left out
//	     "policy_digest": "…"}                 // the policy set that decided (policy.loaded)
//	  ],
//	  "access_denied_omitted": 0
//	}
//
// The report's "access" (optional: none decided) counts every decision of
// the access policy naming the activation, allowed and denied:
//
//	{"allowed": 3, "denied": 2,
//	 "actions": {"call_tool": {"allowed": 2, "denied": 1}, "read_resource": {"denied": 1}, …},
//	 "policies": {"readers": {"allowed": 3}, "no-delete": {"denied": 1}, "(no permit)": {"denied": 1}, …},
//	 "policies_omitted": 0}        // optional
//
// where a denial naming no policy counts under "(no permit)", an allowed
// decision naming none under "(unnamed)", and the ids past
// projector.MaxAccessPolicies under "(other)".
//
// [Summary]:
//
//	{
//	  "events": 1234, "activations": 3,
//	  "verdicts": {"confirmed": 1, "unconfirmed": 2, "unverified": 0, "never_started": 0},
//	  "not_closed": 1,              // unconfirmed activations with no close recorded
//	  "unconfirmed": [{"activation_id": "…", "closed": true, "reasons": ["…"], "reasons_omitted": 0}],
//	  "unconfirmed_omitted": 0,
//	  "anomalies": {…},             // projector.Anomalies
//	  "host": "…",                  // optional: the host the chain is bound to
//	  "policy": {                   // projector.PolicyReport
//	    "in_force": {"seq": 12, "at": "…", "trigger": "reload", "mode": "enforced",
//	                 "digest": "…", "policies": 4}, // optional: the last policy.loaded; digest enforced only
//	    "loads": 3,                 // every policy.loaded
//	    "recent": [{…}],            // optional: the last projector.MaxPolicyLoads, oldest first
//	    "loads_omitted": 0,         // optional: the earlier ones no longer kept
//	    "decisions": {…}}           // optional: every decision, as an activation report's "access"
//	}
package audit
