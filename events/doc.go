// Package events owns the leaseledger event vocabulary: the envelope every
// ledger record shares, one Go type per event kind, the registry of kinds,
// the deterministic canonical JSON encoding, the hash chain, and validation.
//
// The package does no I/O. Everything that is written to the ledger passes
// through [Prepare] (validation and canonical payload bytes, done in the
// caller's goroutine) and [Seal] (sequence number, ULID, time and chain hash,
// done by the ledger's single committer). Everything read back passes
// through [Decode], which refuses bytes that are not exactly canonical.
//
// Events record facts (a wait status, a pipe close, a hop's status), never
// verdicts: verdicts are computed by the projector so that an auditor can
// recompute them from the log alone.
package events
