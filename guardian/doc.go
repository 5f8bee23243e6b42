// Package guardian owns verified stdio on the host side: running an MCP
// server (the target) under a separate helper process that is its actual
// parent, relaying the target's stdio through the helper, and turning the
// helper's receipt into a CleanupResult that says whether cleanup is
// confirmed.
//
// A host needs only Spec, Launch, Session and CleanupResult. Launch finds
// and starts the helper (cmd/leaseledger-guardian), checks its version
// before any target exists, and returns a Session whose Read/Write carry
// the target's stdout/stdin and whose Close runs the cleanup sequence. The
// helper process is package guardian/helper; the frame protocol both sides
// speak is the internal package guardian/internal/wire.
//
// The package returns facts; it knows nothing of the ledger or the bus. The
// runtime turns a CleanupResult into guardian.* events (Started, Signal,
// Reaped, Receipt, Lost). See docs/guardian.md for the protocol, the cleanup
// sequence and the confirmation rules, and for what is out of scope: there
// is no process-tree guarantee beyond the direct child, the helper and the
// helper-owned pipes.
package guardian
