// Package guardian owns verified stdio: running an MCP server (the target)
// under a separate helper process that is its actual parent, relaying the
// target's stdio as bounded packet-4 frames, and collecting the helper's
// receipt of what cleanup really happened.
//
// This package holds the frame protocol shared by both sides (frames, hello,
// launch request, receipt) and the host side: Launch finds and starts the
// helper (cmd/leaseledger-guardian), checks its version before any target
// exists, and returns a Session whose Read/Write carry the target's
// stdout/stdin and whose Close runs the cleanup sequence and returns a
// CleanupResult. The helper side is package guardian/helper.
//
// The package returns facts; it knows nothing of the ledger or the bus. The
// runtime turns a CleanupResult into guardian.* events (Started, Signal,
// Reaped, Receipt, Lost). See docs/guardian.md for the protocol, the cleanup
// sequence and the confirmation rules, and for what is out of scope: there
// is no process-tree guarantee beyond the direct child, the helper and the
// helper-owned pipes.
package guardian
