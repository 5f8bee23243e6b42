// Package projector owns the one reducer of leaseledger: a pure
// [Apply](state, event) that folds committed events, in seq order, into the
// reports that the runtime reads live and that compliance tooling rebuilds
// by replay. It owns five projections and their snapshot format:
//
//  1. Evidence, per activation: every owned resource (a guardian-supervised
//     child, an HTTP request and each of its redirect hops) with its status
//     (pending, confirmed, missing, unsupported, lost) and the facts that led
//     there; the [RecentReceipts] most recent confirmed receipts
//     individually, older ones folded into exact per-scope aggregate
//     resources {activation_id, "confirmed_history:<scope>"}; frozen by the
//     activation's close.
//  2. Connections and close reports: phase active → closing → closed (never
//     backwards), the four close obligations and the version-1 close report,
//     confirmed only when every obligation is.
//  3. Leases by (session or shared key, server): state, pinned fingerprint
//     and listing digest, calls in flight, last use.
//  4. Requests by owner and handle: registration, every wire ID, completion,
//     timed-out awaits, cancellation reports and owner end.
//  5. Open sessions: who opened each (principal, transport) and when,
//     dropped at the session's end.
//
// The package does no I/O and reads no clock: every time it stores is an
// envelope time or a fact time from the log. Events record facts; every
// verdict (confirmed or unconfirmed, and why) is computed here, so that an
// auditor holding the log computes exactly the same verdicts.
//
// Replay is live: [State.Apply] (used by the live wiring on each committed
// batch), [State.ApplyRaw] (used by replay over stored bytes) and
// [Unmarshal] of a snapshot followed by the tail all give byte-identical
// [Marshal] output. The package imports only events and the standard
// library; package projector/live is the glue that connects it to a ledger.
//
// Memory is bounded by live state when the State has an [Archive]: retired
// activations (closed or never started, named by no lease; see
// [State.Evict]) leave memory once a snapshot holds them ([MarshalLive] for
// the live part, [MarshalActivation] per retired activation) and are loaded
// back for any later event, giving exactly the results of a State that kept
// them. With an [OwnerArchive], ended request owners without handles leave
// memory and the live part the same way ([MarshalOwner]).
package projector
